// `minigpt tokenize`: output format, flags, exit codes and one-line errors, through the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>

#include "tokenizer_test_util.h"

using namespace minigpt::test;

namespace {

struct CliResult {
  int code;
  std::string out;  // stdout, or stdout + stderr with merge_stderr
};

// Runs the CLI through /bin/sh (POSIX, no bashisms); `args` is pasted as is, so quote inside it.
// `stdin_from`: a shell command whose output is piped in.
CliResult run_tokenize(const std::string& args, bool merge_stderr = false,
                       const std::string& stdin_from = "") {
  std::string cmd = (stdin_from.empty() ? "" : stdin_from + " | ") + "'" + MINIGPT_CLI_PATH + "' tokenize " +
                    args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

const std::string kModel = "-m '" + kGpt2Dir.string() + "'";

}  // namespace

TEST(TokenizeCli, EncodesTextArgument) {
  CliResult r = run_tokenize(kModel + " 'Hello world'");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "15496 995\n");
}

TEST(TokenizeCli, ReadsStdinAndFile) {
  CliResult r = run_tokenize(kModel + " < /dev/null");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "\n");
  r = run_tokenize(kModel, false, "printf 'Hello world\\n'");
  EXPECT_EQ(r.out, "15496 995 198\n");
  TempDir dir;
  dir.write("in.txt", "Hello world");
  r = run_tokenize(kModel + " --file '" + (dir.path() / "in.txt").string() + "'");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "15496 995\n");
}

TEST(TokenizeCli, JsonOutput) {
  CliResult r = run_tokenize(kModel + " --json 'Hello world'");
  ASSERT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"], nlohmann::json({15496, 995}));
  EXPECT_EQ(j["tokens"], nlohmann::json({"Hello", "\xC4\xA0world"}));  // "Ġworld"
}

TEST(TokenizeCli, SpecialTokensOnlyWithFlag) {
  CliResult plain = run_tokenize(kModel + " 'a<|endoftext|>b'");
  EXPECT_EQ(plain.out, "64 27 91 437 1659 5239 91 29 65\n");
  CliResult special = run_tokenize(kModel + " --special 'a<|endoftext|>b'");
  EXPECT_EQ(special.out, "64 50256 65\n");
}

TEST(TokenizeCli, DecodesIds) {
  CliResult r = run_tokenize(kModel + " --decode '15496 995'");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "Hello world");
  r = run_tokenize(kModel + " --decode", false, "printf '  15496\\t 995\\n50256 '");
  EXPECT_EQ(r.out, "Hello world<|endoftext|>");
  r = run_tokenize(kModel + " --decode '[15496, 995]'");  // as transformers prints a list of ids
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "Hello world");
}

// --json with --decode: the ids and their text, not the raw text.
// --special and --no-add-special shape the encoding only: with --decode they are refused, not ignored.
TEST(TokenizeCli, DecodeJsonAndEncodingFlags) {
  CliResult r = run_tokenize(kModel + " --decode --json '15496 995 50256'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.back(), '\n');
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"], nlohmann::json({15496, 995, 50256}));
  EXPECT_EQ(j["text"], run_tokenize(kModel + " --decode '15496 995 50256'").out);
  // Ids that end inside a character (the shipped byte-level model: id = byte; 0xC3 starts a 2-byte one):
  // U+FFFD for the incomplete bytes, as tokenizers' decode gives, so that the line stays valid JSON.
  const std::string shipped =
      "-m '" + (std::filesystem::path(MINIGPT_SOURCE_DIR) / "models" / "shakespeare-char").string() + "'";
  r = run_tokenize(shipped + " --decode --json '65 66 195'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["text"], "AB\xEF\xBF\xBD");
  for (const std::string flag : {"--special", "--no-add-special"}) {
    r = run_tokenize(kModel + " --decode " + flag + " '15496'", true);
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_EQ(r.out, "minigpt: error: --decode excludes " + flag + " (see minigpt --help)\n");
  }
}

TEST(TokenizeCli, RejectsBadIdsWithOneLine) {
  for (auto [arg, needle] :
       std::vector<std::pair<std::string, std::string>>{{"'15496 12x'", "\"12x\" (id #2"},
                                                        {"-- '3 -1'", "\"-1\" (id #2"},
                                                        {"'99999999999'", "\"99999999999\""},
                                                        {"'1 2 50257'", "50257 at position 2"},
                                                        {"'[15496, 995'", "without its closing"},
                                                        {"'15496,,995'", "no id before it"}}) {
    CliResult r = run_tokenize(kModel + " --decode " + arg, true);
    EXPECT_EQ(r.code, 1) << arg;
    EXPECT_NE(r.out.find("minigpt: error: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

TEST(TokenizeCli, InvalidUtf8AndMissingModelFail) {
  CliResult r = run_tokenize(kModel + " \"$(printf 'ok\\377')\"", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("byte offset 2"), std::string::npos) << r.out;
  r = run_tokenize("-m /nonexistent/dir hi", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent/dir"), std::string::npos) << r.out;
}

// --tokenizer alone names the tokenizer (-m is not needed as well); with neither, the shipped model's, as
// every command that takes -m runs the shipped model without it.
TEST(TokenizeCli, TokenizerAloneIsEnough) {
  CliResult r = run_tokenize("--tokenizer '" + kGpt2Dir.string() + "' 'Hello world'");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "15496 995\n");
  r = run_tokenize("--tokenizer '" + kGpt2Dir.string() + "' --decode '15496 995'");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "Hello world");
  r = run_tokenize("hi");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "104 105\n");  // the shipped byte-level model: id = byte
}

TEST(TokenizeCli, ByteLevelModelDirectory) {
  CliResult r = run_tokenize("-m '" + (kFixtures / "bytelevel").string() + "' 'hi!'");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "104 105 33\n");
}
