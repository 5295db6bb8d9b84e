// A model's own generation defaults (generation_config.json, general.sampling.*) and eos_token_id lists,
// against tools/reference/make_generation_config_reference.py: transformers' greedy tokens with an
// eos_token_id list and what llama.cpp's converter writes from a generation_config.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "minigpt/generate.h"
#include "minigpt/generation_config.h"
#include "minigpt/tokenizer.h"
#include "server/server.h"
#include "test_util.h"

namespace minigpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const json& gc_reference() {
  static const json r = json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "generate" / "generation_config.json"));
  return r;
}

// tests/fixtures/quantize/gpt2-tiny-hf with GPT-2's tokenizer files, in tmp/name; config.json's eos_token_id
// replaced by `config_eos` unless it is discarded; generation_config.json written when `generation` is not
// null.
fs::path gc_model_dir(const test::TempDir& tmp, const std::string& name, const json& config_eos,
                      const json& generation) {
  const fs::path d = tmp / name;
  fs::create_directories(d);
  const fs::path src = test::source_dir() / "tests" / "fixtures" / "quantize" / "gpt2-tiny-hf";
  fs::copy_file(src / "model.safetensors", d / "model.safetensors");
  json config = json::parse(test::read_file(src / "config.json"));
  if (!config_eos.is_discarded()) config["eos_token_id"] = config_eos;
  test::write_file(d / "config.json", config.dump(2));
  if (!generation.is_null()) test::write_file(d / "generation_config.json", generation.dump(2));
  for (const auto& e : fs::directory_iterator(test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer")) {
    const std::string ext = e.path().extension().string();
    if (ext == ".json" || ext == ".txt") fs::copy_file(e.path(), d / e.path().filename());
  }
  return d;
}

struct GenRun {
  std::vector<int32_t> ids;
  json summary;
};

// generate --json on `model`: the ids of the token lines and the summary.
GenRun gen_cli(const fs::path& model, const std::string& flags) {
  const auto r = test::run_cli("generate -m " + model.string() + " -p \"" +
                               gc_reference()["prompt"].get<std::string>() + "\" --json " + flags);
  EXPECT_EQ(r.status, 0) << r.err;
  GenRun run;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    if (j.contains("summary")) {
      run.summary = j["summary"];
    } else {
      run.ids.push_back(j["id"].get<int32_t>());
    }
  }
  return run;
}

// transformers stops at the first id of an eos_token_id list, from generation_config.json or (without one)
// from config.json; minigpt's greedy tokens are the same (transformers keeps the EOS in its output, minigpt
// reports it as the stop reason). Without an end-of-text token, the whole continuation.
TEST(GenerationConfig, EosTokenIdListStopsAsTransformers) {
  const json& ref = gc_reference();
  const auto want_all = ref["plain"].get<std::vector<int32_t>>();
  auto want = ref["greedy_eos_list"].get<std::vector<int32_t>>();
  ASSERT_FALSE(want.empty());
  const int32_t eos = want.back();
  want.pop_back();
  const json eos_list = ref["eos_token_ids"];
  ASSERT_EQ(eos_list.size(), 2u);
  ASSERT_EQ(eos_list[1].get<int32_t>(), eos);  // the list's second id comes first: not just its first id
  const std::string flags = "--temperature 0 -n " + std::to_string(ref["max_new_tokens"].get<int>());
  test::TempDir tmp;

  const GenRun plain = gen_cli(gc_model_dir(tmp, "plain", nullptr, nullptr), flags);
  EXPECT_EQ(plain.ids, want_all);
  EXPECT_EQ(plain.summary["stop_reason"], "length");
  EXPECT_EQ(plain.summary["prompt_tokens"], ref["prompt_ids"].size());

  const GenRun gen =
      gen_cli(gc_model_dir(tmp, "gen", json::value_t::discarded, {{"eos_token_id", eos_list}}), flags);
  EXPECT_EQ(gen.ids, want);
  EXPECT_EQ(gen.summary["stop_reason"], "eos");

  const GenRun cfg = gen_cli(gc_model_dir(tmp, "cfg", eos_list, nullptr), flags);
  EXPECT_EQ(cfg.ids, want);
  EXPECT_EQ(cfg.summary["stop_reason"], "eos");
  auto r = test::run_cli("info -m " + (tmp / "cfg").string() + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["model"]["eos_token_ids"], eos_list);

  // ("gen" keeps config.json's 50256: generation_config.json's list replaces it, as in transformers.)
  // --ignore-eos: every id
  const GenRun ignored = gen_cli(tmp / "gen", flags + " --ignore-eos");
  EXPECT_EQ(ignored.ids, want_all);
}

// transformers' generate() with no arguments follows the file: do_sample false is greedy (its temperature and
// top_k unused), max_new_tokens (or max_length, prompt included) the length. So does minigpt's generate
// without flags; a flag still wins. Settings transformers applies and minigpt does not are named.
TEST(GenerationConfig, DoSampleAndLengthAsTransformers) {
  const json& ref = gc_reference();
  test::TempDir tmp;
  int i = 0;
  for (const json& d : ref["defaults"]) {
    const fs::path dir = gc_model_dir(tmp, "d" + std::to_string(i++), nullptr, d["generation_config"]);
    const GenRun run = gen_cli(dir, "--seed 3");
    EXPECT_EQ(run.ids, d["tokens"].get<std::vector<int32_t>>()) << d.dump();
    EXPECT_EQ(run.summary["sampling"]["temperature"], 0.0);
    EXPECT_EQ(run.summary["stop_reason"], "length");
    const GenRun flagged = gen_cli(dir, "--seed 3 -n 2 --temperature 1");
    EXPECT_EQ(flagged.ids.size(), 2u);
    EXPECT_EQ(flagged.summary["sampling"]["temperature"], 1.0);
  }
  const fs::path dir = gc_model_dir(tmp, "na", nullptr,
                                    {{"suppress_tokens", {5, 6}},
                                     {"no_repeat_ngram_size", 3},
                                     {"num_beams", 1},
                                     {"forced_bos_token_id", 0},
                                     {"bad_words_ids", json::array()},
                                     {"typical_p", 1.0},
                                     {"min_new_tokens", nullptr}});
  const auto r = test::run_cli("generate -m " + dir.string() + " -p Hi -n 1 --seed 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("generation_config.json: not applied: no_repeat_ngram_size, suppress_tokens, "
                       "forced_bos_token_id (transformers applies them: its tokens may differ)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(read_generation_defaults(dir).not_applied.size(), 3u);
}

// generate: a special token the model samples adds no text unless --show-special (the same ids either way).
TEST(GenerationConfig, GeneratedSpecialTokensShowOnlyWithShowSpecial) {
  const fs::path chat = test::fixture_dir("chatml-tiny");
  const Tokenizer tok = Tokenizer::load(chat);
  int with_special = 0;
  for (int seed = 0; seed < 20 && with_special < 2; ++seed) {
    std::vector<std::vector<int32_t>> ids(2);
    std::vector<std::string> text(2);
    for (int show = 0; show < 2; ++show) {
      const auto r = test::run_cli("generate -m " + chat.string() +
                                   " -p hi -n 60 --temperature 1.5 --ignore-eos --json --seed " +
                                   std::to_string(seed) + (show ? " --show-special" : ""));
      ASSERT_EQ(r.status, 0) << r.err;
      std::istringstream lines(r.out);
      for (std::string line; std::getline(lines, line);) {
        const json j = json::parse(line);
        if (j.contains("summary")) {
          text[size_t(show)] = j["summary"]["text"];
        } else {
          ids[size_t(show)].push_back(j["id"].get<int32_t>());
        }
      }
    }
    ASSERT_EQ(ids[0], ids[1]) << seed;
    std::vector<int32_t> plain;
    bool any = false;
    for (const int32_t id : ids[0]) {
      if (tok.is_special(id)) {
        any = true;
      } else {
        plain.push_back(id);
      }
    }
    with_special += any;
    EXPECT_EQ(text[0], utf8_sanitize(tok.decode(plain))) << seed;
    EXPECT_EQ(text[1], utf8_sanitize(tok.decode(ids[1]))) << seed;
    EXPECT_EQ(text[0] != text[1], any) << seed;
  }
  EXPECT_GE(with_special, 1);  // at this temperature the tiny model samples <|im_start|> now and then
}

// A config.json written back (a random model, convert's inputs) keeps the list.
TEST(GenerationConfig, EosTokenIdListRoundTrips) {
  Config c = parse_config(
      R"({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 4, "n_positions": 8, "vocab_size": 16,
          "eos_token_id": [3, 5, -1]})",
      "config.json");
  EXPECT_EQ(c.eos_token_id, 3);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{3, 5}));
  const json back = json::parse(config_to_json(c));
  EXPECT_EQ(back["eos_token_id"], json::parse("[3, 5]"));
  for (const char* bad :
       {R"("eos_token_id": "3")", R"("eos_token_id": [3, "5"])", R"("eos_token_id": [3.5])"}) {
    test::expect_error(
        [&] {
          parse_config(std::string(R"({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 4,
                                       "n_positions": 8, "vocab_size": 16, )") +
                           bad + "}",
                       "config.json");
        },
        ErrorKind::Config, {"config.json", "eos_token_id", "an integer or a list of integers"});
  }
}

// convert writes general.sampling.* from generation_config.json as llama.cpp's converter does (every key of
// the file in its order, each sampling key's type and value), and generate reads them back from the GGUF
// file as it reads them from the directory: for every sampling flag not given.
TEST(GenerationConfig, ConvertWritesLlamaCppsSamplingKeysAndGenerateUsesThem) {
  const json& ref = gc_reference();
  test::TempDir tmp;
  const fs::path dir = gc_model_dir(tmp, "gpt2-tiny", json::value_t::discarded, ref["generation_config"]);
  const fs::path out = tmp / "tiny.gguf";
  auto r = test::run_cli("convert " + dir.string() + " " + out.string() + " --outtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto f = GgufFile::open(out);
  EXPECT_EQ(f->keys(), ref["converter_keys"].get<std::vector<std::string>>());
  for (const auto& [key, want] : ref["converter_sampling"].items()) {
    const GgufValue* v = f->find_value(key);
    ASSERT_NE(v, nullptr) << key;
    if (want["type"] == "INT32") {
      EXPECT_EQ(v->type, GgufType::I32) << key;
      EXPECT_EQ(v->i, want["value"].get<int64_t>()) << key;
    } else {
      EXPECT_EQ(v->type, GgufType::F32) << key;
      EXPECT_EQ(float(v->f), want["value"].get<float>()) << key;
    }
  }
  const json& g = ref["generation_config"];
  for (const fs::path& model : {dir, out}) {
    const GenRun run = gen_cli(model, "-n 2 --seed 7");
    const json& s = run.summary["sampling"];
    EXPECT_FLOAT_EQ(s["temperature"].get<float>(), g["temperature"].get<float>()) << model;
    EXPECT_EQ(s["top_k"], g["top_k"]) << model;
    EXPECT_FLOAT_EQ(s["top_p"].get<float>(), g["top_p"].get<float>()) << model;
    EXPECT_FLOAT_EQ(s["min_p"].get<float>(), g["min_p"].get<float>()) << model;
    EXPECT_FLOAT_EQ(s["repetition_penalty"].get<float>(), g["repetition_penalty"].get<float>()) << model;
    // a flag wins over the file
    const GenRun flagged = gen_cli(model, "-n 2 --seed 7 --top-k 3 --temperature 1.5");
    EXPECT_EQ(flagged.summary["sampling"]["top_k"], 3);
    EXPECT_FLOAT_EQ(flagged.summary["sampling"]["temperature"].get<float>(), 1.5f);
    EXPECT_FLOAT_EQ(flagged.summary["sampling"]["top_p"].get<float>(), g["top_p"].get<float>());
  }
  // A GGUF file is known by its bytes, not its name: saved as "model" (no .gguf), its defaults still apply.
  const fs::path renamed = tmp / "model";
  fs::copy_file(out, renamed);
  const GenRun run_renamed = gen_cli(renamed, "-n 2 --seed 7");
  EXPECT_EQ(run_renamed.summary["sampling"]["top_k"], g["top_k"]);
  EXPECT_FLOAT_EQ(run_renamed.summary["sampling"]["temperature"].get<float>(), g["temperature"].get<float>());
  EXPECT_EQ(run_renamed.ids, gen_cli(out, "-n 2 --seed 7").ids);
  // the text output says where the defaults came from
  r = test::run_cli("generate -m " + out.string() + " -p Hi -n 1 --seed 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(
                "temperature 0.7, top_k 20, top_p 0.9, min_p 0.05, repetition_penalty 1.15 (flags override)"),
            std::string::npos)
      << r.err;
  // without a generation_config.json, no keys and the built-in defaults
  fs::remove(dir / "generation_config.json");
  const fs::path plain = tmp / "plain.gguf";
  r = test::run_cli("convert " + dir.string() + " " + plain.string() + " --outtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto pf = GgufFile::open(plain);
  for (const std::string& k : pf->keys()) EXPECT_FALSE(k.starts_with("general.sampling.")) << k;
  const GenRun run = gen_cli(plain, "-n 1 --seed 1");
  EXPECT_EQ(run.summary["sampling"]["top_k"], 50);
  EXPECT_FLOAT_EQ(run.summary["sampling"]["temperature"].get<float>(), 1.0f);
}

// penalty_last_n (llama.cpp's repeat-last-n): convert copies it from generation_config.json, as llama.cpp's
// converter does, and a GGUF file's is the default window of the repetition penalty, as llama.cpp takes it; a
// Hugging Face directory's is not read (transformers knows no such setting: its penalty covers everything).
TEST(GenerationConfig, PenaltyLastNIsAGgufDefaultOnly) {
  test::TempDir tmp;
  const fs::path dir =
      gc_model_dir(tmp, "m", json::value_t::discarded, {{"repetition_penalty", 1.8}, {"penalty_last_n", 3}});
  const fs::path out = tmp / "m.gguf";
  auto r = test::run_cli("convert " + dir.string() + " " + out.string() + " --outtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(GgufFile::open(out)->get_int("general.sampling.penalty_last_n"), 3);
  // greedy (the converter does not copy do_sample): the tokens depend on the window only
  const GenRun hf = gen_cli(dir, "-n 24 --temperature 0");
  const GenRun gguf = gen_cli(out, "-n 24 --temperature 0");
  EXPECT_EQ(hf.summary["sampling"]["repeat_last_n"], -1);
  EXPECT_EQ(gguf.summary["sampling"]["repeat_last_n"], 3);
  // the same F32 weights: the GGUF's default window is the flag's
  EXPECT_EQ(gguf.ids, gen_cli(dir, "-n 24 --temperature 0 --repeat-last-n 3").ids);
  EXPECT_EQ(hf.ids, gen_cli(out, "-n 24 --temperature 0 --repeat-last-n -1").ids);
  EXPECT_NE(hf.ids, gguf.ids) << "the window changes nothing here: the test could not fail";
  r = test::run_cli("generate -m " + out.string() + " -p Hi -n 1");
  EXPECT_NE(r.err.find("repetition_penalty 1.8, penalty_last_n 3 (flags override)"), std::string::npos)
      << r.err;
  // a window llama.cpp's reading cannot take is an error where it is used
  test::write_file(dir / "generation_config.json", R"({"penalty_last_n": -4})");
  ASSERT_EQ(
      test::run_cli("convert " + dir.string() + " " + (tmp / "bad.gguf").string() + " --outtype f32").status,
      0);
  r = test::run_cli("generate -m " + (tmp / "bad.gguf").string() + " -p Hi -n 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(
      r.err.find(
          "general.sampling.penalty_last_n = -4 is out of range (>= -1; -1: the whole sequence, 0: off)"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(
      test::run_cli("generate -m " + (tmp / "bad.gguf").string() + " -p Hi -n 1 --repeat-last-n 5").status,
      0);
}

// The one merge generate, chat, serve and Python run: a setting the user gives keeps the user's value, one
// the user leaves out takes the model's default, and one neither gives keeps the built-in value.
TEST(GenerationConfig, MergeTakesTheUsersValueThenTheModelsThenTheBuiltIn) {
  GenerationDefaults model;
  model.temperature = 0.7f;
  model.top_k = 20;
  model.max_new_tokens = 64;
  model.eos_token_ids = {7, 8};
  const GenerateOptions builtin;
  GenerateOptions g;
  g.sampling.temperature = 0.2f;  // the user's
  g.max_new_tokens = 9;           // the user's
  const auto given = [](const char* name) {
    return std::string(name) == "temperature" || std::string(name) == "max_new_tokens";
  };
  apply_generation_defaults(g, model, given);
  EXPECT_EQ(g.sampling.temperature, 0.2f);                   // the user's over the model's 0.7
  EXPECT_EQ(g.max_new_tokens, 9);                            // the user's over the model's 64
  EXPECT_EQ(g.sampling.top_k, 20);                           // the model's over the built-in 50
  EXPECT_EQ(g.sampling.top_p, builtin.sampling.top_p);       // neither gives it: the built-in
  EXPECT_EQ(g.sampling.min_p, builtin.sampling.min_p);       // neither gives it: the built-in
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{7, 8}));  // the model's

  // Nothing given: the model's where it has one, else the built-in.
  g = builtin;
  apply_generation_defaults(g, model, [](const char*) { return false; });
  EXPECT_EQ(g.sampling.temperature, 0.7f);
  EXPECT_EQ(g.max_new_tokens, 64);
  EXPECT_EQ(g.sampling.repetition_penalty, builtin.sampling.repetition_penalty);
  // Neither: every value stays the built-in.
  g = builtin;
  apply_generation_defaults(g, GenerationDefaults{}, [](const char*) { return false; });
  EXPECT_EQ(g.sampling.temperature, builtin.sampling.temperature);
  EXPECT_EQ(g.sampling.top_k, builtin.sampling.top_k);
  EXPECT_EQ(g.max_new_tokens, builtin.max_new_tokens);
  EXPECT_TRUE(g.eos_token_ids.empty());

  // With the prompt's length, max_length counts the prompt (transformers'); without it only max_new_tokens
  // is a length.
  GenerationDefaults by_length;
  by_length.max_length = 20;
  g = builtin;
  apply_generation_defaults(
      g, by_length, [](const char*) { return false; }, 5);
  EXPECT_EQ(g.max_new_tokens, 15);
  g = builtin;
  apply_generation_defaults(g, by_length, [](const char*) { return false; });
  EXPECT_EQ(g.max_new_tokens, builtin.max_new_tokens);
}

// serve: a request that leaves a setting out gets the model's, one that gives it keeps its own; the
// model's eos_token_id list ends each choice.
TEST(GenerationConfig, ServerRequestsTakeTheModelsDefaults) {
  const json& ref = gc_reference();
  test::TempDir tmp;
  const fs::path dir = gc_model_dir(tmp, "m", json::value_t::discarded, ref["generation_config"]);
  const Config c = load_config(dir / "config.json");
  const Tokenizer tok = Tokenizer::load(dir);
  server::RequestLimits lim;
  lim.model_defaults = read_generation_defaults(dir);
  auto r = server::parse_completion_request(R"({"prompt": "Hi"})", tok, c, lim);
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.7f);
  EXPECT_EQ(r.gen.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r.gen.sampling.repetition_penalty, 1.15f);
  r = server::parse_completion_request(R"({"prompt": "Hi", "temperature": 0, "top_k": 0, "top_p": 1})", tok,
                                       c, lim);
  EXPECT_EQ(r.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_EQ(r.gen.sampling.top_p, 1.0f);
  EXPECT_FLOAT_EQ(r.gen.sampling.min_p, 0.05f);  // not in the request: the model's
  EXPECT_EQ(r.gen.eos_token_ids, (std::vector<int64_t>{50256}));
  // a value sampling cannot take is refused where it is used (the server answers 500 with the message), not
  // where the request gives the setting
  lim.model_defaults = parse_generation_config(R"({"top_p": 1.5})", "generation_config.json");
  test::expect_error([&] { server::parse_completion_request(R"({"prompt": "Hi"})", tok, c, lim); },
                     ErrorKind::Config, {"generation_config.json: field 'top_p' = 1.5 is out of range"});
  r = server::parse_completion_request(R"({"prompt": "Hi", "top_p": 0.5})", tok, c, lim);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.5f);
  // without defaults: OpenAI's (temperature 1, top_p 1, no top-k)
  lim.model_defaults = {};
  r = server::parse_completion_request(R"({"prompt": "Hi"})", tok, c, lim);
  EXPECT_EQ(r.gen.sampling.temperature, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_TRUE(r.gen.eos_token_ids.empty());
}

// A generation_config.json minigpt cannot use is one line naming the file and the field, for generate, info
// and convert alike, before anything is written.
TEST(GenerationConfig, BadFilesAreOneLineErrors) {
  test::TempDir tmp;
  const fs::path dir = gc_model_dir(tmp, "m", json::value_t::discarded, nullptr);
  struct Case {
    const char* text;
    const char* needle;
    const char* flag;  // a flag that gives the setting, so the file's value is not used ("" for none)
    bool info_fails, convert_fails;
  };
  // A sampling setting of the wrong type or out of range is an error only where it is used (a flag that
  // gives the setting makes it irrelevant, as transformers fails only on a value it uses); convert writes
  // values as llama.cpp's converter does (as given) and refuses the types its writer cannot write.
  const Case cases[] = {
      {R"({"temperature": "hot"})", "field 'temperature' must be a number", "--temperature 1", false, true},
      {R"({"temperature": -1})", "field 'temperature' = -1 is out of range", "--temperature 1", false, false},
      {R"({"temperature": 1e300})", "field 'temperature' must be a number", "--temperature 1", false, true},
      {R"({"top_k": 2.5})", "field 'top_k' must be", "--top-k 5", false, true},
      {R"({"top_p": 1.5})", "field 'top_p' = 1.5 is out of range", "--top-p 0.5", false, false},
      {R"({"min_p": -0.1})", "field 'min_p' = -0.100000001 is out of range", "--min-p 0", false, false},
      {R"({"repetition_penalty": 0})", "field 'repetition_penalty' = 0 is out of range",
       "--repetition-penalty 1", false, false},
      {R"({"eos_token_id": [1, "a"]})", "field 'eos_token_id' must be an integer or a list of integers", "",
       true, false},
      {R"([1, 2])", "not a JSON object", "", true, true},
      {R"({"top_p": )", "not valid JSON", "", true, true},
      {R"({"do_sample": 1})", "field 'do_sample' must be true or false", "", true, false},
      {R"({"max_new_tokens": 0})", "field 'max_new_tokens' = 0 is out of range (>= 1)", "", true, false},
  };
  const std::string where = (dir / "generation_config.json").string() + ": ";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    test::write_file(dir / "generation_config.json", c.text);
    const auto fails = [&](const std::string& cmd) {
      const auto r = test::run_cli(cmd);
      EXPECT_EQ(r.status, 1) << cmd;
      EXPECT_EQ(test::line_count(r.err), 1u) << r.err;
      EXPECT_NE(r.err.find(where + c.needle), std::string::npos) << cmd << " -> " << r.err;
      EXPECT_TRUE(r.out.empty()) << cmd;
      EXPECT_FALSE(fs::exists(tmp / "out.gguf")) << cmd;
    };
    const auto works = [&](const std::string& cmd) {
      const auto r = test::run_cli(cmd);
      EXPECT_EQ(r.status, 0) << cmd << " -> " << r.err;
      fs::remove(tmp / "out.gguf");
    };
    fails("generate -m " + dir.string() + " -p Hi -n 1");
    if (*c.flag) works("generate -m " + dir.string() + " -p Hi -n 1 " + c.flag);
    const std::string info = "info -m " + dir.string();
    c.info_fails ? fails(info) : works(info);
    const std::string convert = "convert " + dir.string() + " " + (tmp / "out.gguf").string();
    c.convert_fails ? fails(convert) : works(convert);
  }
  // top_p 0 keeps the top token, as transformers' top-p does (min_tokens_to_keep 1); a top_k below 0 is
  // off, as llama.cpp reads the -1 its converter writes as given
  test::write_file(dir / "generation_config.json", R"({"top_p": 0, "top_k": -1, "sequence": ""})");
  const GenerationDefaults d = read_generation_defaults(dir);
  EXPECT_GT(d.top_p.value_or(0), 0.0f);
  EXPECT_EQ(d.top_k, 0);
  const fs::path out = tmp / "k.gguf";
  auto r = test::run_cli("convert " + dir.string() + " " + out.string() + " --outtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  {
    const auto f = GgufFile::open(out);
    EXPECT_EQ(f->get_int("general.sampling.top_k"), -1);             // as llama.cpp's converter writes it
    EXPECT_EQ(f->find_value("general.sampling.sequence"), nullptr);  // gguf-py writes no empty string
  }
  const GenRun run = gen_cli(out, "-n 1 --seed 1");
  EXPECT_EQ(run.summary["sampling"]["top_k"], 0);
  // max_length at or below the prompt: transformers' generate() raises; so does generate (not 1 token)
  test::write_file(dir / "generation_config.json", R"({"max_length": 2})");
  r = test::run_cli("generate -m " + dir.string() + " -p \"The quick brown fox\"");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(
      r.err.find(where + "max_length 2 leaves no room after the prompt's 4 tokens (give max_new_tokens)"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(test::run_cli("generate -m " + dir.string() + " -p \"The quick brown fox\" -n 2").status, 0);
}

}  // namespace
}  // namespace minigpt
