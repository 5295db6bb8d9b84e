// Chat templates (src/chat/chat_template.h) against transformers' apply_chat_template: real models'
// templates (tests/fixtures/chat/templates.json) and a tiny ChatML model (tests/fixtures/models/chatml-tiny),
// both from tools/reference/make_chat_reference.py.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

#include "chat/chat_template.h"
#include "convert/gguf_convert.h"
#include "formats/gguf.h"
#include "minigpt/error.h"
#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/session.h"
#include "minigpt/tokenizer.h"
#include "test_util.h"

namespace minigpt {
namespace {

using ojson = nlohmann::ordered_json;

ojson read_fixture(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  return ojson::parse(in);
}

// The fixed time the reference rendered strftime_now with (its "now", 2024-07-26T14:05:09).
std::tm reference_now(const ojson& ref) {
  std::tm t{};
  const std::string s = ref["now"].get<std::string>();
  EXPECT_EQ(std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour,
                        &t.tm_min, &t.tm_sec),
            6);
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  std::tm norm = t;
  timegm(&norm);  // fills tm_wday / tm_yday for %a, %A, %j
  return norm;
}

// Every template of the fixture, every conversation, with and without the generation prompt: the same text
// transformers renders, byte for byte; where transformers fails (raise_exception, or a template that cannot
// handle the conversation, e.g. no messages), an Error(Argument) here too.
TEST(ChatTemplate, RendersRealTemplatesAsTransformersDoes) {
  const ojson ref = read_fixture(test::source_dir() / "tests/fixtures/chat/templates.json");
  const std::tm now = reference_now(ref);
  ASSERT_GE(ref["templates"].size(), 20u);
  int outputs = 0, errors = 0;
  for (const auto& t : ref["templates"]) {
    const std::string name = t["name"].get<std::string>();
    SCOPED_TRACE(name);
    std::optional<ChatTemplate> parsed;
    try {
      parsed.emplace(t["source"].get<std::string>(), ref["tokens"], name);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    const ChatTemplate& tmpl = *parsed;
    for (const auto& c : t["cases"]) {
      const auto& conv = ref["conversations"][c["conversation"].get<size_t>()];
      const bool agp = c["add_generation_prompt"].get<bool>();
      SCOPED_TRACE(conv["name"].get<std::string>() + (agp ? " +generation prompt" : ""));
      if (c.contains("output")) {
        std::string got;
        try {
          got = tmpl.render(conv["messages"], agp, ojson::object(), &now);
        } catch (const Error& e) {
          ADD_FAILURE() << e.what();
          continue;
        }
        EXPECT_EQ(got, c["output"].get<std::string>());
        ++outputs;
      } else {
        try {
          tmpl.render(conv["messages"], agp, ojson::object(), &now);
          ADD_FAILURE() << "rendered, where transformers raised " << c["error"];
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Argument);
          EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
        ++errors;
      }
    }
  }
  EXPECT_GT(outputs, 200);
  EXPECT_GT(errors, 10);
}

// Seven real models' templates (Llama 3.1 and 3.2, Qwen2.5, Qwen3, SmolLM3, Mistral-Nemo, Phi-3.5; the files
// in tests/fixtures/chat/templates/, llama.cpp's) with each model's own special tokens, as a transformers
// tokenizer's apply_chat_template passes them (its special_tokens_map: a model without a BOS has none), and
// the variables the Llama templates read (date_string): the ten non-empty conversations, with and without the
// generation prompt, the same bytes; an error where transformers raised one.
TEST(ChatTemplate, RealModelsTemplatesWithTheirOwnTokensEqualApplyChatTemplate) {
  const auto dir = test::source_dir() / "tests/fixtures/chat";
  const ojson ref = read_fixture(dir / "templates.json");
  const std::tm now = reference_now(ref);
  ASSERT_GE(ref["models"].size(), 7u);
  for (const auto& m : ref["models"]) {
    const std::string name = m["name"].get<std::string>();
    SCOPED_TRACE(name);
    std::ifstream in(dir / m["file"].get<std::string>(), std::ios::binary);
    ASSERT_TRUE(in) << m["file"];
    std::stringstream ss;
    ss << in.rdbuf();
    const ChatTemplate tmpl(ss.str(), m["special_tokens"], name);
    int outputs = 0;
    std::set<size_t> conversations;
    for (const auto& c : m["cases"]) {
      const auto& conv = ref["conversations"][c["conversation"].get<size_t>()];
      const bool agp = c["add_generation_prompt"].get<bool>();
      SCOPED_TRACE(conv["name"].get<std::string>() + (agp ? " +generation prompt" : ""));
      conversations.insert(c["conversation"].get<size_t>());
      if (c.contains("output")) {
        try {
          EXPECT_EQ(tmpl.render(conv["messages"], agp, m["extra"], &now), c["output"].get<std::string>());
          ++outputs;
        } catch (const Error& e) {
          ADD_FAILURE() << e.what();
        }
      } else {
        EXPECT_THROW(tmpl.render(conv["messages"], agp, m["extra"], &now), Error) << c["error"];
      }
    }
    EXPECT_EQ(conversations.size(), 10u);
    EXPECT_GE(outputs, 18);  // Mistral's refuses the two conversations whose roles do not alternate
  }
}

// raise_exception's message reaches the caller, on one line.
TEST(ChatTemplate, RaiseExceptionIsAnArgumentErrorWithTheTemplatesMessage) {
  ChatTemplate t("{% if messages|length == 0 %}{{ raise_exception('No messages\nprovided.') }}{% endif %}x",
                 {});
  try {
    t.render(ojson::array(), false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Argument);
    EXPECT_NE(std::string(e.what()).find("No messages provided."), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.render(ojson::array({{{"role", "user"}, {"content", "hi"}}}), false), "x");
}

// Variables: the special tokens, chat_template_kwargs (extra) over them, and tools / documents null unless
// given.
TEST(ChatTemplate, SeesSpecialTokensExtraVariablesAndNullTools) {
  ChatTemplate t(
      "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|{{ enable_thinking }}",
      ojson{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  EXPECT_EQ(t.render(ojson::array(), false, ojson{{"enable_thinking", false}}), "<s>|</s>|True|True|False");
  EXPECT_EQ(t.render(ojson::array(), false, ojson{{"eos_token", "E"}, {"enable_thinking", 1}}),
            "<s>|E|True|True|1");
}

// A malformed or absurd template is one line naming where it came from, never a crash.
TEST(ChatTemplate, MalformedTemplatesAreOneLineFormatErrors) {
  const std::string deep_brackets = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  std::string deep_blocks;
  for (int i = 0; i < 5000; ++i) deep_blocks += "{% if true %}";
  for (int i = 0; i < 5000; ++i) deep_blocks += "{% endif %}";
  for (const std::string& src :
       {std::string("{% for m in messages %}{{ m.content }}"), std::string("{{ 1 + }}"),
        std::string("{% if %}{% endif %}"), std::string("{{ 'unterminated }}"), deep_brackets, deep_blocks,
        std::string(size_t(2) << 20, 'x')}) {
    SCOPED_TRACE(src.substr(0, 60));
    try {
      ChatTemplate t(src, {}, "model/tokenizer_config.json");
      FAIL() << "parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Format);
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("model/tokenizer_config.json: ", 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_LE(what.size(), 400u);
    }
  }
  // Moderate nesting, as real templates have, parses.
  EXPECT_EQ(ChatTemplate("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}", {})
                .render(ojson::array(), false),
            "1");
}

// A macro that calls itself without end (directly or through another) would overflow the stack and kill the
// server at the first chat request; minja with our patch (scripts/minja_limits.patch) stops at 128
// nested calls: an Argument error (a 400), naming the macro. Recursion that ends, as gpt-oss's
// render_typescript_type does over a JSON schema, renders.
TEST(ChatTemplate, EndlessMacroRecursionIsAnErrorNotACrash) {
  for (const std::string& src :
       {std::string("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
        std::string(
            "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}")}) {
    ChatTemplate t(src, {});
    try {
      t.render(ojson::array({{{"role", "user"}, {"content", "hi"}}}), true);
      FAIL() << "rendered: " << src;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Argument);
      EXPECT_NE(std::string(e.what()).find("calls nested deeper than 128"), std::string::npos) << e.what();
    }
  }
  ChatTemplate ends(
      "{% macro f(n) %}{{ n }},{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(100) }}", {});
  std::string want;
  for (int i = 100; i >= 0; --i) want += std::to_string(i) + ",";
  EXPECT_EQ(ends.render(ojson::array(), false), want);
}

// range() with a zero step looped forever (start > end) and range(10**9) built a list of a billion items;
// the patch refuses both (an Argument error, a 400). Ranges as Python gives them still render, negative steps
// and the int64 extremes included.
TEST(ChatTemplate, RangeRefusesAZeroStepAndHugeLists) {
  for (const std::string& src :
       {std::string("{% for i in range(5, 0, 0) %}{% endfor %}"),
        std::string("{{ range(1000000001) | length }}"),
        std::string("{{ range(-9223372036854775807, 9223372036854775807) | length }}")}) {
    try {
      ChatTemplate(src, {}).render(ojson::array(), false);
      FAIL() << "rendered: " << src;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Argument) << src;
      const std::string what = e.what();
      EXPECT_TRUE(what.find("must not be zero") != std::string::npos ||
                  what.find("more than 1000000") != std::string::npos)
          << what;
    }
  }
  const std::vector<std::pair<std::string, std::string>> ok = {
      {"{{ range(4) | join(',') }}", "0,1,2,3"},
      {"{{ range(10, 0, -3) | join(',') }}", "10,7,4,1"},
      {"{{ range(2, 9, 3) | join(',') }}", "2,5,8"},
      {"{{ range(5, 5) | length }}", "0"},
      {"{{ range(9223372036854775806, 9223372036854775807) | join(',') }}", "9223372036854775806"},
      {"{{ range(1000000) | length }}", "1000000"}};
  for (const auto& [src, want] : ok)
    EXPECT_EQ(ChatTemplate(src, {}).render(ojson::array(), false), want) << src;
}

// The work and memory of one render are bounded (the patch): loops nested over ranges each within range()'s
// bound, strings and lists doubled a few dozen times, a string repeated 10^8 times and output of 100 MB would
// be a hang or gigabytes; each is an Argument error (a 400), and the budget is per render.
TEST(ChatTemplate, WorkAndSizeAreBounded) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"{% for i in range(450) %}{% for j in range(450) %}{% endfor %}{% endfor %}",
       "more than 200000 loop iterations and macro calls"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       "a string of 33554432 bytes: more than 16777216"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
       "a string of 33554432 bytes: more than 16777216"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
       "a list of 1048576 items: more than 1000000"},
      {"{{ 'abc' * 100000000 }}", "a string of 3 bytes repeated 100000000 times"},
      {"{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "the output of"},
      {"{% macro f() %}{% endmacro %}{% for i in range(100001) %}{{ f() }}{% endfor %}",
       "more than 200000 loop iterations and macro calls"},
  };
  for (const auto& [src, want] : refused) {
    try {
      ChatTemplate(src, {}).render(ojson::array(), false);
      FAIL() << "rendered: " << src;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Argument) << src;
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << src << "\n" << e.what();
    }
  }
  // Within the bounds: rendered, and twice in a row (the budget is each render's).
  ChatTemplate big(
      "{% for i in range(120000) %}{% endfor %}{{ ('ab' * 4000000) | length }}{{ '' * 1000000000000000000 }}",
      {});
  for (int i = 0; i < 2; ++i) EXPECT_EQ(big.render(ojson::array(), false), "8000000");
}

// chatml-tiny: its chat_template.jinja and tokenizer_config.json's tokens; the rendered prompt, its ids and
// the greedy continuation equal transformers' (apply_chat_template(tokenize=True),
// generate(do_sample=False)).
TEST(ChatTemplate, ChatModelPromptIdsAndGreedyTokensEqualTransformers) {
  const auto dir = test::fixture_dir("chatml-tiny");
  const ojson ref = read_fixture(dir / "reference.json");
  const Tokenizer tok = Tokenizer::load(dir);
  const auto tmpl = load_chat_template(dir, tok);
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_EQ(tmpl->special_tokens().value("eos_token", ""), "<|im_end|>");
  auto model = Model::load(dir);
  ASSERT_GE(ref["cases"].size(), 4u);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string prompt = tmpl->render(c["messages"], true);
    EXPECT_EQ(prompt, c["prompt"].get<std::string>());
    const auto ids = tok.encode(prompt, /*allow_special=*/true);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    GenerateOptions o;
    o.max_new_tokens = ref["max_new_tokens"].get<int64_t>();
    o.sampling.temperature = 0;
    Session s(model);
    const GenerateResult r = generate(s, &tok, ids, o);
    std::vector<int32_t> got = r.tokens;
    if (r.reason == StopReason::Eos) got.push_back(model->config().eos_token_id);  // transformers keeps it
    EXPECT_EQ(got, c["generated"].get<std::vector<int32_t>>());
  }
}

// A chat reply ends at the template's eos_token (<|im_end|> for chatml-tiny, from tokenizer_config.json) as
// well as at the model's eos ids, each once; a template made from a string adds none.
TEST(ChatTemplate, StopIdsAreTheModelsEosAndTheTemplatesEndOfTurn) {
  const auto dir = test::fixture_dir("chatml-tiny");
  const Tokenizer tok = Tokenizer::load(dir);
  const auto tmpl = load_chat_template(dir, tok);
  ASSERT_TRUE(tmpl.has_value());
  const auto im_end = tok.special_id("<|im_end|>");
  const auto eot = tok.special_id("<|endoftext|>");
  ASSERT_TRUE(im_end && eot);
  EXPECT_EQ(tmpl->end_of_turn_ids(), std::vector<int32_t>{*im_end});
  Config c;
  c.eos_token_id = *eot;  // a base model's config, naming <|endoftext|> only
  EXPECT_EQ(chat_stop_ids(c, {}, *tmpl), (std::vector<int64_t>{*eot, *im_end}));
  c.eos_token_ids = {*eot, *im_end};
  EXPECT_EQ(chat_stop_ids(c, {}, *tmpl), (std::vector<int64_t>{*eot, *im_end}));
  EXPECT_EQ(chat_stop_ids(c, {7}, *tmpl), (std::vector<int64_t>{7, *im_end}));  // generation_config's first
  EXPECT_EQ(chat_stop_ids(c, {}, ChatTemplate("x", {{"eos_token", "<|im_end|>"}})),
            (std::vector<int64_t>{*eot, *im_end}));
}

// Where templates are found: chat_template.jinja over tokenizer_config.json; a list of named templates
// ("default"); none; a malformed one names the file.
TEST(ChatTemplate, LoadsFromJinjaFileConfigStringOrNamedList) {
  const auto src = test::fixture_dir("chatml-tiny");
  const Tokenizer tok = Tokenizer::load(src);
  const auto dir = std::filesystem::temp_directory_path() / ("minigpt_chat_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  EXPECT_FALSE(load_chat_template(dir, tok).has_value());
  write("tokenizer_config.json", R"({"eos_token": {"content": "E"}, "chat_template": "A{{ eos_token }}"})");
  EXPECT_EQ(load_chat_template(dir, tok)->render(ojson::array(), false), "AE");
  write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(load_chat_template(dir, tok)->render(ojson::array(), false), "D");
  write("chat_template.jinja", "J");
  EXPECT_EQ(load_chat_template(dir, tok)->render(ojson::array(), false), "J");
  std::filesystem::remove(dir / "chat_template.jinja");
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THROW(load_chat_template(dir, tok), Error);
  write("tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  try {
    load_chat_template(dir, tok);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: chat template does not parse"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// The template's files are read as config files are: a FIFO in their place is refused at once (waiting on it
// for a writer would hang `serve` at start forever), a directory or a file past 16 MiB likewise, in one line.
TEST(ChatTemplate, ItsFilesMustBeRegularAndOfSaneSize) {
  const Tokenizer tok = Tokenizer::load(test::fixture_dir("chatml-tiny"));
  test::TempDir dir;
  auto expect_refused = [&](const std::vector<std::string>& needles) {
    try {
      load_chat_template(dir.path(), tok);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  ASSERT_EQ(::mkfifo((dir / "chat_template.jinja").c_str(), 0600), 0);
  expect_refused({"chat_template.jinja", "chat template is a FIFO"});
  std::filesystem::remove(dir / "chat_template.jinja");
  std::filesystem::create_directory(dir / "chat_template.jinja");
  expect_refused({"chat_template.jinja", "is a directory"});
  std::filesystem::remove(dir / "chat_template.jinja");
  test::write_file(dir / "chat_template.jinja", "x");
  std::filesystem::resize_file(dir / "chat_template.jinja", (size_t(16) << 20) + 1);  // sparse
  expect_refused({"chat_template.jinja", "more than the 16 MiB"});
  std::filesystem::remove(dir / "chat_template.jinja");
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    ASSERT_EQ(::mkfifo((dir / name).c_str(), 0600), 0);
    expect_refused({name, "is a FIFO"});
    std::filesystem::remove(dir / name);
  }
  EXPECT_FALSE(load_chat_template(dir.path(), tok).has_value());  // none of them: no template
}

// `minigpt convert` of chatml-tiny (its template in chat_template.jinja, as transformers 5 saves it) writes
// tokenizer.chat_template as llama.cpp's converter does; the GGUF's template, with bos/eos from the token
// ids, renders the same prompt as the directory's, and the model from the GGUF gives the same greedy tokens.
TEST(ChatTemplate, AConvertedGgufCarriesTheTemplate) {
  const auto dir = test::fixture_dir("chatml-tiny");
  const auto out =
      std::filesystem::temp_directory_path() / ("minigpt_chat_" + std::to_string(::getpid()) + ".gguf");
  GgufWriteOptions o;
  o.converter = true;
  o.preset = GgufPreset::F32;
  write_gguf(dir, out, o);
  std::string jinja;
  {
    std::ifstream in(dir / "chat_template.jinja");
    std::stringstream ss;
    ss << in.rdbuf();
    jinja = ss.str();
  }
  EXPECT_EQ(GgufFile::open(out)->get_string("tokenizer.chat_template"), jinja);
  const Tokenizer tok = Tokenizer::load(out);
  const auto tmpl = load_chat_template(out, tok);
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_EQ(tmpl->special_tokens().value("eos_token", ""), "<|im_end|>");
  EXPECT_EQ(tmpl->special_tokens().value("bos_token", ""), "<|endoftext|>");
  // the eos token's id, from tokenizer.ggml.eos_token_id, ends a reply (the converter writes no eot id)
  EXPECT_EQ(tmpl->end_of_turn_ids(), std::vector<int32_t>{*tok.special_id("<|im_end|>")});
  const ojson ref = read_fixture(dir / "reference.json");
  const auto& c = ref["cases"][1];
  EXPECT_EQ(tmpl->render(c["messages"], true), c["prompt"].get<std::string>());
  const auto ids = tok.encode(c["prompt"].get<std::string>(), true);
  EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
  auto model = Model::load(out);
  GenerateOptions g;
  g.max_new_tokens = ref["max_new_tokens"].get<int64_t>();
  g.sampling.temperature = 0;
  Session s(model);
  GenerateResult r = generate(s, &tok, ids, g);
  if (r.reason == StopReason::Eos) r.tokens.push_back(model->config().eos_token_id);
  EXPECT_EQ(r.tokens, c["generated"].get<std::vector<int32_t>>());

  // The same file under a name without ".gguf" (a download saved as "model") is known by its bytes: one
  // ModelSource gives the model, the tokenizer and the template, as the path with the extension does.
  const auto renamed = std::filesystem::path(out.string() + "-renamed");
  std::filesystem::copy_file(out, renamed, std::filesystem::copy_options::overwrite_existing);
  const ModelSource source = ModelSource::open(renamed);
  EXPECT_EQ(source.format(), ModelFormat::Gguf);
  const Tokenizer tok2 = Tokenizer::load(source);
  const auto tmpl2 = load_chat_template(source, tok2);
  ASSERT_TRUE(tmpl2.has_value()) << "a GGUF file named without .gguf lost its chat template";
  EXPECT_EQ(tmpl2->render(c["messages"], true), c["prompt"].get<std::string>());
  EXPECT_EQ(tok2.encode(c["prompt"].get<std::string>(), true), ids);
  EXPECT_EQ(Model::load(source)->config().n_layer, model->config().n_layer);
  std::filesystem::remove(renamed);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace minigpt
