// Perplexity by llama.cpp's chunks and transformers' strided windows, against the same recipes computed
// from transformers' logits (tools/reference/make_perplexity_reference.py), and the command's errors.
#include <nlohmann/json.hpp>

#include "minigpt/perplexity.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

json golden() {
  return json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "perplexity" / "reference.json"));
}

std::filesystem::path model_dir(const std::string& name) {
  return name == "shakespeare-char" ? test::source_dir() / "models" / "shakespeare-char"
                                    : test::fixture_dir(name);
}

std::vector<int32_t> case_tokens(const json& c) {
  if (c.contains("ids")) return c["ids"].get<std::vector<int32_t>>();
  // The shipped model's token = byte.
  const std::string data =
      test::read_file(test::source_dir() / "tests" / "fixtures" / "data" / "tinyshakespeare.txt");
  const auto s = data.substr(c["text_offset"].get<size_t>(), c["text_length"].get<size_t>());
  return std::vector<int32_t>(s.begin(), s.end());
}

PerplexityOptions case_options(const json& c) {
  PerplexityOptions o;
  o.n_ctx = c["n_ctx"];
  if (c["recipe"] == "stride") {
    o.recipe = PerplexityRecipe::Stride;
    o.stride = c["stride"];
  } else {
    o.max_chunks = c["max_chunks"];
  }
  return o;
}

// Every case but the whole validation split (the README's figure; the CLI test below runs that).
// Tolerance: relative 1e-5 on the perplexity (F32 logits agree with transformers to ~1e-6 of their scale,
// and the mean NLL averages the per-token differences); the count of scored tokens exactly.
TEST(Perplexity, EqualsTransformersRecipes) {
  const json g = golden();
  std::map<std::string, std::shared_ptr<const Model>> models;
  int checked = 0;
  for (const json& c : g["cases"]) {
    if (c.value("name", "") == "validation") continue;
    const std::string name = c["model"];
    if (!models.count(name)) models[name] = Model::load(model_dir(name), LoadOptions::threads(1));
    const auto tokens = case_tokens(c);
    ASSERT_EQ(int64_t(tokens.size()), c["tokens"].get<int64_t>());
    const PerplexityOptions o = case_options(c);
    SessionOptions so;
    so.n_ctx = o.n_ctx;
    so.max_batch = 48;  // windows longer than a batch are evaluated in several steps
    Session s(models[name], so);
    const PerplexityResult r = perplexity(s, tokens, o);
    SCOPED_TRACE(name + " " + c["recipe"].get<std::string>() + " n_ctx " + std::to_string(o.n_ctx) +
                 " stride " + std::to_string(o.stride));
    EXPECT_EQ(r.n_scored, c["scored"].get<int64_t>());
    EXPECT_EQ(r.n_windows, c["windows"].get<int64_t>());
    const double want = c["ppl"];
    EXPECT_NEAR(r.ppl, want, 1e-5 * want);
    EXPECT_NEAR(r.nll_stderr, c["nll_stderr"].get<double>(), 1e-4 * c["nll_stderr"].get<double>());
    std::printf("[ measured ] %s %s n_ctx %lld: ppl %.7f, transformers %.7f, relative difference %.2g\n",
                name.c_str(), c["recipe"].get<std::string>().c_str(), (long long)o.n_ctx, r.ppl, want,
                std::fabs(r.ppl - want) / want);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(Perplexity, WindowsCoverEveryTokenOnceWithAStrideBelowTheWindow) {
  for (int64_t n : {2, 3, 10, 64, 65, 200}) {
    for (int64_t ctx : {2, 7, 64}) {
      for (int64_t stride = 1; stride < ctx; stride += 3) {
        PerplexityOptions o;
        o.recipe = PerplexityRecipe::Stride;
        o.n_ctx = ctx;
        o.stride = stride;
        std::vector<int> scored(size_t(n), 0);
        for (const auto& w : perplexity_windows(n, 64, o)) {
          ASSERT_LE(w.end - w.begin, ctx);
          for (int64_t j = w.first; j < w.last; ++j) ++scored[size_t(w.begin + j + 1)];
        }
        EXPECT_EQ(scored[0], 0);
        for (int64_t i = 1; i < n; ++i)
          ASSERT_EQ(scored[size_t(i)], 1) << n << " " << ctx << " " << stride << " " << i;
      }
    }
  }
}

TEST(Perplexity, BadRequestsAreRefused) {
  PerplexityOptions o;
  o.n_ctx = 64;
  EXPECT_THROW(perplexity_windows(1, 64, o), Error);   // one token: nothing to score
  EXPECT_THROW(perplexity_windows(0, 64, o), Error);   // empty
  EXPECT_THROW(perplexity_windows(63, 64, o), Error);  // shorter than a chunk
  EXPECT_NO_THROW(perplexity_windows(64, 64, o));
  o.n_ctx = 65;
  EXPECT_THROW(perplexity_windows(1000, 64, o), Error);  // window past the session's context
  o.n_ctx = 64;
  o.recipe = PerplexityRecipe::Stride;
  o.stride = 65;
  EXPECT_THROW(perplexity_windows(1000, 64, o), Error);
  o.stride = 64;
  EXPECT_NO_THROW(perplexity_windows(10, 64, o));  // a text shorter than a window: one window
}

// The command on the shipped model (a text file, token = byte), both recipes, as the library test's cases.
TEST(PerplexityCli, ShippedModelEqualsTransformers) {
  const json g = golden();
  test::TempDir tmp;
  const std::string data =
      test::read_file(test::source_dir() / "tests" / "fixtures" / "data" / "tinyshakespeare.txt");
  int checked = 0;
  for (const json& c : g["cases"]) {
    if (c["model"] != "shakespeare-char" || c.value("name", "") == "validation") continue;
    const auto text = tmp / "text.txt";
    test::write_file(text, data.substr(c["text_offset"].get<size_t>(), c["text_length"].get<size_t>()));
    std::string args =
        "perplexity -t 1 --json -f " + text.string() + " -c " + std::to_string(c["n_ctx"].get<int>());
    if (c["recipe"] == "stride") args += " --stride " + std::to_string(c["stride"].get<int>());
    if (c.value("max_chunks", 0) > 0) args += " --chunks " + std::to_string(c["max_chunks"].get<int>());
    const auto r = test::run_cli(args);
    ASSERT_EQ(r.status, 0) << args << ": " << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["recipe"], c["recipe"]) << args;
    EXPECT_EQ(out["scored"], c["scored"]) << args;
    EXPECT_EQ(out["tokens"], c["tokens"]) << args;
    EXPECT_EQ(out["windows"], c["windows"]) << args;
    EXPECT_NEAR(out["ppl"].get<double>(), c["ppl"].get<double>(), 1e-5 * c["ppl"].get<double>()) << args;
    EXPECT_NEAR(out["ppl_error"].get<double>(), c["ppl_error"].get<double>(),
                1e-3 * c["ppl_error"].get<double>())
        << args;
    ++checked;
  }
  EXPECT_GE(checked, 6);
}

TEST(PerplexityCli, BadInputsGetOneLineAndANonZeroExit) {
  test::TempDir tmp;
  const auto empty = tmp / "empty.txt", one = tmp / "one.txt", short_text = tmp / "short.txt";
  test::write_file(empty, "");
  test::write_file(one, "a");
  test::write_file(short_text, std::string(100, 'x'));
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"-f " + empty.string(), "0 token(s) long"},
           {"-f " + one.string() + " --stride 10", "1 token(s) long"},
           {"-f " + short_text.string(), "shorter than one chunk of 128"},
           {"-f " + short_text.string() + " -c 200", "outside [0, 128]"},
           {"-f " + short_text.string() + " -c 2", "a chunk of 2 tokens scores none"},
           {"-f " + short_text.string() + " -c 1", "at least 2 tokens"},
           {"-f " + short_text.string() + " --stride 0", "--stride must be at least 1"},
           {"-f " + short_text.string() + " --stride 129", "stride must be in [1, 128]"},
           {"-f " + short_text.string() + " --stride 5 --chunks 2", "pick one"},
           {"-f " + short_text.string() + " --chunks 0", "--chunks must be at least 1"},
           {"-f " + (tmp / "missing.txt").string(), "missing.txt"},
       }) {
    const auto r = test::run_cli("perplexity " + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
  }
  // A bad flag value is about the flag, not the text, and is refused before the load.
  for (const std::string flag : {"--stride", "--chunks"}) {
    const auto r = test::run_cli("perplexity -f " + (tmp / "missing.txt").string() + " " + flag + " 0");
    EXPECT_EQ(r.err, "minigpt: error: " + flag + " must be at least 1, not 0\n") << flag;
  }
}

}  // namespace
}  // namespace minigpt
