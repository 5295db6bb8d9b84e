// The turns of an interactive command (`generate -i`, `chat`): lines typed at a terminal, edited with
// libedit's readline() (its history and line editing), or read from a pipe; and Ctrl-C counted, so that it
// stops a reply and not the program.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

namespace minigpt::cli {

// Ctrl-C's count since the last reset: the handler catch_interrupts() installs adds one; a turn's loop reads
// it between tokens.
extern std::atomic<int> g_interrupts;

// Installs the SIGINT handler (SA_RESTART: a read goes on) and, on a terminal, keeps libedit from taking the
// signal itself.
void catch_interrupts();

// One line of stdin, without its newline: false at the end of the input before any byte. A line of more than
// kMaxTextBytes is an Error, as is a failed read (a line grown without bound from /dev/zero would take
// gigabytes).
bool read_stdin_line(std::string& line);

// A line of nothing but spaces and tabs (or nothing): a stray Enter, not a turn.
bool is_blank(std::string_view line);

// The next line after `prompt`: on a terminal readline() shows the prompt and edits the line (added to the
// history when not blank); otherwise `show` writes the prompt and then the line read, as a terminal would
// show what was typed, so that a transcript reads as a dialogue. False at the end of the input (Ctrl-D, which
// ends the terminal's line through `show`) or at Ctrl-C on an empty line; resets g_interrupts before reading.
bool read_turn_line(const std::string& prompt, std::string& line,
                    const std::function<void(std::string_view)>& show);

}  // namespace minigpt::cli
