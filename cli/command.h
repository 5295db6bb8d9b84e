// Subcommands register themselves here so that each lives in its own file (cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace minigpt::cli {

// setup() declares the subcommand's options on `app` and returns the function to run once parsed.
// The function returns the process exit code; it may throw minigpt::Error for the one-line message.
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct Command {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<Command>& command_registry();

inline bool register_command(std::string name, std::string description, CommandSetup setup) {
  command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  return true;
}

}  // namespace minigpt::cli
