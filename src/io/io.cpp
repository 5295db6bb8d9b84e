#include "io/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "minigpt/error.h"

namespace minigpt {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Appends what `fd` yields to `out` until EOF; false when it would pass `max_bytes`.
bool read_all(int fd, std::string& out, size_t max_bytes, const std::string& source) {
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::Io, source + ": read failed: " + std::strerror(errno));
    }
    if (out.size() + size_t(n) > max_bytes) return false;
    out.append(buf, size_t(n));
  }
}

}  // namespace

void pread_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& source) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, size_t(std::min<uint64_t>(n, uint64_t(1) << 30)), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw Error(ErrorKind::Io,
                  source + ": read failed at byte " + std::to_string(offset) + ": " +
                      (got == 0 ? "the file is shorter than when it was opened" : std::strerror(errno)));
    }
    p += got, offset += uint64_t(got), n -= uint64_t(got);
  }
}

ByteSource ByteSource::open_file(const std::filesystem::path& path) {
  ByteSource b;
  b.source_ = path.string();
  b.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // O_NONBLOCK: a FIFO must not hang
  if (b.fd_ < 0) throw Error(ErrorKind::Io, b.source_ + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(b.fd_, &st) != 0)
    throw Error(ErrorKind::Io, b.source_ + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::Io, b.source_ + ": not a regular file");
  b.size_ = uint64_t(st.st_size);
  return b;
}

ByteSource ByteSource::in_memory(const uint8_t* bytes, uint64_t size, std::string source) {
  ByteSource b;
  b.source_ = std::move(source);
  b.image_ = bytes;
  b.size_ = size;
  return b;
}

ByteSource::~ByteSource() {
  if (fd_ >= 0) ::close(fd_);
}

ByteSource::ByteSource(ByteSource&& o) noexcept
    : source_(std::move(o.source_)), fd_(o.fd_), image_(o.image_), size_(o.size_) {
  o.fd_ = -1;
}

ByteSource& ByteSource::operator=(ByteSource&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    source_ = std::move(o.source_);
    fd_ = o.fd_;
    image_ = o.image_;
    size_ = o.size_;
    o.fd_ = -1;
  }
  return *this;
}

void ByteSource::fetch(void* dst, uint64_t n, uint64_t offset) const {
  if (offset > size_ || n > size_ - offset) {
    throw Error(ErrorKind::Io, source_ + ": reading " + std::to_string(n) + " bytes at " +
                                   std::to_string(offset) + " past the end of the file");
  }
  if (image_ != nullptr) {
    std::memcpy(dst, image_ + offset, size_t(n));
    return;
  }
  pread_exact(fd_, dst, n, offset, source_);
}

std::string format_bytes(size_t bytes) {
  char b[32];
  if (bytes >= (size_t(1) << 30) && bytes % (size_t(1) << 30) != 0) {
    std::snprintf(b, sizeof b, "%.1f GiB", double(bytes) / double(size_t(1) << 30));
  } else if (bytes >= (size_t(1) << 30)) {
    std::snprintf(b, sizeof b, "%zu GiB", bytes >> 30);
  } else if (bytes >= (size_t(1) << 20)) {
    std::snprintf(b, sizeof b, "%zu MiB", bytes >> 20);
  } else {
    std::snprintf(b, sizeof b, "%zu bytes", bytes);
  }
  return b;
}

void require_regular_file(const std::filesystem::path& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::Io,
                path.string() + ": the " + what + " is " + file_kind(st.st_mode) + ", not a regular file");
  }
}

std::string read_regular_file(const std::filesystem::path& path, size_t max_bytes, const std::string& what) {
  const std::string source = path.string();
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(ErrorKind::Io, source + ": cannot open the " + what + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(ErrorKind::Io, source + ": cannot stat the " + what + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::Io,
                source + ": the " + what + " is " + file_kind(st.st_mode) + ", not a regular file");
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    throw Error(ErrorKind::Io, source + ": the " + what + " is " + std::to_string(st.st_size) +
                                   " bytes, more than the " + format_bytes(max_bytes) + " a " + what +
                                   " may have");
  }
  std::string out;
  out.reserve(size_t(st.st_size));
  bool ok = false;
  try {
    ok = read_all(fd, out, max_bytes, source);  // a file that grows while read is still capped
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (!ok) {
    throw Error(ErrorKind::Io, source + ": the " + what + " grew past the " + format_bytes(max_bytes) +
                                   " a " + what + " may have while it was read");
  }
  return out;
}

std::string read_fd_capped(int fd, size_t max_bytes, const std::string& source) {
  std::string out;
  if (!read_all(fd, out, max_bytes, source)) {
    throw Error(ErrorKind::Io, source + ": more than " + format_bytes(max_bytes) + " of input (the limit)");
  }
  return out;
}

namespace {
constexpr size_t kAtomicBuffer = size_t(1) << 20;

// The temporaries of the AtomicFiles being written, for a signal that ends the process (Ctrl-C in a long
// quantize or perplexity --save-logits, a closed pipe, SIGTERM): its handler removes them, then lets the
// signal end the process as it would have. Only what a handler may do: lock-free atomics, unlink, sigaction.
// A slot is 0 free, 1 being filled, 2 a path to remove.
constexpr int kTempSlots = 32;
struct TempSlot {
  std::atomic<int> state{0};
  char path[4096];
};
TempSlot g_temps[kTempSlots];
// Every signal whose default action ends the process and that a handler can catch (SIGUSR1, SIGUSR2 and
// SIGALRM left a temporary behind).
constexpr int kFatalSignals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,   SIGPIPE, SIGXFSZ,
                                 SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU};

extern "C" void remove_temporaries_and_reraise(int sig) {
  const int saved = errno;
  for (TempSlot& t : g_temps) {
    if (t.state.load() == 2) ::unlink(t.path);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  errno = saved;
  ::raise(sig);  // delivered when the handler returns (the signal is blocked while it runs): the default end
}

// Installs the handler for each fatal signal whose action is still the default, once per process; a
// signal the program handles itself (generate's and serve's Ctrl-C) or ignores keeps its handler, and the
// AtomicFile's destructor removes the temporary on that way out.
void install_cleanup_handlers() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  for (int sig : kFatalSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
      continue;
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_and_reraise;
    sigemptyset(&sa.sa_mask);
    for (int other : kFatalSignals) sigaddset(&sa.sa_mask, other);  // one handler at a time
    ::sigaction(sig, &sa, nullptr);
  }
}

// The slot now holding `path`, or -1 (all taken, or a path too long: then it is only removed by the
// destructor).
int register_temporary(const std::string& path) {
  if (path.size() >= sizeof(TempSlot::path)) return -1;
  install_cleanup_handlers();
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (!g_temps[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_temps[i].path, path.c_str(), path.size() + 1);
    g_temps[i].state.store(2);
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0);
}

// `path`, or the file its chain of symbolic links leads to (a relative link is read from the link's folder).
std::filesystem::path follow_links(std::filesystem::path path, const std::string& what) {
  namespace fs = std::filesystem;
  for (int hops = 0;; ++hops) {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(path, ec);
    if (ec || st.type() != fs::file_type::symlink) return path;
    if (hops == 40) throw Error(ErrorKind::Io, what + ": too many levels of symbolic links");
    fs::path to = fs::read_symlink(path, ec);
    if (ec) throw Error(ErrorKind::Io, what + ": cannot read the symbolic link: " + ec.message());
    path = to.is_absolute() ? to : path.parent_path() / to;
  }
}
}  // namespace

AtomicFile::AtomicFile(const std::filesystem::path& path, std::string what)
    : target_(follow_links(path, what)), what_(std::move(what)) {
  struct stat st;
  if (::stat(target_.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      throw Error(ErrorKind::Io,
                  what_ + ": is " + file_kind(st.st_mode) +
                      ", not a regular file (minigpt writes a new file and renames it over the "
                      "old one, which would replace it: give a file name)");
    }
    mode_ = st.st_mode & 0777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode_ = 0666 & ~mask;
  }
  const std::filesystem::path dir = target_.parent_path().empty() ? "." : target_.parent_path();
  std::string name = target_.filename().string();  // hidden: ".NAME.tmp.XXXXXX"
  name.insert(name.begin(), '.');
  name += ".tmp.XXXXXX";
  tmp_ = (dir / name).string();
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) {
    const int err = errno;
    tmp_.clear();
    throw Error(ErrorKind::Io, what_ + ": cannot create a file there: " + std::strerror(err));
  }
  slot_ = register_temporary(tmp_);
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  unregister_temporary(slot_);
}

void AtomicFile::fail(const std::string& doing, int err) {
  throw Error(ErrorKind::Io, what_ + ": " + doing + ": " + std::strerror(err));
}

void AtomicFile::flush() {
  size_t done = 0;
  while (done < buf_.size()) {
    const ssize_t n = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing failed", n < 0 ? errno : EIO);
    done += size_t(n);
  }
  buf_.clear();
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) throw Error(ErrorKind::Io, what_ + ": written after commit");
  const char* p = static_cast<const char*>(data);
  size_ += n;
  while (n > 0) {
    const size_t take = std::min(n, kAtomicBuffer - buf_.size());
    buf_.append(p, take);
    p += take;
    n -= take;
    if (buf_.size() == kAtomicBuffer) flush();
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(ErrorKind::Io, what_ + ": committed twice");
  flush();
  if (::fchmod(fd_, mode_) != 0) fail("writing failed", errno);
  if (::fsync(fd_) != 0) fail("writing failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("writing failed", errno);
  // Checked again: the destination may have become something else while the file was written.
  struct stat st;
  if (::stat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::Io, what_ + ": became " + file_kind(st.st_mode) + " while the file was written");
  }
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0)
    fail("cannot rename the finished file into place", errno);
  committed_ = true;
  unregister_temporary(slot_);  // after the rename: a signal in between finds no temporary to remove
}

}  // namespace minigpt
