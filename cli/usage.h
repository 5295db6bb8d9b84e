// The exit status rule of every command: 2 when the command line cannot be read, 1 when a value or a file
// is refused (main.cpp).
#pragma once

#include <string>

#include "minigpt/error.h"

namespace minigpt::cli {

// A command line that cannot be read, found after CLI11 has parsed it: flags that exclude each other or a
// required one missing when that depends on other flags, or a value that is not of its flag's form. main()
// exits 2 for it, as for CLI11's own parse errors; every other Error exits 1.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(ErrorKind::Argument, message) {}
};

// For a validator: `message` for a value of the flag's form that the flag refuses (outside its range, empty
// where a name is needed). main() exits 1 when the parse error came from refuse(), 2 for any other.
std::string refuse(std::string message);
// Whether a validator's message came from refuse() since the program started.
bool value_refused();

}  // namespace minigpt::cli
