// `minigpt generate -i` through a pseudo-terminal (forkpty): libedit reads the lines, the KV cache carries
// over between turns (each turn's text equals generate() on the whole conversation), Ctrl-C stops a
// generation and not the program, Ctrl-D ends it with exit status 0.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <optional>
#include <string>

#include "minigpt/generate.h"
#include "pty_util.h"
#include "test_util.h"

namespace minigpt {
namespace {

std::filesystem::path shipped() { return test::source_dir() / "models" / "shakespeare-char"; }

using test::Pty;

TEST(Interactive, TurnsKeepTheCacheCtrlCStopsAGenerationCtrlDEnds) {
  const int64_t n = 20;  // tokens per turn: three turns and a stopped one fit the model's 128 positions
  Pty pty({MINIGPT_CLI_PATH, "generate", "-i", "-m", shipped().string(), "--temperature", "0", "-n",
           std::to_string(n), "-t", "1"});
  ASSERT_TRUE(pty.ok());
  ASSERT_TRUE(pty.read_until("> ", 0)) << pty.out();

  auto model = Model::load(shipped(), LoadOptions::threads(1));
  const Tokenizer tok = Tokenizer::load(shipped());
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_new_tokens = n;
  std::vector<int32_t> conversation;
  // What generate() gives on the whole conversation so far plus `line`: the turn's expected text.
  auto expected = [&](const std::string& line, int64_t max_tokens) {
    const auto ids = tok.encode(line + "\n");
    conversation.insert(conversation.end(), ids.begin(), ids.end());
    SessionOptions so;
    so.n_ctx = 128;
    Session s(model, so);
    GenerateOptions o = g;
    o.max_new_tokens = max_tokens;
    const GenerateResult r = generate(s, &tok, conversation, o);
    return r;
  };
  // One turn: type `line`, read up to the next prompt; the text between the echoed line and the prompt.
  auto turn = [&](const std::string& line) {
    // libedit switches the terminal to raw mode after it draws the prompt: a line typed before may be echoed
    // twice
    EXPECT_TRUE(pty.wait_raw_mode()) << pty.out();
    const size_t from = pty.out().size();
    pty.write(line + "\n");
    EXPECT_TRUE(pty.read_until(line + "\n", from)) << pty.out();
    const size_t start = pty.out().find(line + "\n", from) + line.size() + 1;
    EXPECT_TRUE(pty.read_until("\n> ", start)) << pty.out();
    const size_t end = pty.out().find("\n> ", start) + 1;
    // libedit may draw the line again (after the SIGCONT below): the text follows the last echo.
    const size_t last = pty.out().rfind(line + "\n", end - 1);
    const size_t begin =
        last != std::string::npos && last >= start - line.size() - 1 ? last + line.size() + 1 : start;
    return pty.out().substr(begin, end - begin);
  };

  for (const std::string line : {"ROMEO:", "JULIET:"}) {
    const GenerateResult want = expected(line, n);
    const std::string got = turn(line);
    EXPECT_EQ(got, want.text + (want.text.ends_with("\n") ? "" : "\n")) << "turn " << line;
    conversation.insert(conversation.end(), want.tokens.begin(), want.tokens.end());
  }

  // Ctrl-C in the turn, deterministically on any machine (the shipped model makes 20 tokens in a few ms,
  // faster than a test can react to the first of them): the line is typed and echoed, the program is
  // stopped before it reads the Enter, and Ctrl-C's SIGINT (what the terminal sends the foreground
  // process) is pending when it continues. It reads the line and starts the turn with the interrupt already
  // counted: the turn ends at its first token, and the program goes on.
  {
    const std::string line = "KING:";
    const GenerateResult full = expected(line, n);
    ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();
    const size_t from = pty.out().size();
    pty.write(line);
    ASSERT_TRUE(pty.read_until(line, from)) << pty.out();  // libedit has echoed the characters
    ASSERT_TRUE(pty.stop()) << pty.out();
    pty.write("\n");
    ::kill(pty.pid(), SIGINT);
    ::kill(pty.pid(), SIGCONT);
    ASSERT_TRUE(pty.read_until(line + "\n", from)) << pty.out();
    const size_t start = pty.out().find(line + "\n", from) + line.size() + 1;
    ASSERT_TRUE(pty.read_until("\n> ", start)) << pty.out();
    const size_t end = pty.out().find("\n> ", start);
    // After SIGCONT libedit may draw the line again ("KING:\nKING:\nA", seen in CI): the text follows the
    // last echo.
    const size_t last = pty.out().rfind(line + "\n", end);
    const size_t begin =
        last != std::string::npos && last >= start - line.size() - 1 ? last + line.size() + 1 : start;
    const std::string got = pty.out().substr(begin, end - begin);
    EXPECT_EQ(got, full.text.substr(0, 1)) << "the turn's first token, then Ctrl-C ended it";
    EXPECT_LT(got.size(), full.text.size());
    EXPECT_EQ(::kill(pty.pid(), 0), 0) << "Ctrl-C ended the program";
    // What was generated stays in the conversation: every token of the text shown (one per character).
    const auto shown = tok.encode(got);
    conversation.insert(conversation.end(), full.tokens.begin(),
                        full.tokens.begin() + ptrdiff_t(shown.size()));
  }

  // A third turn goes on from there (what was generated before Ctrl-C, and at most one token after it,
  // stays in the cache; the turn's text is checked to continue after the line, not against a reference).
  {
    const std::string got = turn("HAMLET:");
    EXPECT_FALSE(got.empty()) << pty.out();
    EXPECT_EQ(::kill(pty.pid(), 0), 0);
  }

  ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();  // libedit reads the Ctrl-D, not the terminal
  const size_t before_eof = pty.out().size();
  pty.write("\x04");  // Ctrl-D at an empty prompt: EOF
  EXPECT_EQ(pty.wait_exit(), 0) << pty.out();
  // The prompt's line is ended, so that the shell's prompt does not follow "> ".
  EXPECT_TRUE(pty.read_until("\n", before_eof, 2)) << pty.out();
}

TEST(Interactive, RefusesJsonAndReadsLinesFromAPipe) {
  const auto r = test::run_cli("generate -i --json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--interactive"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  // Not a terminal: plain lines; the first turn's text is what generate gives the same prompt.
  const auto p = test::run_cli("generate -i -m " + shipped().string() + " --temperature 0 -n 20", "ROMEO:\n");
  EXPECT_EQ(p.status, 0) << p.err;
  const auto one =
      test::run_cli("generate -m " + shipped().string() + " --temperature 0 -n 20 --no-echo -p 'ROMEO:\n'");
  ASSERT_EQ(one.status, 0) << one.err;
  std::string want = one.out;                               // the text and a newline
  EXPECT_EQ(p.out, "> ROMEO:\n" + want + "> \n") << p.out;  // the line read is shown after its prompt
  // -p is the first turn, shown before its text unless --no-echo.
  for (const bool echo : {true, false}) {
    const auto q = test::run_cli("generate -i -m " + shipped().string() +
                                 " --temperature 0 -n 20 -p 'ROMEO:'" + (echo ? "" : " --no-echo"));
    EXPECT_EQ(q.status, 0) << q.err;
    const auto ref = test::run_cli("generate -m " + shipped().string() +
                                   " --temperature 0 -n 20 -p 'ROMEO:'" + (echo ? "" : " --no-echo"));
    ASSERT_EQ(ref.status, 0) << ref.err;
    EXPECT_EQ(q.out, ref.out + "> \n") << "echo " << echo;
  }
}

// A line from a pipe is read up to the limit of any text (256 MiB): /dev/zero as input grew one line without
// bound (gigabytes), then ended with exit 0 and no word when an allocation failed.
TEST(Interactive, ALineBeyondTheInputLimitIsOneLineAndExit1) {
  test::TempDir tmp;
  const std::string cmd = std::string(MINIGPT_CLI_PATH) + " generate -i -m " + shipped().string() +
                          " -n 2 </dev/zero >/dev/null 2>" + (tmp / "err").string();
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  EXPECT_EQ(test::read_file(tmp / "err"), "minigpt: error: stdin: a line of more than 256 MiB (the limit)\n");
}

// -r (a stop string) in interactive mode is shown, as llama.cpp shows its reverse prompt: its last line is
// the prompt the next line follows; one that ends a line is followed by "> ". Before, it was hidden and every
// line followed "> ". The turn's text is generate's up to the stop string.
TEST(Interactive, AReversePromptIsShownAndTheNextLineFollowsIt) {
  const std::string m = shipped().string();
  const auto ref = test::run_cli("generate -m " + m + " --temperature 0 -n 60 --no-echo -p 'ROMEO:\n'");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const std::string t = ref.out.substr(0, ref.out.size() - 1);  // what could end a stop string: not the
                                                                // newline generate may add at the end
  // A newline with two other characters on each side.
  size_t nl = 2;
  auto lone = [&](size_t i) {
    return t[i] == '\n' && t[i - 1] != '\n' && t[i - 2] != '\n' && t[i + 1] != '\n' && t[i + 2] != '\n';
  };
  while (nl + 3 <= t.size() && !lone(nl)) ++nl;
  ASSERT_LE(nl + 3, t.size()) << "no such line break in: " << t;
  size_t plain = 0;  // three characters without a newline
  while (plain + 3 <= t.size() && t.substr(plain, 3).find('\n') != std::string::npos) ++plain;
  ASSERT_LE(plain + 3, t.size()) << t;
  const struct {
    std::string stop, after;  // after the text before the stop: what is shown, up to the end of input
  } cases[] = {
      {t.substr(plain, 3), t.substr(plain, 3) + "\n"},       // the prompt itself; EOF ends its line
      {t.substr(nl, 3), "\n" + t.substr(nl + 1, 2) + "\n"},  // its last line is the prompt
      {t.substr(nl - 2, 3), t.substr(nl - 2, 3) + "> \n"},   // it ends a line: "> " follows
  };
  for (const auto& c : cases) {
    const std::string before = t.substr(0, t.find(c.stop));
    // The stop string as one double-quoted shell word (a newline stays itself there).
    std::string word = "\"", shown_stop;
    for (char ch : c.stop) {
      if (std::string_view("$`\"\\").find(ch) != std::string_view::npos) word += '\\';
      word += ch;
      shown_stop += ch == '\n' ? std::string("\\n") : std::string(1, ch);
    }
    word += '"';
    const auto r = test::run_cli("generate -i -m " + m + " --temperature 0 -n 60 -r " + word, "ROMEO:\n");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "> ROMEO:\n" + before + c.after) << "stop " << shown_stop;
  }
}

// The context in interactive mode, through a pipe (plain lines), with --context-overflow as for a prompt.
// Each turn's text is what generate() gives with the same options on the whole conversation up to it.
class InteractiveContext : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(shipped(), LoadOptions::threads(1));
    tok_.emplace(Tokenizer::load(shipped()));
  }
  std::vector<int32_t> ids(const std::string& text) const { return tok_->encode(text); }
  GenerateResult reference(const std::vector<int32_t>& conversation, int64_t n_ctx, int64_t n,
                           ContextOverflow overflow) const {
    SessionOptions so;
    so.n_ctx = n_ctx;
    Session s(model_, so);
    GenerateOptions g;
    g.sampling.temperature = 0;
    g.max_new_tokens = n;
    g.overflow = overflow;
    return generate(s, &*tok_, conversation, g);
  }
  static std::string shown(const std::string& text) { return text + (text.ends_with("\n") ? "" : "\n"); }
  // A line longer than the shipped model's 128 positions (one token per byte).
  const std::string long_line_ = [] {
    std::string l;
    while (l.size() < 200) l += "To be, or not to be, that is the question: ";
    return l;
  }();
  std::shared_ptr<const Model> model_;
  std::optional<Tokenizer> tok_;
};

// With the shipped model and no flags, a conversation goes on past its 128 positions: -i slides the context
// unless --context-overflow says otherwise (the session ended after one reply, with a hint to give -c, which
// this model refuses past 128). The first turn is generate's with --context-overflow slide; the second
// follows it.
TEST_F(InteractiveContext, ByDefaultTheConversationSlidesPastTheShippedModelsContext) {
  const auto r =
      test::run_cli("generate -i -m " + shipped().string() + " --temperature 0 -t 1", "ROMEO:\nJULIET:\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("ending the session"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("-c "), std::string::npos) << r.err;
  const auto ref = test::run_cli("generate -m " + shipped().string() +
                                 " --temperature 0 -t 1 --no-echo --context-overflow slide -p 'ROMEO:\n'");
  ASSERT_EQ(ref.status, 0) << ref.err;
  ASSERT_NE(ref.err.find("generated 128 tokens"), std::string::npos)
      << "the reply fills the context: " << ref.err;
  const std::string first = "> ROMEO:\n" + shown(ref.out.substr(0, ref.out.size() - 1)) + "> JULIET:\n";
  ASSERT_EQ(r.out.substr(0, first.size()), first) << r.out;
  const std::string second = r.out.substr(first.size());
  EXPECT_GT(second.size(), std::string("\n> \n").size()) << "no second reply: " << r.out;
  EXPECT_TRUE(second.ends_with("\n> \n")) << r.out;
}

TEST_F(InteractiveContext, WithErrorALineWithoutRoomIsRefusedAndTheConversationGoesOn) {
  // A line longer than the context is refused and the session goes on (it does not end with "the context
  // of 128 tokens is full" while the conversation is empty). The note names no -c: 128 is all the model has.
  const auto r = test::run_cli(
      "generate -i -m " + shipped().string() + " --temperature 0 -n 20 -t 1 --context-overflow error",
      long_line_ + "\nROMEO:\n");
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t n_line = ids(long_line_ + "\n").size();
  EXPECT_EQ(r.err,
            "minigpt: that line is " + std::to_string(n_line) +
                " tokens, and the context of 128 tokens has room for a line of 127 now: it was not added "
                "(--context-overflow truncate or slide drops the oldest tokens)\n");
  // The refused line left nothing behind: the next turn is generate() on that line alone.
  const GenerateResult want = reference(ids("ROMEO:\n"), 128, 20, ContextOverflow::Error);
  EXPECT_EQ(r.out, "> " + long_line_ + "\n> ROMEO:\n" + shown(want.text) + "> \n");

  // A conversation that has filled the context ends the session, with status 0 and a note; -c 48 leaves
  // room to enlarge the context, which the note says.
  const auto f = test::run_cli(
      "generate -i -m " + shipped().string() + " --temperature 0 -n 30 -c 48 -t 1 --context-overflow error",
      "ROMEO:\nJULIET:\nKING:\n");
  ASSERT_EQ(f.status, 0) << f.err;
  EXPECT_NE(f.err.find("the context of 48 tokens is full; ending the session (-c enlarges it; "),
            std::string::npos)
      << f.err;
  const GenerateResult first = reference(ids("ROMEO:\n"), 48, 30, ContextOverflow::Error);
  std::vector<int32_t> conv = ids("ROMEO:\n");
  conv.insert(conv.end(), first.tokens.begin(), first.tokens.end());
  const auto line2 = ids("JULIET:\n");
  conv.insert(conv.end(), line2.begin(), line2.end());
  const GenerateResult second = reference(conv, 48, 30, ContextOverflow::Error);
  EXPECT_EQ(second.reason, StopReason::Context);
  EXPECT_EQ(f.out, "> ROMEO:\n" + shown(first.text) + "> JULIET:\n" + shown(second.text))
      << "KING: was never read";

  // A first prompt (-p) without room is refused before anything is written, as generate's prompt is.
  const auto p = test::run_cli("generate -i -m " + shipped().string() +
                               " -n 5 -t 1 --context-overflow error -p '" + long_line_ + "'");
  EXPECT_EQ(p.status, 1);
  EXPECT_TRUE(p.out.empty()) << p.out;
  EXPECT_NE(p.err.find("has room for 127 and a reply"), std::string::npos) << p.err;
}

TEST_F(InteractiveContext, TruncateKeepsTheLastTokensOfTheConversation) {
  // --context-overflow applies to -i.
  const int64_t n = 10;
  const auto r = test::run_cli(
      "generate -i -m " + shipped().string() + " --temperature 0 -n 10 -t 1 --context-overflow truncate",
      long_line_ + "\nROMEO:\n");
  ASSERT_EQ(r.status, 0) << r.err;
  // Turn 1: the line alone is longer than the context; its last 128 - 10 tokens are kept.
  std::vector<int32_t> conv = ids(long_line_ + "\n");
  const GenerateResult one = reference(conv, 128, n, ContextOverflow::Truncate);
  EXPECT_EQ(one.prompt_dropped, int64_t(conv.size()) - 118);
  conv.insert(conv.end(), one.tokens.begin(), one.tokens.end());
  // Turn 2: the window and the new line no longer fit: the conversation's last 118 tokens, from position 0.
  const auto line2 = ids("ROMEO:\n");
  conv.insert(conv.end(), line2.begin(), line2.end());
  const GenerateResult two = reference(conv, 128, n, ContextOverflow::Truncate);
  ASSERT_GT(two.prompt_dropped, 0);
  EXPECT_EQ(r.out, "> " + long_line_ + "\n" + shown(one.text) + "> ROMEO:\n" + shown(two.text) + "> \n");
  const int64_t dropped2 = int64_t(one.prompt.size() + one.tokens.size() + line2.size()) - 118;
  EXPECT_EQ(r.err, "minigpt: dropped the oldest " + std::to_string(one.prompt_dropped) +
                       " tokens of the conversation to fit the context of 128 tokens (--context-overflow "
                       "truncate)\nminigpt: dropped the oldest " +
                       std::to_string(dropped2) +
                       " tokens of the conversation to fit the context of 128 tokens (--context-overflow "
                       "truncate)\n");
}

TEST_F(InteractiveContext, SlideGoesOnPastTheContextAsGenerateDoes) {
  const auto r = test::run_cli(
      "generate -i -m " + shipped().string() + " --temperature 0 -n 100 -c 32 -t 1 --context-overflow slide",
      "ROMEO:\n");
  ASSERT_EQ(r.status, 0) << r.err;
  const GenerateResult want = reference(ids("ROMEO:\n"), 32, 100, ContextOverflow::Slide);
  ASSERT_GE(want.slides, 3);
  ASSERT_EQ(want.tokens.size(), 100u);
  EXPECT_EQ(r.out, "> ROMEO:\n" + shown(want.text) + "> \n");
  EXPECT_TRUE(r.err.empty()) << r.err;

  // Without slide, a generation that fills the context ends the turn (truncate) or the session (error).
  const auto t = test::run_cli("generate -i -m " + shipped().string() +
                                   " --temperature 0 -n 100 -c 32 -t 1 --context-overflow truncate",
                               "ROMEO:\n");
  ASSERT_EQ(t.status, 0) << t.err;
  const GenerateResult cut = reference(ids("ROMEO:\n"), 32, 100, ContextOverflow::Truncate);
  EXPECT_EQ(cut.reason, StopReason::Context);
  EXPECT_EQ(t.out, "> ROMEO:\n" + shown(cut.text) + "> \n");
  EXPECT_NE(t.err.find("the context of 32 tokens is full: the turn ends here"), std::string::npos) << t.err;
}

}  // namespace
}  // namespace minigpt
