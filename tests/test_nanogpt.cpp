// nanoGPT checkpoints converted by tools/convert_nanogpt.py (fixtures from tools/make_nanogpt_reference.py,
// which also checks the converter against transformers and on bad inputs): minigpt gives nanoGPT's own
// logits and greedy tokens. "bias": GPT-2-like biases, 3 heads, vocabulary 65, the causal-mask buffers of a
// model built without flash attention; "nobias": train.py's defaults (bias=False: zero biases written,
// torch.compile's `_orig_mod.` keys).
#include <algorithm>
#include <cmath>

#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/session.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::read_tensor;

std::filesystem::path nanogpt_dir(const std::string& variant) {
  return test::source_dir() / "tests" / "fixtures" / "nanogpt" / variant;
}

struct NanoGptReference {
  std::vector<int32_t> tokens;         // [T], T = block_size
  std::vector<float> logits;           // [T, V], nanoGPT's forward in F32
  std::vector<int32_t> greedy_prompt;  // the first tokens
  std::vector<int32_t> greedy_tokens;  // nanoGPT's argmax continuation (top-1 ahead of top-2 by >= 1e-3)
};

NanoGptReference load_reference(const std::string& variant) {
  auto f = SafeTensorsFile::open(nanogpt_dir(variant) / "reference.safetensors");
  return {read_tensor<int32_t>(*f, "tokens", StDtype::I32), read_tensor<float>(*f, "logits", StDtype::F32),
          read_tensor<int32_t>(*f, "greedy_prompt", StDtype::I32),
          read_tensor<int32_t>(*f, "greedy_tokens", StDtype::I32)};
}

std::shared_ptr<const Model> load(const std::string& variant) {
  return Model::load(nanogpt_dir(variant), LoadOptions::threads(2));
}

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// F32 in both, summed in other orders: measured 8.3e-7 / 1.4e-6 on logits with |logit| < 2.5. Converter
// bugs move them far more (measured: one layer's c_attn bias zeroed 0.36, one c_proj left untransposed 1.4);
// GELU's tanh form in place of erf only by 6.7e-4 (the two differ by < 1e-3 anywhere), which is why
// ConfigSaysWhatNanoGptComputes checks the activation itself.
constexpr double kTolNanoGpt = 1e-4;
// The same model and tokens through the KV cache one token at a time (GEMV) and as a whole prefill (GEMM):
// only the summation order differs (as in test_model.cpp's chunking test).
constexpr double kTolRecompute = 4e-5;

class NanoGpt : public ::testing::TestWithParam<const char*> {};

TEST_P(NanoGpt, LogitsMatchNanoGpt) {
  const NanoGptReference ref = load_reference(GetParam());
  auto model = load(GetParam());
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
  ASSERT_EQ(int64_t(ref.logits.size()), T * V);
  ASSERT_EQ(T, model->config().n_ctx) << "the reference fills the whole context (block_size)";
  Session s(model);
  auto got = s.eval_all(ref.tokens);
  const double d = max_abs_diff(got.data(), ref.logits.data(), T * V);
  std::printf("[ measured ] nanogpt/%s: max |logit - nanoGPT| = %.3g over %lld positions x %lld\n",
              GetParam(), d, (long long)T, (long long)V);
  EXPECT_LE(d, kTolNanoGpt);
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(test::argmax(got.data() + t * V, V), test::argmax(ref.logits.data() + t * V, V))
        << "position " << t;
  }
}

TEST_P(NanoGpt, KvCacheDecodeEqualsFullRecompute) {
  const NanoGptReference ref = load_reference(GetParam());
  auto model = load(GetParam());
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
  Session cached(model);
  for (int64_t t = 0; t < T; ++t) {
    auto step = cached.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
    const std::vector<float> row(step.begin(), step.end());
    Session fresh(model);
    auto whole = fresh.eval(std::span<const int32_t>(ref.tokens.data(), size_t(t + 1)));
    ASSERT_LE(max_abs_diff(row.data(), whole.data(), V), kTolRecompute) << "position " << t;
    ASSERT_LE(max_abs_diff(row.data(), ref.logits.data() + t * V, V), kTolNanoGpt) << "position " << t;
  }
  EXPECT_EQ(cached.n_past(), T);
}

TEST_P(NanoGpt, GreedyTokensEqualNanoGpt) {
  const NanoGptReference ref = load_reference(GetParam());
  Session s(load(GetParam()));
  GenerateOptions o;
  o.max_new_tokens = int64_t(ref.greedy_tokens.size());
  o.sampling.temperature = 0.0f;
  const GenerateResult r = generate(s, nullptr, ref.greedy_prompt, o);
  EXPECT_EQ(r.tokens, ref.greedy_tokens);
  EXPECT_EQ(r.reason, StopReason::Length);
}

TEST_P(NanoGpt, ConfigSaysWhatNanoGptComputes) {
  const Config c = load_config(nanogpt_dir(GetParam()) / "config.json");
  EXPECT_EQ(c.activation, Activation::GeluErf) << "nn.GELU() is erf GELU: activation_function 'gelu'";
  EXPECT_EQ(c.n_inner, 4 * c.n_embd);
  EXPECT_FLOAT_EQ(c.layer_norm_epsilon, 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.scale_attn_weights);
  EXPECT_FALSE(c.scale_attn_by_inverse_layer_idx);
  EXPECT_EQ(c.bos_token_id, -1) << "a character-level vocabulary has no <|endoftext|>";
  EXPECT_EQ(c.eos_token_id, -1);
}

INSTANTIATE_TEST_SUITE_P(Converted, NanoGpt, ::testing::Values("bias", "nobias"));

// bias=False: every bias GPT-2 has is written as zeros (exactly what no bias computes); bias=True keeps them.
TEST(NanoGptConvert, BiasesAreZeroExactlyWhenTheModelHasNone) {
  for (const char* variant : {"bias", "nobias"}) {
    auto f = SafeTensorsFile::open(nanogpt_dir(variant) / "model.safetensors");
    int64_t n_bias = 0, n_nonzero = 0;
    for (const auto& t : f->tensors()) {
      if (t.name.size() < 5 || t.name.compare(t.name.size() - 5, 5, ".bias") != 0) continue;
      ++n_bias;
      const auto v = read_tensor<float>(*f, t.name, StDtype::F32);
      if (std::any_of(v.begin(), v.end(), [](float x) { return x != 0.0f; })) ++n_nonzero;
    }
    EXPECT_EQ(n_bias, 2 * 6 + 1) << variant
                                 << ": ln_1, c_attn, c_proj, ln_2, c_fc, mlp c_proj (2 layers), ln_f";
    EXPECT_EQ(n_nonzero, std::string(variant) == "bias" ? n_bias : 0) << variant;
  }
}

}  // namespace
}  // namespace minigpt
