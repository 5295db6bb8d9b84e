#include "minigpt/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
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
}

}  // namespace minigpt
