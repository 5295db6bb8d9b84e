// The faults outside testing found, where a user meets them: the CLI. Nothing reported as done that was
// not, nothing printed past a stop, no hang or unbounded memory on a FIFO or a device, no crash when the
// model file changes under a run, bounded memory for a huge context and for loading.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "cpu/cpu.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
using test::run_cli;
using test::TempDir;

const std::filesystem::path kShipped = test::source_dir() / "models" / "shakespeare-char";

size_t count_lines(const std::string& s) {
  return size_t(std::count(s.begin(), s.end(), '\n')) + (!s.empty() && s.back() != '\n');
}

// Runs `minigpt args` (shell-quoted) with stdout sent to `target` (e.g. /dev/full).
test::CommandResult run_cli_to(const std::string& args, const std::string& target) {
  TempDir tmp;
  const std::string cmd =
      std::string(MINIGPT_CLI_PATH) + " " + args + " </dev/null >" + target + " 2>" + (tmp / "err").string();
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), "", test::read_file(tmp / "err")};
}

// The peak resident set of `minigpt args` in MiB, and its exit status. A sanitizer build keeps freed
// memory in quarantine, which would count as resident: the child runs without it (harmless elsewhere).
std::pair<double, int> peak_rss_mib(const std::vector<std::string>& args) {
  const char* asan = std::getenv("ASAN_OPTIONS");
  const auto r = test::run_minigpt(
      args, {std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") + "quarantine_size_mb=0"});
  return {double(r.max_rss_kb) / 1024.0, r.status};
}

TEST(FaultsCli, AFailedWriteToStdoutFailsTheCommand) {
  const std::string m = "-m " + kShipped.string() + " ";
  for (const std::string& args : std::vector<std::string>{
           "generate -p ROMEO: --max-new-tokens 5 --seed 1",
           "generate -p ROMEO: --max-new-tokens 5 --seed 1 --json", "tokenize " + m + "hello", "info " + m,
           "bench " + m + "-p 8 -n 0 -r 1 -t 1", "--version"}) {
    const auto r = run_cli_to(args, "/dev/full");
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(count_lines(r.err), 1u) << args << ": " << r.err;
    EXPECT_NE(r.err.find("writing to stdout failed"), std::string::npos) << args << ": " << r.err;
  }
  EXPECT_EQ(run_cli_to("tokenize " + m + "hello", "/dev/null").status, 0);
}

TEST(FaultsCli, NothingPastAStopStringIsPrintedInAnyMode) {
  const std::string base = "generate -p 'ROMEO:' --temperature 0 --max-new-tokens 60 ";
  const auto free_run = run_cli(base + "--no-echo");
  ASSERT_EQ(free_run.status, 0) << free_run.err;
  ASSERT_GT(free_run.out.size(), 40u);
  // Stop strings taken from the greedy text itself, so that they surely occur: one inside a token's text,
  // one spanning several tokens.
  for (const std::string& stop : {free_run.out.substr(20, 1), free_run.out.substr(25, 4)}) {
    if (stop.find('\'') != std::string::npos || stop.find('\n') != std::string::npos) continue;
    const size_t cut = free_run.out.find(stop);
    const std::string want = free_run.out.substr(0, cut);
    const auto text = run_cli(base + "--no-echo --stop '" + stop + "'");
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_EQ(text.out, want + "\n") << "stop '" << stop << "'";
    const auto js = run_cli(base + "--json --stop '" + stop + "'");
    ASSERT_EQ(js.status, 0) << js.err;
    std::string joined;
    json summary;
    std::istringstream lines(js.out);
    for (std::string line; std::getline(lines, line);) {
      const json j = json::parse(line);
      if (j.contains("summary")) {
        summary = j["summary"];
        continue;
      }
      EXPECT_EQ(j["text"].get<std::string>().find(stop), std::string::npos) << line;
      joined += j["text"].get<std::string>();
    }
    EXPECT_EQ(summary["stop_reason"], "stop");
    EXPECT_EQ(summary["text"], want);
    EXPECT_EQ(joined, want) << "the token texts printed are exactly the text before the stop '" << stop
                            << "'";
  }
}

TEST(FaultsCli, FifosDevicesAndDirectoriesAreRefusedNotReadForever) {
  TempDir tmp;
  auto model_copy = [&](const std::string& name) {
    const auto d = tmp / name;
    std::filesystem::copy(kShipped, d);
    return d;
  };
  struct Case {
    std::filesystem::path dir;
    std::string file;  // replaced by a FIFO, or a symlink to /dev/zero
    bool fifo;
    std::string says;
  };
  std::vector<Case> cases = {
      {model_copy("fifo-config"), "config.json", true, "config.json: the config is a FIFO"},
      {model_copy("fifo-weights"), "model.safetensors", true,
       "model.safetensors: not a regular file (a FIFO)"},
      {model_copy("zero-config"), "config.json", false, "config.json: the config is a character device"},
      {model_copy("zero-vocab"), "vocab.json", false, "vocab.json: the tokenizer file is a character device"},
      {model_copy("zero-merges"), "merges.txt", false,
       "merges.txt: the tokenizer file is a character device"},
  };
  std::filesystem::remove(cases[3].dir / "tokenizer.json");  // so that vocab.json + merges.txt are read
  std::filesystem::remove(cases[4].dir / "tokenizer.json");
  for (const auto& c : cases) {
    std::filesystem::remove(c.dir / c.file);
    if (c.fifo) {
      ASSERT_EQ(::mkfifo((c.dir / c.file).c_str(), 0600), 0);
    } else {
      std::filesystem::create_symlink("/dev/zero", c.dir / c.file);
    }
    // Before the fix these hung (until ctest's timeout), or grew without bound; a refusal takes milliseconds.
    const auto r = run_cli("generate -m " + c.dir.string() + " -p hi --max-new-tokens 2");
    EXPECT_EQ(r.status, 1) << c.file << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  // A shard index that is /dev/zero.
  const auto sharded = tmp / "zero-index";
  std::filesystem::create_directories(sharded);
  std::filesystem::copy_file(kShipped / "config.json", sharded / "config.json");
  std::filesystem::create_symlink("/dev/zero", sharded / "model.safetensors.index.json");
  auto r = run_cli("generate -m " + sharded.string() + " -p hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("model.safetensors.index.json: the shard index is a character device"),
            std::string::npos)
      << r.err;
  // --file: a device, a directory, a FIFO.
  ASSERT_EQ(::mkfifo((tmp / "prompt-fifo").c_str(), 0600), 0);
  for (const auto& [file, says] : std::vector<std::pair<std::string, std::string>>{
           {"/dev/zero", "the prompt file is a character device"},
           {tmp.path().string(), "the prompt file is a directory"},
           {(tmp / "prompt-fifo").string(), "the prompt file is a FIFO"}}) {
    r = run_cli("generate --file " + file + " --max-new-tokens 2");
    EXPECT_EQ(r.status, 1) << file;
    EXPECT_EQ(r.out, "") << file;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    r = run_cli("tokenize -m " + kShipped.string() + " --file " + file);
    EXPECT_EQ(r.status, 1) << file;
    EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
  }
}

// Every command that writes a file (quantize, convert, perplexity --save-logits, attention -o) refuses an
// output that is not a regular file, which the rename that puts the finished file in place would replace:
// `quantize M /dev/full` would leave a regular file at /dev/full. Tried on FIFOs in a temporary folder (a
// regression then replaces only those), directly and through a symbolic link; a link to a regular file is
// followed, the link kept.
TEST(FaultsCli, OutputsThatAreNotRegularFilesAreRefusedNotReplaced) {
  namespace fs = std::filesystem;
  TempDir tmp;
  const std::string m = kShipped.string();
  const std::string text = (tmp / "text.txt").string();
  test::write_file(text, test::read_file(kShipped / "README.md"));
  for (const std::string name : {"out.gguf", "logits.bin", "map.png"}) {
    ASSERT_EQ(::mkfifo((tmp / name).c_str(), 0600), 0);
    fs::create_symlink(name, tmp / ("link-" + name));
  }
  for (const std::string prefix : {"", "link-"}) {
    const std::string gguf = (tmp / (prefix + "out.gguf")).string();
    const std::string logits = (tmp / (prefix + "logits.bin")).string();
    const std::string png = (tmp / (prefix + "map.png")).string();
    for (const std::string& args :
         {"quantize " + m + " " + gguf + " --type q8_0", "convert " + m + " " + gguf,
          "perplexity -m " + m + " -f " + text + " --chunks 2 --save-logits " + logits,
          "attention -m " + m + " -p hi --layer 0 --head 0 -o " + png}) {
      const auto r = run_cli(args);
      EXPECT_EQ(r.status, 1) << args << ": " << r.err;
      EXPECT_EQ(count_lines(r.err), 1u) << args << ": " << r.err;
      EXPECT_NE(r.err.find("is a FIFO, not a regular file"), std::string::npos) << args << ": " << r.err;
    }
  }
  for (const std::string name : {"out.gguf", "logits.bin", "map.png"}) {
    EXPECT_EQ(fs::status(tmp / name).type(), fs::file_type::fifo) << name;
    EXPECT_TRUE(fs::is_symlink(tmp / ("link-" + name))) << name;
  }
  // A link to a regular file: the file is written, the link stays.
  fs::create_symlink("real.gguf", tmp / "to-real.gguf");
  const auto r = run_cli("quantize " + m + " " + (tmp / "to-real.gguf").string() + " --type q8_0");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(tmp / "to-real.gguf"));
  EXPECT_GT(fs::file_size(tmp / "real.gguf"), 0u);
  EXPECT_EQ(test::read_file(tmp / "real.gguf").substr(0, 4), "GGUF");
}

// Ended by a signal while it writes its output, a command leaves no temporary behind. Here quantize's stderr
// is a pipe nobody reads, so its first progress line, written once the output's temporary exists, ends it by
// SIGPIPE (as `minigpt quantize ... 2>&1 | head -1` would; Ctrl-C and SIGTERM take the same way out, see
// FaultsDeathTest). No hidden '.out.gguf.tmp.XXXXXX' stays in the folder.
TEST(FaultsCli, ASignalWhileWritingLeavesNoTemporary) {
  namespace fs = std::filesystem;
  TempDir tmp;
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);  // no reader, ever: the first write to the pipe raises SIGPIPE
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t dfl;  // SIGPIPE at its default, whatever this process did with it (the server tests ignore it)
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  const std::string out = (tmp / "out.gguf").string();
  std::vector<std::string> args = {MINIGPT_CLI_PATH, "quantize", kShipped.string(), out, "--type", "q8_0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ), 0);
  ::close(p[1]);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGPIPE);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp.path())) left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << left.size() << " file(s) left, e.g. " << left[0];
}

// A MINIGPT_CPU that names no kernel level this CPU runs is one line and exit 1 from every command that
// computes, before any work. Were the level chosen by whichever thread first runs a kernel, a pool worker's
// throw would end the process in std::terminate (exit 134, "terminate called after throwing"), and a server
// would start, then die on its first request.
std::string cpu_info_levels() {
  std::string s;
  for (const auto& l : cpu_info().levels) s += (s.empty() ? "" : ", ") + l;
  return s;
}

TEST(FaultsCli, ABadKernelLevelIsOneLineBeforeAnyWork) {
  TempDir tmp;
  const std::string m = kShipped.string();
  const std::string text = (tmp / "text.txt").string();
  test::write_file(text, test::read_file(kShipped / "README.md"));
  const std::vector<std::string> commands = {
      "generate -m " + m + " -p hi -n 3", "bench -m " + m + " -p 16 -n 4 -r 1",
      "perplexity -m " + m + " -f " + text + " --chunks 1",
      "attention -m " + m + " -p hi -o " + tmp.path().string() + "/a.json", "serve -m " + m + " --port 0"};
  for (const std::string& args : commands) {
    for (int i = 0; i < 4; ++i) {  // which thread runs a kernel first is a race
      const std::string cmd = "MINIGPT_CPU=bogus timeout 30 " + std::string(MINIGPT_CLI_PATH) + " " + args +
                              " </dev/null >/dev/null 2>" + (tmp / "err").string();
      const int rc = std::system(cmd.c_str());
      const std::string err = test::read_file(tmp / "err");
      ASSERT_TRUE(WIFEXITED(rc)) << args;
      EXPECT_EQ(WEXITSTATUS(rc), 1) << args << ": " << err;
      EXPECT_EQ(err,
                "minigpt: error: MINIGPT_CPU=bogus: unknown kernel level (generic, avx2, avx512, avx512bf16 "
                "or amx; "
                "this CPU supports: " +
                    cpu_info_levels() + ")\n")
          << args;
    }
  }
}

// An empty --api-key ("--api-key $KEY" with KEY unset) served every endpoint without a key, silently; one
// with a space or a control character could never be matched by a client's header. Both are refused before
// the server starts (each run is under `timeout`, so a server that starts fails this test, exit 124).
TEST(FaultsCli, AnApiKeyNoClientCouldSendIsRefused) {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"''", "--api-key: the key is empty (leave --api-key out to serve without a key)"},
      {"'two words'",
       "--api-key: the key holds a space or a control character, which an Authorization header "
       "cannot carry"}};
  for (const auto& [key, says] : cases) {
    const std::string cmd = "timeout 20 " + std::string(MINIGPT_CLI_PATH) + " serve -m " + kShipped.string() +
                            " --port 0 --api-key " + key + " </dev/null >/dev/null 2>" +
                            (tmp / "err").string();
    const int rc = std::system(cmd.c_str());
    const std::string err = test::read_file(tmp / "err");
    ASSERT_TRUE(WIFEXITED(rc)) << key;
    EXPECT_EQ(WEXITSTATUS(rc), 1) << key << ": " << err;  // a refused value
    EXPECT_EQ(err, "minigpt: error: " + says + "\n") << key;
  }
}

// A --tokenizer with more tokens than the model's vocabulary: every command that encodes text says so in one
// line before encoding (not later, on the first id past the vocabulary, with "eval: token id 5962 at index 0
// is outside the vocabulary").
TEST(FaultsCli, ATokenizerLargerThanTheModelIsRefusedByEveryCommand) {
  TempDir tmp;
  const std::string gpt2 = (test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer").string();
  const std::string text = (tmp / "text.txt").string();
  test::write_file(text, test::read_file(kShipped / "README.md"));
  const std::string m = "-m " + kShipped.string() + " --tokenizer " + gpt2 + " ";
  for (const std::string& args : {"generate " + m + "-p Hello -n 2", "perplexity " + m + "-f " + text,
                                  "attention " + m + "-p Hello -o " + (tmp / "a.json").string()}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << args << ": " << r.err;
    EXPECT_NE(r.err.find(gpt2 + ": the tokenizer has 50257 tokens, more than the model's vocabulary of 256"),
              std::string::npos)
        << args << ": " << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "a.json"));
}

TEST(FaultsCli, StdinBeyondItsCapIsRefused) {
  // /dev/zero on stdin: read up to the 256 MiB cap, then refused (not read until memory runs out).
  const std::string cmd =
      std::string(MINIGPT_CLI_PATH) + " tokenize -m " + kShipped.string() + " </dev/zero >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  const auto r = run_cli("tokenize -m " + kShipped.string(), "hello");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(FaultsCli, TheModelFileTruncatedDuringARunDoesNotKillIt) {
  TempDir tmp;
  const auto dir = tmp / "model";
  std::filesystem::copy(kShipped, dir);
  // Generate in the background; as soon as text comes, truncate the weights to 0 bytes and write garbage
  // over them. With the weights mapped, the next decode step died of SIGBUS.
  const std::string script =
      "out=" + (tmp / "out").string() + "; " + MINIGPT_CLI_PATH + " generate -m " + dir.string() +
      " -p ROMEO: --max-new-tokens 300 --ignore-eos --temperature 0 --context-overflow slide >$out 2>" +
      (tmp / "err").string() +
      " & pid=$!; for i in $(seq 1 3000); do [ -s $out ] && break; sleep 0.01; done; " + ": > " +
      (dir / "model.safetensors").string() + "; head -c 100000 /dev/urandom > " +
      (dir / "model.safetensors").string() + "; wait $pid; echo $? > " + (tmp / "rc").string();
  ASSERT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0);
  EXPECT_EQ(test::read_file(tmp / "rc"), "0\n") << test::read_file(tmp / "err");
  EXPECT_GT(test::read_file(tmp / "out").size(), 300u);
}

TEST(FaultsCli, AnExplicitlyEmptyPromptIsEmpty) {
  // "--prompt=" then another flag: the prompt is "", not the next argument.
  const auto r = run_cli("generate --prompt= --no-echo --max-new-tokens 3 --seed 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  const json summary = json::parse(last).at("summary");
  EXPECT_EQ(summary["prompt_tokens"], 1) << "an empty prompt starts from BOS alone";
  const auto echoed = run_cli("generate --prompt= --max-new-tokens 3 --seed 1");
  ASSERT_EQ(echoed.status, 0) << echoed.err;
  EXPECT_EQ(echoed.out.find("--max-new-tokens"), std::string::npos) << echoed.out;
}

TEST(FaultsCli, ATinyTemperatureIsGreedyNotGarbage) {
  const std::string base = "generate -p 'ROMEO:' --no-echo --max-new-tokens 40 ";
  const auto greedy = run_cli(base + "--temperature 0");
  ASSERT_EQ(greedy.status, 0) << greedy.err;
  for (const char* t : {"1e-40", "1e-30"}) {
    const auto tiny = run_cli(base + "--temperature " + t + " --seed 3");
    ASSERT_EQ(tiny.status, 0) << tiny.err;
    EXPECT_EQ(tiny.out, greedy.out) << "--temperature " << t;
  }
}

TEST(FaultsCli, NonFiniteLogitsFailWithOneLine) {
  TempDir tmp;
  Config c = test::tiny_config();
  c.n_vocab = 256;
  write_random_model(tmp.path(), c);
  for (const char* f : {"vocab.json", "merges.txt"}) {
    std::filesystem::copy_file(test::source_dir() / "tests" / "fixtures" / "tokenizer" / "bytelevel" / f,
                               tmp / f);
  }
  test::rewrite_weights(tmp.path(), [](auto& w, auto& keep) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i].name != "ln_f.weight") continue;
      for (size_t j = 0; j < keep[i].size() / 4; ++j) {
        const float big = 3e38f;  // finite; times a normalised value of ~1-4 it is not
        std::memcpy(keep[i].data() + 4 * j, &big, 4);
      }
    }
  });
  // With the prompt echoed too: it is printed only once the prompt's logits came out finite.
  for (const char* mode : {"--temperature 0", "--seed 1 --no-echo", "--json --seed 1"}) {
    const auto r = run_cli("generate -m " + tmp.path().string() + " -p hello --max-new-tokens 5 " + mode);
    EXPECT_EQ(r.status, 1) << mode;
    EXPECT_EQ(r.out, "") << mode;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("are not finite"), std::string::npos) << r.err;
  }
}

TEST(FaultsCli, CtxSizeBoundsTheKvCache) {
  // A config with a million positions (sinusoidal: no [n_positions, C] tensor to store). Before -c, the KV
  // cache was allocated for every position: 2 layers x K,V x 1M x 16 floats = 256 MiB for a 5-token run.
  TempDir tmp;
  Config c = test::tiny_config();
  c.n_vocab = 256;
  c.n_ctx = 1 << 20;
  c.position_encoding = PositionEncoding::Sinusoidal;
  write_random_model(tmp.path(), c);
  for (const char* f : {"vocab.json", "merges.txt"}) {
    std::filesystem::copy_file(test::source_dir() / "tests" / "fixtures" / "tokenizer" / "bytelevel" / f,
                               tmp / f);
  }
  const std::string dir = tmp.path().string();
  // The same run with an 8-position cache is the baseline: the process, its libraries and OpenBLAS's buffers
  // (which vary with the CPU and the build: ASan keeps a shadow of the heap) and the 64 MiB sinusoidal table
  // (1M x 16 floats) are in both. The default 4096-position cache adds 1 MiB; one for every position would
  // add 256 MiB. The bound, baseline + 64 MiB, lies between.
  const auto [base, rc0] =
      peak_rss_mib({"generate", "-m", dir, "-p", "hi", "--max-new-tokens", "3", "--seed", "1", "-c", "8"});
  ASSERT_EQ(rc0, 0);
  const auto [peak, rc] =
      peak_rss_mib({"generate", "-m", dir, "-p", "hi", "--max-new-tokens", "3", "--seed", "1"});
  EXPECT_EQ(rc, 0);
  EXPECT_LT(peak, base + 64.0)
      << "MiB: the KV cache should hold the default 4096 positions, not 1M (with -c 8: " << base << " MiB)";
  // And the measurement sees a cache for every position when one is asked for.
  const auto [full, rc1] = peak_rss_mib(
      {"generate", "-m", dir, "-p", "hi", "--max-new-tokens", "3", "--seed", "1", "-c", "1048576"});
  EXPECT_EQ(rc1, 0);
  EXPECT_GT(full, base + 128.0) << "MiB with -c 1048576 (with -c 8: " << base << " MiB)";
  auto r = run_cli("generate -m " + dir + " -p hi --max-new-tokens 3 --seed 1");
  EXPECT_NE(r.err.find("context 4096 of the model's 1048576 tokens (-c to change)"), std::string::npos)
      << r.err;
  r = run_cli("generate -m " + dir + " -p 'hello there' -c 4 --max-new-tokens 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("longer than the context of 4 (n_ctx)"), std::string::npos) << r.err;
  r = run_cli("generate -m " + dir + " -p hi -c 2000000");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("ctx_size: 2000000 is outside [0, 1048576]"), std::string::npos) << r.err;
  r = run_cli("generate -m " + dir + " -p hi -c 8 --max-new-tokens 20 --seed 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("stop: context"), std::string::npos) << r.err;
}

// A model whose weights are many tensors of similar size (so that "the model plus its largest tensor" is
// close to the model), ~100 MiB in F32.
Config many_tensor_config() {
  Config c;
  c.n_layer = 8;
  c.n_head = 8;
  c.n_embd = 512;
  c.n_ctx = 64;
  c.n_vocab = 512;
  c.n_inner = 2048;
  return c;
}

TEST(FaultsCli, LoadingHoldsTheWeightsOnceNotTwice) {
  TempDir tmp;
  const Config c = many_tensor_config();
  write_random_model(tmp / "m", c);
  const double file_mib = double(std::filesystem::file_size(tmp / "m" / "model.safetensors")) / (1 << 20);
  // The weights once, plus the largest tensor while it is read (4 MiB here), plus the process itself: its
  // peak for --version (the binary and its runtime: ~10 MiB, ~60 MiB under ASan, which grows with the code)
  // and 40 MiB for OpenBLAS, threads and buffers. Holding them twice (mapping + copies) was ~2x the file.
  const auto [base, rc0] = peak_rss_mib({"--version"});
  ASSERT_EQ(rc0, 0);
  const double bound = 1.15 * file_mib + base + 40.0;
  const auto [loaded, rc] =
      peak_rss_mib({"bench", "-m", (tmp / "m").string(), "-p", "4", "-n", "0", "-r", "1", "-t", "1"});
  EXPECT_EQ(rc, 0);
  EXPECT_LT(loaded, bound) << "peak MiB loading a " << file_mib << " MiB F32 model";
  test::write_file(tmp / "config.json", config_to_json(c));
  const auto [random, rc2] = peak_rss_mib(
      {"bench", "--random", (tmp / "config.json").string(), "-p", "4", "-n", "0", "-r", "1", "-t", "1"});
  EXPECT_EQ(rc2, 0);
  EXPECT_LT(random, bound) << "peak MiB building the same model with random weights";
}

TEST(FaultsCli, TheBandwidthProbeDoesNotSlowTheTimedSteps) {
  // bench reads 256 MB before each decode repetition to measure bandwidth. On the shipped model (a step
  // takes ~0.1-0.2 ms) the first timed step after it took 2-170x a normal one (measured without the
  // fix: 2.2x, 3.4x, 170x), so a row's spread could exceed its value. With an untimed step between the probe
  // and the timing, the first timed step of a repetition (median over 7) measured 1.03-1.16x the median step;
  // the bound is 2x. Up to 3 runs: the regression slows every run, while a test running beside this one
  // in parallel ctest can stall a few steps of one run (seen once under ASan: 22 ms against 0.64).
  std::string runs;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto r = run_cli("bench -m " + kShipped.string() + " -p 0 -n 8 -r 7 -t 2 -o json");
    ASSERT_EQ(r.status, 0) << r.err;
    const json row = json::parse(r.out).at("results").at(0);
    // Each first step against its own repetition's median: on this project's 2-vCPU VMs whole repetitions
    // run 3-5x slower than others (0.06 against 0.3 ms a step), so against the median of all steps the first
    // steps of the slow ones failed this test with no cold start in them.
    const double ratio = row.at("itl_first_ratio"), first = row.at("itl_first_ms");
    ASSERT_GT(first, 0.0);
    if (ratio < 2.0) return;
    runs += " first step " + std::to_string(ratio) + "x its repetition's median step;";
  }
  ADD_FAILURE() << "in 3 runs the first timed step was over 2x the median:" << runs;
}

}  // namespace
}  // namespace minigpt
