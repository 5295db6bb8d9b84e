// nanoGPT checkpoints converted by tools/convert_nanogpt.py (fixtures from
// tools/reference/make_nanogpt_reference.py, which also checks the converter against transformers and on bad
// inputs): minigpt gives nanoGPT's own logits and greedy tokens. "bias": GPT-2-like biases, 3 heads,
// vocabulary 65, the causal-mask buffers of a model built without flash attention; "nobias": train.py's
// defaults (bias=False: zero biases written, torch.compile's `_orig_mod.` keys).
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/session.h"
#include "minigpt/tokenizer.h"
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

NanoGptReference nanogpt_reference(const std::string& variant) {
  auto f = SafeTensorsFile::open(nanogpt_dir(variant) / "reference.safetensors");
  return {read_tensor<int32_t>(*f, "tokens", StDtype::I32), read_tensor<float>(*f, "logits", StDtype::F32),
          read_tensor<int32_t>(*f, "greedy_prompt", StDtype::I32),
          read_tensor<int32_t>(*f, "greedy_tokens", StDtype::I32)};
}

std::shared_ptr<const Model> load_nanogpt(const std::string& variant) {
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
  const NanoGptReference ref = nanogpt_reference(GetParam());
  auto model = load_nanogpt(GetParam());
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
  const NanoGptReference ref = nanogpt_reference(GetParam());
  auto model = load_nanogpt(GetParam());
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
  const NanoGptReference ref = nanogpt_reference(GetParam());
  Session s(load_nanogpt(GetParam()));
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

// A character-level model: the "bias" weights with the tokenizer convert_nanogpt.py --meta wrote from
// shakespeare_char's meta.pkl (tests/fixtures/nanogpt/char, with nanoGPT's encode/decode of some texts and
// a greedy continuation from text, checked against transformers' AutoTokenizer by the script).
class NanoGptChar : public ::testing::Test {
 protected:
  void SetUp() override {
    // The converter's output: the "bias" weights as they are; config.json with "\n" as the BOS.
    std::filesystem::copy_file(nanogpt_dir("bias") / "model.safetensors", dir_.path() / "model.safetensors");
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(nanogpt_dir("char") / f, dir_.path() / f);
    ref_ = nlohmann::json::parse(test::read_file(nanogpt_dir("char") / "reference.json"));
  }
  test::TempDir dir_;
  nlohmann::json ref_;
};

TEST_F(NanoGptChar, TokenizerIsNanoGptsEncodeAndDecode) {
  const Tokenizer tok = Tokenizer::load(dir_.path());
  EXPECT_TRUE(tok.char_level());
  EXPECT_EQ(tok.n_vocab(), 65);
  for (const auto& c : ref_["texts"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = c["ids"];
    EXPECT_EQ(tok.encode(text), ids) << text;
    EXPECT_EQ(tok.encode_with_specials(text), ids) << text;
    EXPECT_EQ(tok.decode(ids), text);
  }
  // tokenizers drops a character its vocabulary lacks (the reference records it); minigpt refuses, as
  // nanoGPT's stoi[c] does.
  const std::string unknown = ref_["unknown"];
  ASSERT_EQ(ref_["unknown_tokenizers_ids"].size(), 2u);
  try {
    tok.encode(unknown);
    ADD_FAILURE() << "encoded a character the vocabulary lacks";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "tokenizer: the character \"\xC3\xA9\" (U+00E9) is not in this character-level vocabulary");
  }
}

TEST_F(NanoGptChar, GeneratesNanoGptsTextFromText) {
  const std::string prompt = ref_["prompt"], want = ref_["greedy_text"];
  const size_t n = ref_["greedy_ids"].size();
  const auto r = test::run_cli("generate -m " + dir_.path().string() + " -p '" + prompt +
                               "' --temperature 0 --no-echo -t 1 -n " + std::to_string(n));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n");
  // No prompt: from "\n", as nanoGPT's sample.py starts by default.
  const auto start =
      test::run_cli("generate -m " + dir_.path().string() + " --temperature 0 --no-echo -t 1 -n 10");
  ASSERT_EQ(start.status, 0) << start.err;
  EXPECT_EQ(start.out, ref_["from_newline_text"].get<std::string>() + "\n");
  const auto info = test::run_cli("info -m " + dir_.path().string());
  EXPECT_NE(info.out.find("\ntokenizer:    character-level BPE, 65 tokens\n"), std::string::npos) << info.out;
}

// GGUF has no character-level tokenizer (llama.cpp's "gpt2" is byte-level): quantize refuses in one line.
// (The nanoGPT model's exact GELU has no GGUF form either: the shipped model's weights with a character-level
// tokenizer.json, then.)
TEST_F(NanoGptChar, QuantizeRefusesACharacterLevelTokenizer) {
  test::TempDir d;
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(test::source_dir() / "models" / "shakespeare-char" / f, d.path() / f);
  std::filesystem::copy_file(nanogpt_dir("char") / "tokenizer.json", d.path() / "tokenizer.json");
  const auto q =
      test::run_cli("quantize " + d.path().string() + " " + (d.path() / "q.gguf").string() + " --type q8_0");
  EXPECT_EQ(q.status, 1);
  EXPECT_NE(q.err.find("the tokenizer is character-level, which GGUF"), std::string::npos) << q.err;
  EXPECT_EQ(std::count(q.err.begin(), q.err.end(), '\n'), 1) << q.err;
  EXPECT_FALSE(std::filesystem::exists(d.path() / "q.gguf"));
}

// What a character-level tokenizer.json must be: no pre_tokenizer, no merges, the Fuse decoder, one
// character per symbol, no unk_token. Anything else without ByteLevel is refused, naming it.
TEST(CharLevelTokenizer, OnlyWhatTokenizersWritesForCharactersIsRead) {
  auto make = [](const std::string& vocab, const std::string& merges, const std::string& decoder,
                 const std::string& unk = "null") {
    return R"({"model": {"type": "BPE", "unk_token": )" + unk + R"(, "vocab": )" + vocab + R"(, "merges": )" +
           merges + R"(}, "pre_tokenizer": null, "decoder": )" + decoder + "}";
  };
  const std::string fuse = R"({"type": "Fuse"})";
  const Tokenizer ok = Tokenizer::from_tokenizer_json(make(R"({"a": 0, "\u00e9": 1, "\n": 2})", "[]", fuse));
  EXPECT_EQ(ok.encode("a\xC3\xA9\na"), (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(ok.token_symbol(1), "\xC3\xA9");
  for (const auto& [json, says] : std::vector<std::pair<std::string, std::string>>{
           {make(R"({"a": 0, "b": 1})", R"([["a", "b"]])", fuse),
            "only byte-level BPE, SentencePiece BPE and character-level BPE"},
           {make(R"({"a": 0})", "[]", "null"),
            "and character-level BPE (no pre_tokenizer, no merges, the Fuse"},
           {make(R"({"ab": 0})", "[]", fuse), "token \"ab\" (id 0) is not one character"},
           {make(R"({"": 0})", "[]", fuse), "is not one character"},
           {make(R"({"a": 0})", "[]", fuse, R"("a")"), "with an unk_token is not supported"},
       }) {
    try {
      (void)Tokenizer::from_tokenizer_json(json);
      ADD_FAILURE() << json;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << json << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace minigpt
