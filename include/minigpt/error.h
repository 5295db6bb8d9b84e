// The one exception type the library throws. The CLI catches it once and prints what() as one line.
#pragma once

#include <stdexcept>
#include <string>

namespace minigpt {

enum class ErrorKind {
  Io,           // a file could not be opened, mapped or read
  Format,       // a file is malformed (truncated, bad header, bad offsets, not JSON, bad UTF-8 ...)
  Config,       // config.json is inconsistent or lacks a field
  Shape,        // a tensor's dtype or shape disagrees with what the config implies
  Argument,     // a caller passed a bad value (token id out of range, context overflow, bad flag)
  Unsupported,  // valid input this build does not handle (other model_type, no CUDA device ...)
  Device,       // a device call failed at run time (CUDA or cuBLAS error, out of device memory)
  Numeric,      // the computation produced NaN or Inf (logits that cannot be sampled from)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(one_line(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

  // `s` with each control character but tab (a NUL, a newline, an escape) written as \xNN. what() is a C
  // string printed as one line: a NUL quoted from a user's file would end the message before it says what
  // is wrong, and a newline would split it.
  static std::string one_line(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        static const char* kHex = "0123456789abcdef";
        out += "\\x";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      } else {
        out += ch;
      }
    }
    return out;
  }

 private:
  ErrorKind kind_;
};

}  // namespace minigpt
