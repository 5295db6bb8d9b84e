// `minigpt generate` as a user runs it: output, JSON, and one clear line for every mistake.
#include <nlohmann/json.hpp>

#include "cpu/sysinfo.h"
#include "minigpt/generate.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

// A random byte-level model with the project's byte-level tokenizer files: every id is text.
struct CliModel {
  test::TempDir tmp;
  std::filesystem::path dir;
  explicit CliModel(int64_t bos = 10) : dir(tmp / "model") {
    Config c = test::tiny_config();
    c.n_vocab = 256;
    c.bos_token_id = bos;
    write_random_model(dir, c);
    for (const char* f : {"vocab.json", "merges.txt"}) {
      std::filesystem::copy_file(test::source_dir() / "tests" / "fixtures" / "tokenizer" / "bytelevel" / f,
                                 dir / f);
    }
  }
  std::string m() const { return "-m " + dir.string() + " "; }
};

TEST(GenerateCli, GreedyOutputIsThePromptThenTheLibrarysText) {
  CliModel cm;
  auto r = test::run_cli("generate " + cm.m() + "-p 'To be' --temperature 0 --max-new-tokens 12");
  ASSERT_EQ(r.status, 0) << r.err;
  auto model = Model::load(cm.dir, LoadOptions::threads(1));
  const Tokenizer tok = Tokenizer::load(cm.dir);
  Session s(model);
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.temperature = 0;
  const auto want = generate(s, &tok, tok.encode("To be"), o);
  EXPECT_EQ(r.out, "To be" + want.text + "\n");
  EXPECT_NE(r.err.find("prompt 5 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generated 12 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("time to first token"), std::string::npos) << r.err;
  auto quiet =
      test::run_cli("generate " + cm.m() + "-p 'To be' --temperature 0 --max-new-tokens 12 --no-echo");
  EXPECT_EQ(quiet.out, want.text + "\n");
}

// -f FILE, as perplexity (and llama.cpp's -f) spell it: the prompt is the file's text, as -p would give it; a
// missing file is one line, said before the model is loaded.
TEST(GenerateCli, DashFReadsThePromptFromAFile) {
  CliModel cm;
  test::write_file(cm.tmp / "prompt.txt", "To be");
  const std::string args = " --temperature 0 --max-new-tokens 8";
  auto from_file = test::run_cli("generate " + cm.m() + "-f " + (cm.tmp / "prompt.txt").string() + args);
  auto from_flag = test::run_cli("generate " + cm.m() + "-p 'To be'" + args);
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  EXPECT_EQ(from_file.out, from_flag.out);
  EXPECT_EQ(from_file.out.rfind("To be", 0), 0u) << from_file.out;
  const std::string missing = (cm.tmp / "missing.txt").string();
  auto r = test::run_cli("generate " + cm.m() + "-f " + missing);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "minigpt: error: " + missing + ": cannot open the prompt file: No such file or directory\n");
  auto both = test::run_cli("generate " + cm.m() + "-p hi -f " + (cm.tmp / "prompt.txt").string());
  EXPECT_EQ(both.status, 2);
  EXPECT_EQ(test::line_count(both.err), 1u) << both.err;
}

// The summary names the seed a sampled run can be repeated with; greedy decoding draws nothing, and says so.
TEST(GenerateCli, AGreedySummaryHasNoSeed) {
  CliModel cm;
  auto greedy = test::run_cli("generate " + cm.m() + "-p hi --temperature 0 --max-new-tokens 3");
  ASSERT_EQ(greedy.status, 0) << greedy.err;
  EXPECT_EQ(greedy.err.find("seed"), std::string::npos) << greedy.err;
  EXPECT_NE(greedy.err.find("| stop: length | greedy\n"), std::string::npos) << greedy.err;
  auto sampled = test::run_cli("generate " + cm.m() + "-p hi --temperature 0.7 --max-new-tokens 3");
  ASSERT_EQ(sampled.status, 0) << sampled.err;
  EXPECT_NE(sampled.err.find("| stop: length | seed "), std::string::npos) << sampled.err;
  auto json_greedy =
      test::run_cli("generate " + cm.m() + "-p hi --temperature 0 --max-new-tokens 3 --json --seed 4");
  ASSERT_EQ(json_greedy.status, 0) << json_greedy.err;
  const json summary = json::parse(json_greedy.out.substr(json_greedy.out.rfind("{\"summary\"")))["summary"];
  EXPECT_TRUE(summary["seed"].is_null()) << summary.dump();
}

TEST(GenerateCli, SeedReproducesAcrossRunsAndThreadCounts) {
  CliModel cm;
  const std::string args = "generate " + cm.m() + "-p abc --max-new-tokens 30 --seed 99 --no-echo ";
  auto a = test::run_cli(args + "-t 1"), b = test::run_cli(args + "-t 2"),
       c = test::run_cli(args + "-t 1 --seed 100");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

// More threads than CPUs is allowed (llama.cpp allows it too) but slower: one warning line on stderr, and the
// same text, since no result depends on the thread count. The pool behind it wakes one worker per CPU
// instead of every thread (ThreadPool.MoreThreadsThanCpusStillRunEverySlotOnce).
TEST(GenerateCli, MoreThreadsThanCpusWarnsAndGivesTheSameText) {
  CliModel cm;
  const int cpus = cpu_count();
  const std::string args = "generate " + cm.m() + "-p abc --max-new-tokens 20 --seed 7 --no-echo ";
  auto fit = test::run_cli(args + "-t " + std::to_string(cpus));
  auto over = test::run_cli(args + "-t " + std::to_string(cpus + 3));
  ASSERT_EQ(fit.status, 0) << fit.err;
  ASSERT_EQ(over.status, 0) << over.err;
  EXPECT_EQ(over.out, fit.out);
  EXPECT_EQ(fit.err.find("warning"), std::string::npos) << fit.err;
  const std::string want = "minigpt: warning: -t " + std::to_string(cpus + 3) + " is more threads than the " +
                           std::to_string(cpus) + " CPU";
  EXPECT_EQ(over.err.rfind(want, 0), 0u) << over.err;
  EXPECT_NE(over.err.find("slower than -t " + std::to_string(cpus) + "\n"), std::string::npos) << over.err;
}

TEST(GenerateCli, JsonLinesPerTokenThenASummary) {
  CliModel cm;
  auto r =
      test::run_cli("generate " + cm.m() + "-p hello --max-new-tokens 5 --seed 3 --json --top-logprobs 3");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  std::vector<json> objs;
  while (std::getline(in, line)) objs.push_back(json::parse(line));
  ASSERT_EQ(objs.size(), 6u);  // no prompt echo
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(objs[i]["id"].is_number_integer());
    EXPECT_TRUE(objs[i]["text"].is_string());
    EXPECT_LE(objs[i]["logprob"].get<double>(), 0.0);
    ASSERT_EQ(objs[i]["top_logprobs"].size(), 3u);
    EXPECT_GE(objs[i]["top_logprobs"][0]["logprob"].get<double>(), objs[i]["logprob"].get<double>());
  }
  const json& s = objs[5]["summary"];
  EXPECT_EQ(s["generated_tokens"], 5);
  EXPECT_EQ(s["prompt_tokens"], 5);
  EXPECT_EQ(s["stop_reason"], "length");
  EXPECT_EQ(s["seed"], 3);
}

// --json --top-logprobs on the shipped model, greedy (the token is the first alternative): the token's
// logprob and its entry among the alternatives are one number (two computations differed in the last
// bits), and each alternative carries its text beside its id, as the tokenizer decodes it.
TEST(GenerateCli, TopLogprobsGiveEachTokensTextAndTheTokensOwnLogprob) {
  const auto shipped = test::source_dir() / "models" / "shakespeare-char";
  auto r = test::run_cli("generate -m " + shipped.string() +
                         " -p 'ROMEO:' -n 40 --temperature 0 --json --top-logprobs 5 -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const Tokenizer tok = Tokenizer::load(shipped);
  std::istringstream in(r.out);
  std::string line;
  int tokens = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.contains("summary")) break;
    ++tokens;
    ASSERT_EQ(j["top_logprobs"].size(), 5u) << line;
    EXPECT_EQ(j["top_logprobs"][0]["id"], j["id"]) << line;
    EXPECT_EQ(j["top_logprobs"][0]["logprob"].get<double>(), j["logprob"].get<double>()) << line;
    for (const json& alt : j["top_logprobs"])
      EXPECT_EQ(alt["text"], tok.decode(std::vector<int32_t>{alt["id"].get<int32_t>()})) << line;
  }
  EXPECT_EQ(tokens, 40);
}

// -n -1, as llama.cpp's: tokens until the context is full.
TEST(GenerateCli, MinusOneTokensGeneratesUntilTheContextIsFull) {
  const auto shipped = test::source_dir() / "models" / "shakespeare-char";
  auto r =
      test::run_cli("generate -m " + shipped.string() + " -p 'ROMEO:' -n -1 --temperature 0 --json -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const json s = json::parse(r.out.substr(r.out.rfind("{\"summary\"")))["summary"];
  EXPECT_EQ(s["prompt_tokens"], 6);
  EXPECT_EQ(s["generated_tokens"], 128 - 6);
  r = test::run_cli("generate -m " + shipped.string() + " -p 'ROMEO:' -n -2");
  EXPECT_EQ(r.status, 1) << r.err;
}

// --presence-penalty, --frequency-penalty, --logit-bias (llama.cpp's syntax) and --repeat-last-n on the
// shipped model: the greedy tokens transformers' generate() gives with them
// (tests/fixtures/generate/penalties.json), and
// --json's summary names them.
TEST(GenerateCli, PenaltiesAndLogitBiasEqualTransformers) {
  const json ref = json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "generate" / "penalties.json"))["greedy"];
  ASSERT_EQ(ref.size(), 7u);
  test::TempDir tmp;
  for (const json& c : ref) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto want = c["generated"].get<std::vector<int32_t>>();
    test::write_file(tmp / "prompt.txt", std::string(prompt.begin(), prompt.end()));  // id = byte
    std::string flags;
    for (const json& b : c["logit_bias"]) {
      const double v = b[1].is_null() ? -INFINITY : b[1].get<double>();
      char arg[64];
      std::snprintf(arg, sizeof arg, " --logit-bias %d%+g", b[0].get<int>(), v);
      flags += arg;
    }
    auto r = test::run_cli(
        "generate -m " + (test::source_dir() / "models" / "shakespeare-char").string() + " --file " +
        (tmp / "prompt.txt").string() + " --json --temperature 0 -n " + std::to_string(want.size()) +
        " --presence-penalty " + c["presence_penalty"].dump() + " --frequency-penalty " +
        c["frequency_penalty"].dump() + " --repetition-penalty " + c["repetition_penalty"].dump() +
        " --repeat-last-n " + c["repeat_last_n"].dump() + flags);
    ASSERT_EQ(r.status, 0) << flags << ": " << r.err;
    std::istringstream in(r.out);
    std::string line;
    std::vector<int32_t> got;
    json summary;
    while (std::getline(in, line)) {
      const json j = json::parse(line);
      j.contains("summary") ? void(summary = j["summary"]) : got.push_back(j["id"].get<int32_t>());
    }
    EXPECT_EQ(got, want) << flags;
    EXPECT_FLOAT_EQ(summary["sampling"]["presence_penalty"].get<float>(), c["presence_penalty"].get<float>());
    EXPECT_FLOAT_EQ(summary["sampling"]["frequency_penalty"].get<float>(),
                    c["frequency_penalty"].get<float>());
    EXPECT_EQ(summary["sampling"]["logit_bias"].size(), c["logit_bias"].size());
    EXPECT_EQ(summary["sampling"]["repeat_last_n"], c["repeat_last_n"]);
  }
}

// One generated token has no decode step after it: the summary says so (null, "n/a") instead of a rate of 0,
// and gives a rate again from two tokens on.
TEST(GenerateCli, OneTokenHasNoDecodeRate) {
  CliModel cm;
  auto one = test::run_cli("generate " + cm.m() + "-p hello --max-new-tokens 1 --seed 3 --json");
  ASSERT_EQ(one.status, 0) << one.err;
  const json s1 = json::parse(one.out.substr(one.out.rfind('{', one.out.rfind("\"summary\"")))).at("summary");
  EXPECT_EQ(s1["generated_tokens"], 1);
  EXPECT_TRUE(s1["decode_tok_s"].is_null()) << one.out;
  auto text = test::run_cli("generate " + cm.m() + "-p hello --max-new-tokens 1 --seed 3");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.err.find("generated 1 token, decode n/a |"), std::string::npos) << text.err;
  auto two = test::run_cli("generate " + cm.m() + "-p hello --max-new-tokens 2 --seed 3 --json --ignore-eos");
  ASSERT_EQ(two.status, 0) << two.err;
  const json s2 = json::parse(two.out.substr(two.out.rfind('{', two.out.rfind("\"summary\"")))).at("summary");
  ASSERT_EQ(s2["generated_tokens"], 2) << two.out;
  EXPECT_GT(s2["decode_tok_s"].get<double>(), 0.0);
}

// The help's usage lines name the program (the arguments reach CLI11 without argv[0]).
TEST(GenerateCli, HelpNamesTheProgram) {
  auto top = test::run_cli("--help"), sub = test::run_cli("generate --help");
  ASSERT_EQ(top.status, 0) << top.err;
  ASSERT_EQ(sub.status, 0) << sub.err;
  EXPECT_NE(top.out.find("Usage: minigpt [OPTIONS] SUBCOMMAND"), std::string::npos) << top.out;
  EXPECT_NE(sub.out.find("Usage: minigpt generate [OPTIONS]"), std::string::npos) << sub.out;
}

// A command line that does not parse exits 2, whatever CLI11's reason; a refused value exits 1.
TEST(GenerateCli, ExitStatusSaysWhatKindOfMistake) {
  CliModel cm;
  for (const std::string& args :
       std::vector<std::string>{"nosuchcommand", "generate --bogus", "generate -n", "generate -n abc",
                                "attention -p hi", "generate " + cm.m() + "-p hi extra"}) {
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  const auto r = test::run_cli("generate " + cm.m() + "-p hi -n -5");
  EXPECT_EQ(r.status, 1) << r.err;
}

TEST(GenerateCli, EmptyPromptStartsFromBos) {
  CliModel cm;
  auto r = test::run_cli("generate " + cm.m() + "--max-new-tokens 4 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"prompt_tokens\":1"), std::string::npos) << r.out;
  CliModel no_bos(-1);
  auto e = test::run_cli("generate " + no_bos.m() + "--max-new-tokens 4");
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.err.find("no BOS token"), std::string::npos) << e.err;
}

TEST(GenerateCli, BadInputIsOneLineAndNothingElse) {
  CliModel cm;
  test::TempDir tmp;
  test::write_file(tmp / "bad.txt", std::string("ok \xff\xfe no", 8));
  test::write_file(tmp / "long.txt", std::string(100, 'x'));
  std::filesystem::create_directories(tmp / "empty");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-m " + (tmp / "nope.gguf").string() + " -p hi",
       (tmp / "nope.gguf").string() + ": no such file or directory"},
      {"-m " + (tmp / "empty").string() + " -p hi", "no config.json"},
      {cm.m() + "-p hi --top-p 1.5", "top_p: "},
      {cm.m() + "-p hi --temperature -1", "temperature: "},
      {cm.m() + "-p hi --max-new-tokens -5", "max_new_tokens: must be >= 1"},
      {cm.m() + "-p hi --top-k -3", "top_k: "},
      {cm.m() + "-p hi --min-p 7", "min_p: "},
      {cm.m() + "-p hi --repetition-penalty 0", "repetition_penalty: "},
      {cm.m() + "-p hi --max-new-tokens lots", "--max-new-tokens"},
      {cm.m() + "-p hi --threads -2", "--threads"},
      {cm.m() + "-p hi --context-overflow wrap", "--context-overflow"},
      {cm.m() + "-p hi --stop ''", "stop: a stop string must not be empty"},
      {cm.m() + "-p hi --stop \"ab$(printf '\\377')\"",
       "stop: the stop string is not valid UTF-8 at byte offset 2"},
      {cm.m() + "-p hi -r \"$(printf '\\303')\"", "not valid UTF-8 at byte offset 0"},
      {cm.m() + "--file " + (tmp / "bad.txt").string(), "not valid UTF-8 at byte offset 3"},
      {cm.m() + "--file " + (tmp / "missing.txt").string(), "cannot open"},
      {cm.m() + "--file " + (tmp / "long.txt").string(), "longer than the model's context of 24"},
      {cm.m() + "-p hi --file " + (tmp / "long.txt").string(), "excludes"},
      {cm.m() + "-p hi --cache-type f8", "--cache-type"},
      {cm.m() + "-p hi --repeat-last-n -2",
       "repeat_last_n: must be >= -1 (-1 = the whole sequence, 0 = off)"},
      {cm.m() + "-p hi --presence-penalty nan", "presence_penalty: must be a finite number"},
      {cm.m() + "-p hi --frequency-penalty inf", "frequency_penalty: must be a finite number"},
      {cm.m() + "-p hi --logit-bias 65", "--logit-bias: \"65\" has no + or - after the token id"},
      {cm.m() + "-p hi --logit-bias 65+inf", "is +inf: a bias must be finite, or -inf"},
      {cm.m() + "-p hi --logit-bias 65+0x1p3", "has no number after the sign"},
      {cm.m() + "-p hi --logit-bias 256+1", "logit_bias: token id 256 is not in the vocabulary [0, 256)"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = test::run_cli("generate " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(test::line_count(r.err), 1u) << args << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": " << r.err;
  }
  // --context-overflow truncate accepts the long prompt.
  auto ok = test::run_cli("generate " + cm.m() + "--file " + (tmp / "long.txt").string() +
                          " --context-overflow truncate --max-new-tokens 4 --json");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"prompt_tokens_dropped\":80"), std::string::npos) << ok.out;
  // --cache-type f32 is the CPU's default cache: the same greedy text as without it; f16 and bf16 run too.
  const std::string greedy = "generate " + cm.m() + "-p hi --temperature 0 --max-new-tokens 6 --no-echo";
  auto plain = test::run_cli(greedy);
  EXPECT_EQ(plain.status, 0) << plain.err;
  EXPECT_FALSE(plain.out.empty());
  for (const char* t : {"f32", "f16", "bf16"}) {
    auto r = test::run_cli(greedy + " --cache-type " + t);
    EXPECT_EQ(r.status, 0) << t << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << t;
    if (std::string(t) == "f32") {
      EXPECT_EQ(r.out, plain.out);
    }
  }
}

}  // namespace
}  // namespace minigpt
