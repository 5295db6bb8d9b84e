// Structured output (minigpt/constraint.h, docs/structured-output.md): a random-weight model (chatml-tiny,
// whose free output is no JSON) constrained by a JSON Schema gives JSON that validates against it (checked
// here by the schema's few keywords, not by the engine), and constrained by llama.cpp's chess.gbnf gives a
// text its rules match; `generate` and `chat` take the flags and refuse a bad schema or grammar in one line;
// the real SmolLM2 (where present) with --json-object gives a JSON object.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "minigpt/constraint.h"
#include "minigpt/error.h"
#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/session.h"
#include "minigpt/tokenizer.h"
#include "test_util.h"

namespace minigpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Bounded strings and numbers, so that even a random model's output ends.
const char* const kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "colour": {"enum": ["red", "green", "blue"]},
    "member": {"type": "boolean"}
  },
  "required": ["name", "age", "colour", "member"]
})";

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (const unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The schema's keywords, checked on `text`: the reasons it fails, empty when it validates.
std::string schema_violations(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return std::string("not JSON: ") + e.what();
  }
  if (!j.is_object()) return "not an object";
  std::string why;
  for (const char* key : {"name", "age", "colour", "member"})
    if (!j.contains(key)) why += std::string("no \"") + key + "\"; ";
  if (!why.empty()) return why;
  if (!j["name"].is_string()) {
    why += "name is not a string; ";
  } else if (const size_t n = code_points(j["name"].get<std::string>()); n < 1 || n > 12) {
    why += "name has " + std::to_string(n) + " characters; ";
  }
  if (!j["age"].is_number_integer() || j["age"].get<int64_t>() < 0 || j["age"].get<int64_t>() > 150)
    why += "age is not an integer in [0, 150]; ";
  if (!j["colour"].is_string() || (j["colour"] != "red" && j["colour"] != "green" && j["colour"] != "blue"))
    why += "colour is not red, green or blue; ";
  if (!j["member"].is_boolean()) why += "member is not a boolean; ";
  return why;
}

// chess.gbnf's rules as a regular expression (its language is regular).
const std::regex& chess_language() {
  static const std::string pawn = "(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?";
  static const std::string nonpawn = "[NBKQR][a-h]?[1-8]?x?[a-h][1-8]";
  static const std::string castle = "O-O(?:-O)?";
  static const std::string move = "(?:" + pawn + "|" + nonpawn + "|" + castle + ")[+#]?";
  static const std::regex re("1\\. " + move + " " + move + "\n(?:[1-9][0-9]?\\. " + move + " " + move +
                             "\n)+");
  return re;
}

struct Tiny {
  std::shared_ptr<const Model> model = Model::load(test::fixture_dir("chatml-tiny"), LoadOptions::threads(1));
  Tokenizer tok = Tokenizer::load(test::fixture_dir("chatml-tiny"));
};

// `eos_bias`: added to the EOS logit, where the grammar allows it, so that a random model ends a grammar that
// may go on (chess.gbnf's lines) within max_new_tokens.
GenerateResult run(const Tiny& t, std::shared_ptr<const Grammar> grammar, uint64_t seed, float eos_bias = 0) {
  Session session(t.model);
  GenerateOptions o;
  if (eos_bias != 0) o.sampling.logit_bias.push_back({int32_t(t.model->config().eos_token_id), eos_bias});
  o.max_new_tokens = 600;
  o.overflow = ContextOverflow::Slide;  // the fixture's context is 128 positions
  o.sampling.seed = seed;
  o.grammar = std::move(grammar);
  return generate(session, &t.tok, t.tok.encode("Answer in JSON: "), o);
}

TEST(StructuredOutput, RandomModelFollowsTheSchema) {
  const Tiny t;
  const GrammarCompiler compiler(t.tok, t.model->config().n_vocab);
  const auto schema = compiler.json_schema(kSchema);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    // Free, the model writes no such JSON (so the check below can fail)...
    const GenerateResult free_run = run(t, nullptr, seed);
    EXPECT_NE(schema_violations(free_run.text), "") << free_run.text;
    // ...constrained, it does, and ends there with its EOS.
    const GenerateResult r = run(t, schema, seed);
    EXPECT_EQ(r.reason, StopReason::Eos) << "seed " << seed << ": " << r.text;
    EXPECT_EQ(schema_violations(r.text), "") << "seed " << seed << ": " << r.text;
  }
}

TEST(StructuredOutput, RandomModelFollowsAGbnfGrammar) {
  const Tiny t;
  const GrammarCompiler compiler(t.tok, t.model->config().n_vocab);
  const auto chess =
      compiler.gbnf(test::read_file(test::source_dir() / "tests" / "fixtures" / "grammar" / "chess.gbnf"));
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    EXPECT_FALSE(std::regex_match(run(t, nullptr, seed).text, chess_language()));
    const GenerateResult r = run(t, chess, seed, 5.0f);
    EXPECT_EQ(r.reason, StopReason::Eos) << "seed " << seed << ": " << r.text;
    EXPECT_TRUE(std::regex_match(r.text, chess_language())) << "seed " << seed << ": " << r.text;
  }
}

// With no end-of-text id to wait for (ignore_eos), generation ends as soon as the grammar's text is complete.
TEST(StructuredOutput, WithoutEosTheGrammarsEndEndsGeneration) {
  const Tiny t;
  const GrammarCompiler compiler(t.tok, t.model->config().n_vocab);
  Session session(t.model);
  GenerateOptions o;
  o.max_new_tokens = 100;
  o.ignore_eos = true;
  o.sampling.seed = 7;
  o.grammar = compiler.json_schema(R"({"enum": ["yes", "no"]})");
  const GenerateResult r = generate(session, &t.tok, t.tok.encode("Well? "), o);
  // Nothing after the closing quote: the end came with the grammar's.
  ASSERT_FALSE(r.text.empty());
  EXPECT_EQ(r.text.back(), '"') << r.text;
  const json j = json::parse(r.text);
  EXPECT_TRUE(j == "yes" || j == "no") << r.text;
  EXPECT_EQ(r.reason, StopReason::Eos);
}

TEST(StructuredOutput, BadSchemaOrGrammarIsAnArgumentError) {
  const Tiny t;
  const GrammarCompiler compiler(t.tok, t.model->config().n_vocab);
  test::expect_error([&] { compiler.json_schema("{\"type\": "); }, ErrorKind::Argument, {"json_schema: "});
  test::expect_error([&] { compiler.json_schema(R"({"type": "strnig"})"); }, ErrorKind::Argument,
                     {"json_schema: "});
  test::expect_error([&] { compiler.gbnf("root ::= \"a\" undefined_rule"); }, ErrorKind::Argument,
                     {"grammar: ", "undefined_rule"});
}

// The CLI: the flags constrain `generate` and `chat`; a bad schema or grammar is one line and exit status 1.
TEST(StructuredOutputCli, GenerateAndChatTakeTheFlags) {
  const std::string m = "-m " + test::fixture_dir("chatml-tiny").string() + " ";
  test::TempDir tmp;
  test::write_file(tmp / "schema.json", kSchema);
  auto r =
      test::run_cli("generate " + m + "-p 'Answer: ' --no-echo --seed 3 -n 600 --context-overflow slide " +
                    "--json-schema " + (tmp / "schema.json").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(schema_violations(r.out), "") << r.out;
  r = test::run_cli("generate " + m +
                    "-p 'Answer: ' --no-echo --seed 3 -n 100 --json-schema '{\"enum\": [\"a\"]}'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), "a") << r.out;
  // A reply in the fixture's context of 128 positions, after the chat template's tokens: a short object.
  r = test::run_cli("chat " + m + "--seed 3 --json-schema " +
                        "'{\"type\": \"object\", \"properties\": {\"ok\": {\"type\": \"boolean\"}}, " +
                        "\"required\": [\"ok\"]}'",
                    "hi\n");
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t open = r.out.find('{'), close = r.out.rfind('}');
  ASSERT_NE(open, std::string::npos) << r.out;
  json j;
  ASSERT_NO_THROW(j = json::parse(r.out.substr(open, close - open + 1))) << r.out;
  EXPECT_TRUE(j.is_object() && j.contains("ok") && j["ok"].is_boolean()) << r.out;
}

TEST(StructuredOutputCli, BadSchemaOrGrammarIsOneLine) {
  const std::string m = "-m " + test::fixture_dir("chatml-tiny").string() + " -p x ";
  test::TempDir tmp;
  test::write_file(tmp / "bad.gbnf", "root ::= \"a\" nowhere\n");
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--json-schema '{\"type\": \"strnig\"}'", "--json-schema: "},
           {"--json-schema " + (tmp / "missing.json").string(), "missing.json"},
           {"--grammar-file " + (tmp / "bad.gbnf").string(), "bad.gbnf: "},
       }) {
    const auto r = test::run_cli("generate " + m + args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(test::line_count(r.err), 1u) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// The real SmolLM2-135M-Instruct (its Q4_1 GGUF; test::smollm2_gguf(), scripts/fetch_smollm2.sh): asked for
// JSON, it wraps it in a Markdown fence and prose; with --json-object its whole reply is a JSON object.
TEST(StructuredOutputReal, SmolLM2JsonObject) {
  const fs::path path = test::smollm2_gguf();
  MINIGPT_SKIP_WITHOUT_MODEL(path, "scripts/fetch_smollm2.sh");
  const std::string line = "Write a JSON object with the name and age of a cat.";
  // chat's stdout: "> " and the line read, the reply, then "> " again at the end of input.
  const auto reply = [&](const std::string& flags) {
    const auto r =
        test::run_cli("chat -m " + path.string() + " --temperature 0 -n 200 " + flags, line + "\n");
    EXPECT_EQ(r.status, 0) << r.err;
    const size_t begin = r.out.find('\n') + 1, end = r.out.rfind("\n> ");
    return end != std::string::npos && end > begin ? r.out.substr(begin, end - begin) : r.out;
  };
  const std::string free_reply = reply("");
  EXPECT_FALSE(json::accept(free_reply)) << free_reply;
  const std::string constrained = reply("--json-object");
  ASSERT_TRUE(json::accept(constrained)) << constrained;
  const json j = json::parse(constrained);
  EXPECT_TRUE(j.is_object() && j.contains("name")) << constrained;
}

}  // namespace
}  // namespace minigpt
