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
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace minigpt
