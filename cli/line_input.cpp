#include "line_input.h"

#include <editline/readline.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "io/io.h"
#include "minigpt/error.h"

namespace minigpt::cli {

std::atomic<int> g_interrupts{0};

void catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_interrupts.fetch_add(1); };
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  if (::isatty(STDIN_FILENO)) rl_catch_signals = 0;  // Ctrl-C reaches our handler, not libedit's
}

bool read_stdin_line(std::string& line) {
  line.clear();
  for (int c; (c = getc_unlocked(stdin)) != EOF;) {
    if (c == '\n') return true;
    if (line.size() >= kMaxTextBytes) {
      throw Error(ErrorKind::Argument,
                  "stdin: a line of more than " + std::to_string(kMaxTextBytes >> 20) + " MiB (the limit)");
    }
    line.push_back(char(c));
  }
  if (std::ferror(stdin))
    throw Error(ErrorKind::Io, std::string("stdin: reading failed: ") + std::strerror(errno));
  return !line.empty();
}

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t") == std::string_view::npos; }

bool read_turn_line(const std::string& prompt, std::string& line,
                    const std::function<void(std::string_view)>& show) {
  g_interrupts = 0;
  if (::isatty(STDIN_FILENO)) {
    char* raw = readline(prompt.c_str());
    if (raw == nullptr) {  // EOF (Ctrl-D): the shell's prompt goes on a line of its own
      show("\n");
      return false;
    }
    line = raw;
    std::free(raw);
    if (g_interrupts.load() > 0 && line.empty()) return false;  // Ctrl-C at the prompt ends the session
    if (!is_blank(line)) add_history(line.c_str());
    return true;
  }
  show(prompt);
  if (!read_stdin_line(line)) return false;
  show(line + "\n");
  return true;
}

}  // namespace minigpt::cli
