// Running the CLI as a child process with its own peak memory measured (see run_minigpt in test_util.h).
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "test_util.h"

extern char** environ;

namespace minigpt::test {
namespace {

namespace fs = std::filesystem;

// ru_maxrss of a child counts the resident set it had before exec: a posix_spawn (vfork) child reports
// the parent's peak, a fork child its copy of the parent's pages. This test process may be large (a
// CUDA test before may have loaded the module), so minigpt is measured from a small process: this test
// program started afresh with MINIGPT_TEST_MAXRSS_TO=FILE runs no tests but the command in its
// arguments, writes the command's ru_maxrss (KB) to FILE and exits with its status. It does so here,
// during static initialisation, before gtest's main.
[[maybe_unused]] const bool kMaxRssHelper = [] {
  const char* to = std::getenv("MINIGPT_TEST_MAXRSS_TO");
  if (to == nullptr) return false;
  const std::string file = to;
  unsetenv("MINIGPT_TEST_MAXRSS_TO");
  std::string cmdline = test::read_file("/proc/self/cmdline");  // argv, each ended by '\0'
  std::vector<char*> argv;
  for (size_t i = 0; i < cmdline.size(); i += std::strlen(cmdline.data() + i) + 1)
    argv.push_back(cmdline.data() + i);
  if (argv.size() < 2) _exit(125);
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(argv[1], argv.data() + 1);
    _exit(127);
  }
  int st = 0;
  struct rusage ru {};
  if (pid < 0 || wait4(pid, &st, 0, &ru) != pid) _exit(125);
  test::write_file(file, std::to_string(ru.ru_maxrss));
  _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}();

}  // namespace

// Runs the CLI with `args`, stdin from /dev/null, and `env` added to this process's environment, through
// the helper above (no shell).
ChildRun run_minigpt(const std::vector<std::string>& args, const std::vector<std::string>& env_add) {
  TempDir tmp;
  const std::string out = (tmp / "out").string(), err = (tmp / "err").string(), rss = (tmp / "rss").string();
  std::vector<std::string> argv_s = {fs::read_symlink("/proc/self/exe").string(), MINIGPT_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env = env_add;
  env.push_back("MINIGPT_TEST_MAXRSS_TO=" + rss);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = env;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);  // getenv finds the first of a name
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ChildRun r;
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << std::strerror(rc);
    return r;
  }
  int st = 0;
  struct rusage ru {};
  if (wait4(pid, &st, 0, &ru) != pid) {
    ADD_FAILURE() << "wait4: " << std::strerror(errno);
    return r;
  }
  (void)ru;  // the helper's own, which counts this process's pages
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  const std::string kb = read_file(rss);
  if (kb.empty()) {
    ADD_FAILURE() << "the ru_maxrss helper wrote nothing (status " << r.status << ")";
  } else {
    r.max_rss_kb = std::stol(kb);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace minigpt::test
