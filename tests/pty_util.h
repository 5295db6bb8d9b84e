// A program run on a pseudo-terminal (forkpty), as a user at a terminal runs it: what interactive commands
// (`generate -i`, `chat`) are tested through, libedit and Ctrl-C included.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace minigpt::test {

class Pty {
 public:
  explicit Pty(std::vector<std::string> args) {
    struct winsize ws {};
    ws.ws_col = 200;
    ws.ws_row = 50;
    pid_ = forkpty(&master_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Pty() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) ::close(master_);
  }
  bool ok() const { return pid_ > 0 && master_ >= 0; }
  pid_t pid() const { return pid_; }
  void write(const std::string& s) { ASSERT_EQ(::write(master_, s.data(), s.size()), ssize_t(s.size())); }
  // Reads until `needle` appears after `from` in what was read (true), or the deadline passes / EOF (false).
  bool read_until(const std::string& needle, size_t from, double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (out_.find(needle, from) == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{master_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) return false;  // EIO: the child closed the terminal
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] != '\r') out_ += buf[i];  // the terminal's CR LF
      }
    }
    return true;
  }
  const std::string& out() const { return out_; }
  // Waits until the terminal is in libedit's raw mode (neither canonical input nor echo), i.e. libedit is
  // reading the line: it draws the prompt first and switches the mode only when it reads, so what is typed
  // between the two is echoed by the terminal and then again by libedit, and a Ctrl-D typed there can be
  // lost. The master side reports the slave's termios (tcgetattr on a pty master, Linux). Call it after
  // the prompt was read: until that prompt, the mode is the previous one's. False on a deadline, which
  // only turns a hang into a failure.
  bool wait_raw_mode(double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      termios t{};
      if (::tcgetattr(master_, &t) != 0) return false;
      if ((t.c_lflag & (ICANON | ECHO)) == 0) return true;
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // SIGSTOP, and returns once the child has stopped (waitpid WUNTRACED): a SIGCONT sent while the stop is
  // still pending discards it (signal(7)), so the child could read what was typed meanwhile and go on
  // before a signal meant to be pending at its continuation (seen in CI under load). False if it exited.
  bool stop() {
    if (::kill(pid_, SIGSTOP) != 0) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WUNTRACED) != pid_) return false;
    if (WIFSTOPPED(st)) return true;
    reaped_ = true;
    return false;
  }
  // Waits for the child to exit, reading what it writes (never blocking: poll); -1 past the deadline.
  int wait_exit(double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{master_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        const ssize_t n = ::read(master_, buf, sizeof buf);
        if (n > 0) out_.append(buf, size_t(n));
      }
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int master_ = -1;
  bool reaped_ = false;
  std::string out_;
};

}  // namespace minigpt::test
