// `minigpt chat` through a pseudo-terminal on chatml-tiny (a random GPT-2 with Qwen2.5's ChatML template):
// two turns, a Ctrl-C mid-reply, /reset, a third turn. Each turn's prompt (--prompt-log) equals what
// transformers' apply_chat_template renders for the conversation so far, its replies equal
// generate(do_sample=False) (tests/fixtures/chat/session.json, tools/reference/make_chat_reference.py), and
// the KV cache keeps the previous turns: only the new part of the prompt is evaluated.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/session.h"
#include "minigpt/tokenizer.h"
#include "pty_util.h"
#include "test_util.h"

namespace minigpt {
namespace {

using ojson = nlohmann::ordered_json;

ojson read_chat_session() {
  std::ifstream in(test::source_dir() / "tests/fixtures/chat/session.json");
  return ojson::parse(in);
}

std::vector<ojson> read_json_lines(const std::filesystem::path& p) {
  std::vector<ojson> out;
  std::istringstream in(test::read_file(p));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(ojson::parse(line));
  }
  return out;
}

// The command line: greedy, the reference's reply length, and the tokens it suppressed (the random model's
// parts of characters) banned, as transformers' suppress_tokens bans them.
std::vector<std::string> chat_args(const ojson& ref, const std::string& log) {
  std::vector<std::string> args = {MINIGPT_CLI_PATH,
                                   "chat",
                                   "-m",
                                   test::fixture_dir("chatml-tiny").string(),
                                   "--system",
                                   ref["system"].get<std::string>(),
                                   "--temperature",
                                   "0",
                                   "-n",
                                   std::to_string(ref["max_new_tokens"].get<int64_t>()),
                                   "-t",
                                   "1",
                                   "--prompt-log",
                                   log};
  for (const auto& id : ref["suppress"]) {
    args.push_back("--logit-bias");
    args.push_back(std::to_string(id.get<int64_t>()) + "-inf");
  }
  return args;
}

TEST(ChatCli, TwoTurnsCtrlCResetAndATurnEqualTransformersRendering) {
  const ojson ref = read_chat_session();
  const auto& turns = ref["turns"];
  ASSERT_EQ(turns.size(), 4u);
  test::TempDir tmp;
  const auto log = tmp / "prompts.jsonl";
  test::Pty pty(chat_args(ref, log.string()));
  ASSERT_TRUE(pty.ok());
  ASSERT_TRUE(pty.read_until("> ", 0, 60)) << pty.out();

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
    const size_t end = pty.out().find("\n> ", start);
    // libedit may draw the line again (seen under load): the reply follows the last echo.
    const size_t last = pty.out().rfind(line + "\n", end);
    const size_t begin = last != std::string::npos && last >= from ? last + line.size() + 1 : start;
    return pty.out().substr(begin, end - begin);
  };
  const auto users = ref["users"];
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("turn " + std::to_string(i + 1));
    EXPECT_EQ(turn(users[i].get<std::string>()), turns[i]["reply"].get<std::string>());
  }

  // Ctrl-C mid-reply, deterministically (as tests/test_interactive.cpp does it): the line is typed and
  // echoed, the program is stopped before it reads the Enter, and SIGINT is pending when it continues: the
  // reply ends at its first token and the program goes back to the prompt.
  {
    const std::string line = users[2].get<std::string>();
    ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();
    const size_t from = pty.out().size();
    pty.write(line);
    ASSERT_TRUE(pty.read_until(line, from)) << pty.out();
    ASSERT_TRUE(pty.stop()) << pty.out();
    pty.write("\n");
    ::kill(pty.pid(), SIGINT);
    ::kill(pty.pid(), SIGCONT);
    ASSERT_TRUE(pty.read_until(line + "\n", from)) << pty.out();
    const size_t start = pty.out().find(line + "\n", from) + line.size() + 1;
    ASSERT_TRUE(pty.read_until("\n> ", start)) << pty.out();
    EXPECT_EQ(::kill(pty.pid(), 0), 0) << "Ctrl-C ended the program";
  }
  {
    ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();
    const size_t from = pty.out().size();
    pty.write("/reset\n");
    ASSERT_TRUE(pty.read_until("the conversation is cleared", from)) << pty.out();
    ASSERT_TRUE(pty.read_until("> ", from)) << pty.out();
  }
  {
    SCOPED_TRACE("turn after /reset");
    EXPECT_EQ(turn(users[3].get<std::string>()), turns[3]["reply"].get<std::string>());
  }
  ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();  // libedit reads the Ctrl-D, not the terminal
  pty.write("\x04");
  EXPECT_EQ(pty.wait_exit(), 0) << pty.out();

  // The prompts it evaluated: transformers' renderings of the conversation so far, the replies included; the
  // second turn evaluates only what follows the first turn's prompt and reply in the cache, the one after
  // /reset all of its prompt.
  const std::vector<ojson> prompts = read_json_lines(log);
  ASSERT_EQ(prompts.size(), 4u) << test::read_file(log);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("turn " + std::to_string(i + 1));
    EXPECT_EQ(prompts[i]["prompt"].get<std::string>(), turns[i]["prompt"].get<std::string>());
    EXPECT_EQ(prompts[i]["tokens"].get<size_t>(), turns[i]["ids"].size());
    EXPECT_EQ(prompts[i]["kept"].get<size_t>() + prompts[i]["evaluated"].get<size_t>(),
              turns[i]["ids"].size());
  }
  EXPECT_EQ(prompts[0]["kept"], 0);
  EXPECT_GE(prompts[1]["kept"].get<size_t>(), turns[0]["ids"].size())
      << "the first turn's prompt was evaluated again";
  EXPECT_GE(prompts[2]["kept"].get<size_t>(), turns[1]["ids"].size());
  EXPECT_LT(prompts[1]["evaluated"].get<size_t>(), turns[1]["ids"].size() - turns[0]["ids"].size());
  EXPECT_EQ(prompts[3]["kept"], 0) << "/reset kept the cache";
  // The reply Ctrl-C stopped: the start of the whole reply, shorter than it, and what the history kept (the
  // next prompt would show it; /reset dropped it here).
  const std::string cut = prompts[2]["reply"].get<std::string>(),
                    whole = turns[2]["reply"].get<std::string>();
  EXPECT_FALSE(cut.empty()) << "the reply ends at its first token, after it is shown";
  EXPECT_LT(cut.size(), whole.size());
  EXPECT_EQ(whole.substr(0, cut.size()), cut);
}

// A stray Enter, or a line of spaces, is no turn: the prompt is shown again, nothing is rendered, generated
// or added to the conversation, and the next line's turn is the reference's first.
TEST(ChatCli, BlankLinesAreNoTurns) {
  const ojson ref = read_chat_session();
  test::TempDir tmp;
  const auto log = tmp / "prompts.jsonl";
  test::Pty pty(chat_args(ref, log.string()));
  ASSERT_TRUE(pty.ok());
  ASSERT_TRUE(pty.read_until("> ", 0, 60)) << pty.out();
  for (const std::string blank : {"", "   "}) {  // (a tab would be libedit's completion)
    ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();
    const size_t from = pty.out().size();
    pty.write(blank + "\n");
    ASSERT_TRUE(pty.read_until("\n> ", from)) << pty.out();
  }
  ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();
  const std::string line = ref["users"][0].get<std::string>();
  size_t from = pty.out().size();
  pty.write(line + "\n");
  ASSERT_TRUE(pty.read_until(line + "\n", from)) << pty.out();
  from = pty.out().find(line + "\n", from) + line.size() + 1;
  ASSERT_TRUE(pty.read_until("\n> ", from)) << pty.out();
  EXPECT_EQ(pty.out().substr(from, pty.out().find("\n> ", from) - from),
            ref["turns"][0]["reply"].get<std::string>());
  ASSERT_TRUE(pty.wait_raw_mode()) << pty.out();
  pty.write("\x04");
  EXPECT_EQ(pty.wait_exit(), 0) << pty.out();
  const std::vector<ojson> prompts = read_json_lines(log);
  ASSERT_EQ(prompts.size(), 1u) << test::read_file(log);
  EXPECT_EQ(prompts[0]["prompt"].get<std::string>(), ref["turns"][0]["prompt"].get<std::string>());
  EXPECT_EQ(prompts[0]["kept"], 0);
}

// The conversation from a pipe (no terminal: plain lines, the transcript shows each line after its prompt); a
// model without a chat template is refused in one line unless --chat-template gives one.
TEST(ChatCli, PipedLinesAndTheTemplateFlag) {
  const ojson ref = read_chat_session();
  test::TempDir tmp;
  std::string args;
  for (const auto& a : chat_args(ref, (tmp / "log").string())) {
    if (a == MINIGPT_CLI_PATH) continue;
    args += "'" + a + "' ";
  }
  auto r = test::run_cli(args, ref["users"][0].get<std::string>() + "\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "> " + ref["users"][0].get<std::string>() + "\n" +
                       ref["turns"][0]["reply"].get<std::string>() + "\n> \n");

  r = test::run_cli("chat -t 1", "hi\n");  // the shipped model has no chat template
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("has no chat template"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--chat-template FILE"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  // The shipped model with Qwen2.5's template given, the one chatml-tiny carries: the prompt of the
  // reference's first turn.
  const auto tmpl = test::source_dir() / "tests/fixtures/chat/templates/Qwen-Qwen2.5-7B-Instruct.jinja";
  r = test::run_cli("chat -t 1 -n 4 --temperature 0 --system '" + ref["system"].get<std::string>() +
                        "' --chat-template '" + tmpl.string() + "' --prompt-log '" + (tmp / "log2").string() +
                        "'",
                    ref["users"][0].get<std::string>() + "\n");
  EXPECT_EQ(r.status, 0) << r.err;
  const auto lines = read_json_lines(tmp / "log2");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["prompt"].get<std::string>(), ref["turns"][0]["prompt"].get<std::string>());
}

// Mistral-Nemo's template puts the system prompt in the last user turn, so the second turn's rendering
// differs from the first's early on: the cache is kept only up to there and the rest evaluated again. The
// prompt is still the template's rendering of the history (the first reply included; the engine renders as
// transformers does, test_chat_template.cpp), and the reply is what a fresh session gives on that prompt.
TEST(ChatCli, AHistoryRenderedDifferentlyIsEvaluatedAgain) {
  const auto dir = test::fixture_dir("chatml-tiny");  // with Mistral's template in place of its own
  const auto file =
      test::source_dir() / "tests/fixtures/chat/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja";
  test::TempDir tmp;
  const int64_t n = 8;
  const auto r = test::run_cli("chat -m '" + dir.string() + "' -t 1 --temperature 0 -n " + std::to_string(n) +
                                   " --system 'Be brief.' " + "--chat-template '" + file.string() +
                                   "' --prompt-log '" + (tmp / "log").string() + "'",
                               "ROMEO:\nJULIET:\n");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto turns = read_json_lines(tmp / "log");
  ASSERT_EQ(turns.size(), 2u);
  const Tokenizer tok = Tokenizer::load(dir);
  const ChatTemplate tmpl = load_chat_template_file(file, ModelSource::open(dir), tok);
  const ojson system = {{"role", "system"}, {"content", "Be brief."}};
  const ojson history = ojson::array({system,
                                      {{"role", "user"}, {"content", "ROMEO:"}},
                                      {{"role", "assistant"}, {"content", turns[0]["reply"]}},
                                      {{"role", "user"}, {"content", "JULIET:"}}});
  const std::string prompt = tmpl.render(history, true);
  EXPECT_EQ(turns[1]["prompt"].get<std::string>(), prompt);
  const auto ids = tok.encode(prompt, true);
  EXPECT_EQ(turns[1]["tokens"].get<size_t>(), ids.size());
  EXPECT_LT(turns[1]["kept"].get<size_t>(), turns[0]["tokens"].get<size_t>())
      << "the first turn's rendering changed";
  EXPECT_EQ(turns[1]["kept"].get<size_t>() + turns[1]["evaluated"].get<size_t>(), ids.size());

  auto model = Model::load(dir, LoadOptions::threads(1));
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_new_tokens = n;
  g.skip_special = true;
  g.eos_token_ids = chat_stop_ids(model->config(), {}, tmpl);
  Session s(model);
  EXPECT_EQ(generate(s, &tok, ids, g).text, turns[1]["reply"].get<std::string>());
}

}  // namespace
}  // namespace minigpt
