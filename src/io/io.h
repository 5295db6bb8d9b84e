// Reading the files and streams a user points minigpt at. Only regular files are read, each kind with a
// size cap: a FIFO would block forever, /dev/zero (or a symlink to it) would grow memory without bound, and
// a directory would read as empty. Each refusal is one line naming the file and what is wrong.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace minigpt {

// Size caps by kind of file. Far above any real file of that kind (GPT-2's tokenizer.json is 3.5 MB, a
// 256k-token vocabulary's about 35 MB), far below what would exhaust a machine.
inline constexpr size_t kMaxConfigBytes = size_t(16) << 20;      // config.json, *_config.json, index.json
inline constexpr size_t kMaxTokenizerBytes = size_t(256) << 20;  // tokenizer.json, vocab.json, merges.txt
inline constexpr size_t kMaxTextBytes = size_t(256) << 20;       // prompts and texts (--file, stdin)

// The whole content of the regular file `path`. Throws Error(Io) naming `path` when it is missing, not a
// regular file (directory, FIFO, device, socket), unreadable, or larger than `max_bytes`; `what` says what
// the file is for in that message ("prompt file", "config").
std::string read_regular_file(const std::filesystem::path& path, size_t max_bytes, const std::string& what);

// Throws Error(Io) "PATH: the WHAT is a FIFO, not a regular file" (a directory, a device, a socket) when
// `path` exists and is not a regular file; checked with stat, so a FIFO is never opened (opening one waits
// for a writer). A missing path passes: the open that follows reports it.
void require_regular_file(const std::filesystem::path& path, const std::string& what);

// Everything readable from file descriptor `fd` (stdin: a pipe, a file, a device) until end of file, at most
// `max_bytes`: more is an Error(Io) naming `source`. Never opens anything, so a pipe is read as it comes.
std::string read_fd_capped(int fd, size_t max_bytes, const std::string& source);

// Reads exactly `n` bytes at `offset` of the open file `fd` into `dst` (pread, in pieces of at most 1 GiB,
// retried on EINTR). Throws Error(Io) naming `source` when a read fails or the file ends first (it shrank
// after it was checked).
void pread_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& source);

// The bytes of a checkpoint read in pieces: a regular file kept open, or an image in memory (tests, fuzz
// targets). Every read is checked against the size first, so a header's offsets and sizes never reach past
// the end, whatever they say.
class ByteSource {
 public:
  ByteSource() = default;
  // Opens `path` (O_NONBLOCK: a FIFO is refused, never waited on). Throws Error(Io) naming it when it cannot
  // be opened or is not a regular file.
  static ByteSource open_file(const std::filesystem::path& path);
  // `bytes` must outlive the object; `source` names it in messages.
  static ByteSource in_memory(const uint8_t* bytes, uint64_t size, std::string source);
  ~ByteSource();
  ByteSource(ByteSource&& o) noexcept;
  ByteSource& operator=(ByteSource&& o) noexcept;
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  uint64_t size() const { return size_; }
  const std::string& source() const { return source_; }
  // n bytes at `offset` into dst. Throws Error(Io) "SOURCE: reading N bytes at OFFSET past the end of the
  // file" when they are not all inside it, or when the read fails (the file shrank).
  void fetch(void* dst, uint64_t n, uint64_t offset) const;

 private:
  std::string source_;
  int fd_ = -1;
  const uint8_t* image_ = nullptr;
  uint64_t size_ = 0;
};

// A file written whole or not at all. The bytes go to a temporary file beside the destination (mkstemp: a
// name nobody has, so nothing of the user's is touched while writing) that commit() renames over it;
// destroyed uncommitted (an error, an exception), it removes the temporary and leaves the destination as it
// was. The destination must be a regular file or not exist yet: a device (/dev/null, /dev/full), a FIFO, a
// socket or a directory is refused before anything is written, since the rename would replace it. A
// symbolic link is followed (as open() would): the file it leads to is replaced and the link stays. The new
// file gets the mode of the file it replaces, or what open(O_CREAT, 0666) would give it. A signal that ends
// the process while the file is written (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXFSZ, where the
// program has not set its own handler) removes the temporary first.
class AtomicFile {
 public:
  // `what` begins each error message ("-o map.png", "out.gguf").
  AtomicFile(const std::filesystem::path& path, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends n bytes (buffered). Error(Io) "WHAT: writing failed: ..." (a full disk, a quota).
  void write(const void* data, size_t n);
  uint64_t size() const { return size_; }
  // Flushes, syncs and renames the file into place. Error(Io) when any of it fails (the temporary is
  // removed).
  void commit();
  // Where the file goes: the destination, or the file its symbolic link leads to.
  const std::filesystem::path& target() const { return target_; }

 private:
  void flush();
  [[noreturn]] void fail(const std::string& doing, int err);

  std::filesystem::path target_;
  std::string what_;
  std::string tmp_;
  int fd_ = -1;
  mode_t mode_ = 0;
  std::string buf_;
  uint64_t size_ = 0;
  bool committed_ = false;
  int slot_ = -1;  // in the table a fatal signal's handler removes temporaries from
};

// "16 MiB", "1.5 GiB": for messages.
std::string format_bytes(size_t bytes);

}  // namespace minigpt
