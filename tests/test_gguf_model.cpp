// A GGUF file written by llama.cpp's own converter (convert_hf_to_gguf.py) loads as the model it came from:
// the logits and greedy tokens of transformers on the original, and the tokenizer of the original's files
// (tools/reference/make_gguf_model_reference.py).
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "minigpt/generate.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

std::filesystem::path gguf_model() {
  return test::source_dir() / "tests" / "fixtures" / "gguf" / "gpt2-tiny-f32.gguf";
}
json gguf_model_reference() {
  return json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "gguf" / "gpt2-tiny-reference.json"));
}

// Tolerance 1e-5 absolute: the same F32 weights, so only the order of float sums differs (logits ~1).
TEST(GgufModel, LlamaCppConverterOutputGivesTransformersLogitsAndTokens) {
  const json ref = gguf_model_reference();
  auto model = Model::load(gguf_model(), LoadOptions::threads(1));
  EXPECT_EQ(model->config().n_vocab, 50257);
  EXPECT_EQ(model->config().n_layer, 2);
  EXPECT_TRUE(model->config().tie_word_embeddings);
  const auto ids = ref["ids"].get<std::vector<int32_t>>();
  Session s(model);
  const auto logits = s.eval_all(ids);
  const int64_t V = 50257;
  double worst = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto& row = ref["logits"][t];
    for (size_t i = 0; i < row.size(); ++i) {
      worst = std::max(worst, std::fabs(double(logits[t * V + i]) - row[i].get<double>()));
    }
    EXPECT_EQ(test::argmax(&logits[t * V], V), ref["logits_argmax"][t].get<int64_t>()) << "position " << t;
  }
  std::printf("[ measured ] GGUF (llama.cpp converter) vs transformers: max |logit difference| %.3g\n",
              worst);
  EXPECT_LT(worst, 1e-5);

  const Tokenizer tok = Tokenizer::load(gguf_model());
  EXPECT_EQ(tok.encode(ref["prompt"].get<std::string>()), ids);
  Session g(model);
  GenerateOptions o;
  o.max_new_tokens = int64_t(ref["greedy"].size());
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  EXPECT_EQ(generate(g, &tok, ids, o).tokens, ref["greedy"].get<std::vector<int32_t>>());
}

// The tokenizer the converter stored (tokenizer.ggml.tokens/merges/token_type) encodes like the original
// files, special tokens included.
TEST(GgufModel, TokenizerEqualsTheOriginalFiles) {
  const Tokenizer from_gguf = Tokenizer::load(gguf_model());
  const Tokenizer from_files = Tokenizer::load(test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer");
  EXPECT_EQ(from_gguf.n_vocab(), from_files.n_vocab());
  const std::string text =
      test::read_file(test::source_dir() / "tests" / "fixtures" / "data" / "tinyshakespeare.txt")
          .substr(0, 20000) +
      " <|endoftext|> héllo 🙂\n\n  x";
  EXPECT_EQ(from_gguf.encode(text), from_files.encode(text));
  EXPECT_EQ(from_gguf.encode(text, true), from_files.encode(text, true));
  EXPECT_EQ(from_gguf.special_id("<|endoftext|>"), 50256);
  EXPECT_TRUE(from_gguf.special_prefix().empty());  // GPT-2 adds no BOS
}

TEST(GgufModel, InfoAndGenerateTakeAGgufFile) {
  auto r = test::run_cli("info -m " + gguf_model().string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("gpt2 (2 layers, 2 heads, n_embd 8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("50257"), std::string::npos) << r.out;
  r = test::run_cli("generate -m " + gguf_model().string() +
                    " -p 'Hello' --max-new-tokens 4 --temperature 0 -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(GgufModel, FilesMinigptCannotRunAreRefusedByName) {
  test::TempDir tmp;
  // A GGUF of another architecture.
  std::string b = "GGUF";
  auto put32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto put64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  put32(3), put64(0), put64(1);
  put64(20), b += "general.architecture", put32(8), put64(6), b += "falcon";
  test::write_file(tmp / "falcon.gguf", b);
  test::expect_error([&] { Model::load(tmp / "falcon.gguf"); }, ErrorKind::Unsupported,
                     {"falcon.gguf",
                      "GGUF architecture 'falcon' is not supported (gpt2, gptneox, starcoder, "
                      "llama, qwen2, qwen3, gemma3, gemma2, smollm3, phi3)"});
  // A gpt2 file without the hyper-parameters (the reader fixture holds tensors but not all keys).
  const auto mixed = test::source_dir() / "tests" / "fixtures" / "gguf" / "mixed.gguf";
  test::expect_error([&] { Model::load(mixed); }, ErrorKind::Format,
                     {"mixed.gguf", "missing metadata 'gpt2.feed_forward_length'"});
  const auto r = test::run_cli("info -m " + (tmp / "falcon.gguf").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("'falcon' is not supported"), std::string::npos) << r.err;
}

// llama.cpp reads the vocabulary from tokenizer.ggml.tokens and refuses embeddings of another size, as
// minigpt does: taking the rows' count, a list of 300 tokens for 50257 rows would decode most ids to no text.
TEST(GgufModel, ATokenListOfAnotherSizeThanTheEmbeddingsIsRefused) {
  test::TempDir tmp;
  const auto src = GgufFile::open(test::source_dir() / "tests" / "fixtures" / "gguf" / "gpt2-tiny-f32.gguf");
  for (const size_t n_tokens : {size_t(300), size_t(50258)}) {
    GgufWriter w;
    for (const std::string& key : src->keys()) {
      GgufValue v = *src->find_value(key);
      if (key == "tokenizer.ggml.tokens") {
        StringTable tokens;
        for (size_t i = 0; i < n_tokens; ++i) tokens.push_back(v.strings[std::min(i, v.strings.size() - 1)]);
        v.strings = tokens;
      }
      if (key == "tokenizer.ggml.token_type") v.ints.resize(n_tokens, v.ints.back());
      w.set(key, v);
    }
    for (const GgufTensor& t : src->tensors())
      w.add_tensor(t.name, t.type, t.ne, [&src, &t](uint8_t* dst) { src->read(t, dst); });
    const auto path = tmp / ("tokens-" + std::to_string(n_tokens) + ".gguf");
    w.write(path);
    test::expect_error([&] { Model::load(path); }, ErrorKind::Shape,
                       {path.string() + ": tokenizer.ggml.tokens has " + std::to_string(n_tokens) +
                        " tokens, token_embd.weight 50257 rows (a GGUF has one token per row)"});
  }
}

}  // namespace
}  // namespace minigpt

namespace minigpt {
namespace {

// The families' GGUF names and metadata as llama.cpp's converter writes them
// (tools/reference/make_family_gguf.py, from the transformers fixtures): gptneox (its query_key_value
// reordered by the converter, rotary dimensions from rope.dimension_count) and starcoder (multi-query,
// head_count_kv = 1); and written by convert_hf_to_gguf.py itself (tools/reference/make_llama_gguf.py):
// llama (q and k rows permuted to adjacent rotary pairs, rope_freqs.weight for llama3 scaling, rope.scaling
// linear), qwen2 and qwen3 (halves kept); by tools/reference/make_block_family_gguf.py: gemma3 (norms written
// as 1 + w, the window pattern llama.cpp assumes, the local rotary base); gemma2 (soft-caps, alternating
// windows); smollm3 (every 4th layer without rotary positions); phi3 (fused attn_qkv and ffn_up kept,
// rope_factors_long/short and rope.scaling.attn_factor: the default session's 128 positions exceed the
// original 16, so the long factors, as transformers' 40-token reference took them). Logits against
// transformers' on the original checkpoint, F32: 1e-4, as for the safetensors fixtures.
class FamilyGguf : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(FamilyGguf, LoadsAsTheTransformersModelItCameFrom) {
  const auto [file, fixture] = GetParam();
  const auto path = test::source_dir() / "tests" / "fixtures" / "gguf" / file;
  const test::Reference ref = test::load_reference(fixture);
  auto model = Model::load(path, LoadOptions::threads(2));
  auto original = Model::load(test::fixture_dir(fixture), LoadOptions::threads(2));
  const Config &c = model->config(), &o = original->config();
  EXPECT_EQ(c.arch, o.arch);
  EXPECT_EQ(c.kv_heads(), o.kv_heads());
  EXPECT_EQ(c.rotary_dim, o.rotary_dim);
  EXPECT_EQ(c.parallel_residual, o.parallel_residual);
  EXPECT_EQ(c.tie_word_embeddings, o.tie_word_embeddings);
  const int64_t V = c.n_vocab, T = int64_t(ref.tokens.size());
  ASSERT_EQ(V, o.n_vocab);
  Session s(model);
  const auto logits = s.eval_all(ref.tokens);
  double worst = 0;
  for (int64_t i = 0; i < T * V; ++i) worst = std::max(worst, double(std::fabs(logits[i] - ref.logits[i])));
  for (int64_t t = 0; t < T; ++t)
    EXPECT_EQ(test::argmax(&logits[t * V], V), test::argmax(&ref.logits[t * V], V)) << "position " << t;
  std::printf("[ measured ] %s vs transformers: max |logit difference| %.3g\n", file, worst);
  EXPECT_LT(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Families, FamilyGguf,
    ::testing::Values(std::make_pair("neox-parallel-f32.gguf", "neox-parallel"),
                      std::make_pair("bigcode-mqa-f32.gguf", "bigcode-4x"),
                      std::make_pair("llama-gqa62-f32.gguf", "llama-gqa62"),
                      std::make_pair("llama-gqa93-llama3-f32.gguf", "llama-gqa93-llama3"),
                      std::make_pair("llama-linear-bias-f32.gguf", "llama-linear-bias"),
                      std::make_pair("qwen2-bias-f32.gguf", "qwen2-bias"),
                      std::make_pair("qwen3-headdim-f32.gguf", "qwen3-headdim"),
                      std::make_pair("gemma3-linear-f32.gguf", "gemma3-linear"),
                      std::make_pair("gemma2-window-f32.gguf", "gemma2-window"),
                      std::make_pair("smollm3-nope-f32.gguf", "smollm3-nope"),
                      std::make_pair("phi3-longrope-long-f32.gguf", "phi3-longrope-long"),
                      std::make_pair("phi3-partial-tied-f32.gguf", "phi3-partial-tied")),
    [](const auto& info) {
      std::string n = info.param.second;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// llama.cpp converts a Mistral model as a llama one, which has no sliding window: the file loads as llama,
// and its logits are transformers' where the window has not begun to drop keys (positions < 8), and differ
// after (the window's effect on this fixture is > 1).
TEST(LlamaGguf, MistralConvertsAsLlamaWithoutItsWindow) {
  const auto path = test::source_dir() / "tests" / "fixtures" / "gguf" / "mistral-window-f32.gguf";
  const test::Reference ref = test::load_reference("mistral-window");
  auto model = Model::load(path, LoadOptions::threads(2));
  EXPECT_EQ(model->config().arch, "llama");
  EXPECT_EQ(model->config().sliding_window, 0);
  EXPECT_EQ(model->config().rope_layout, RopeLayout::AdjacentPairs);
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size()), W = 8;
  Session s(model);
  const auto logits = s.eval_all(ref.tokens);
  double inside = 0, after = 0;
  for (int64_t i = 0; i < T * V; ++i) {
    double& d = i / V < W ? inside : after;
    d = std::max(d, double(std::fabs(logits[i] - ref.logits[i])));
  }
  std::printf(
      "[ measured ] mistral as llama: max |logit - transformers| %.3g before the window, %.3g after\n",
      inside, after);
  EXPECT_LT(inside, 1e-4);
  EXPECT_GT(after, 1e-2);
}

}  // namespace
}  // namespace minigpt

namespace minigpt {
namespace {

// A copy of a fixture GGUF with `edit` applied to its metadata.
template <typename Edit>
std::filesystem::path edited_gguf(const test::TempDir& tmp, const char* fixture, const std::string& name,
                                  Edit&& edit) {
  const auto src = GgufFile::open(test::source_dir() / "tests" / "fixtures" / "gguf" / fixture);
  GgufWriter w;
  for (const std::string& key : src->keys()) w.set(key, *src->find_value(key));
  edit(w);
  for (const GgufTensor& t : src->tensors())
    w.add_tensor(t.name, t.type, t.ne, [&src, &t](uint8_t* dst) { src->read(t, dst); });
  const auto path = tmp / name;
  w.write(path);
  return path;
}

// The keys the Gemma families add, wrong: one line naming the key, never a crash or a model of wrong numbers.
TEST(GemmaGguf, InconsistentKeysAreRefusedByName) {
  test::TempDir tmp;
  GgufValue pattern;  // a per-layer window pattern of 4 entries for 6 layers
  pattern.type = GgufType::ARRAY;
  pattern.elem = GgufType::BOOL;
  pattern.ints.resize(4, 1);
  const auto short_pattern = edited_gguf(tmp, "gemma3-linear-f32.gguf", "pattern.gguf", [&](GgufWriter& w) {
    w.set("gemma3.attention.sliding_window_pattern", pattern);
  });
  test::expect_error([&] { Model::load(short_pattern); }, ErrorKind::Config,
                     {"pattern.gguf", "gemma3.attention.sliding_window_pattern has 4 entries for 6 layers"});
  GgufValue d24;
  d24.type = GgufType::U32;
  d24.i = 24;
  const auto bad_key = edited_gguf(tmp, "gemma3-linear-f32.gguf", "keylen.gguf", [&](GgufWriter& w) {
    w.set("gemma3.attention.key_length", d24);
    w.set("gemma3.attention.value_length", d24);
  });
  // head_dim 24 from the keys, 16 in the tensors: the tensors' shapes say so.
  test::expect_error([&] { Model::load(bad_key); }, ErrorKind::Shape, {"keylen.gguf", "attn_q"});
  const auto no_eps = edited_gguf(tmp, "gemma2-window-f32.gguf", "eps.gguf", [&](GgufWriter& w) {
    w.remove("gemma2.attention.layer_norm_rms_epsilon");
  });
  test::expect_error([&] { Model::load(no_eps); }, ErrorKind::Format,
                     {"eps.gguf", "missing metadata 'gemma2.attention.layer_norm_rms_epsilon'"});
  const auto neg_cap = edited_gguf(tmp, "gemma2-window-f32.gguf", "cap.gguf", [&](GgufWriter& w) {
    GgufValue v;
    v.type = GgufType::F32;
    v.f = -5.0;
    w.set("gemma2.attn_logit_softcapping", v);
  });
  test::expect_error([&] { Model::load(neg_cap); }, ErrorKind::Config, {"cap.gguf", "soft-cap"});
}

}  // namespace
}  // namespace minigpt
