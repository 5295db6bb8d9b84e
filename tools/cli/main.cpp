// minigpt: the command-line front end. Every subcommand is a cmd_*.cpp file that registers itself.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "command.h"
#include "minigpt/error.h"

namespace minigpt::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace minigpt::cli

int main(int argc, char** argv) {
  using namespace minigpt::cli;
  CLI::App app{"minigpt: a small, fast GPT-2 inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "minigpt 0.1.0");

  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    runners[sub] = c.setup(*sub);
  }

  // CLI11 would only say "A subcommand is required" for a misspelt command; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    if (std::none_of(commands.begin(), commands.end(), [&](const Command& c) { return c.name == name; })) {
      std::string known;
      for (const auto& c : commands) known += (known.empty() ? "" : ", ") + c.name;
      std::fprintf(stderr, "minigpt: error: unknown command '%s' (commands: %s)\n", name.c_str(), known.c_str());
      return 2;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line on stderr, non-zero exit; CLI11's own wording names the flag.
    std::fprintf(stderr, "minigpt: error: %s (see minigpt --help)\n", e.what());
    return e.get_exit_code() == 0 ? 2 : e.get_exit_code();
  }

  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
    return 2;
  } catch (const minigpt::Error& e) {
    std::fprintf(stderr, "minigpt: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "minigpt: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minigpt: internal error: %s\n", e.what());
    return 3;
  }
}
