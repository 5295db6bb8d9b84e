// minigpt's GGUF files against llama.cpp's own tools, run on them: llama-quantize's file for every preset
// `minigpt quantize` writes, and llama-completion's greedy tokens on what `minigpt convert` and `minigpt
// quantize` write for every family minigpt writes GGUF for. The tools come from scripts/llama_cpp_tools.sh
// (the pinned llama.cpp, built once per machine); .ci/run passes their folder in MINIGPT_LLAMA_CPP_BIN.
// Without it the tests look in ~/.cache/minigpt-peer/llama.cpp/build/bin, and skip, saying why, where the
// tools are in neither (no network to fetch llama.cpp's source, say).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "convert/gguf_convert.h"
#include "formats/gguf.h"
#include "minigpt/model.h"
#include "minigpt/session.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The folder holding llama-quantize and llama-completion; empty (and *why set) where it does not.
fs::path llama_cpp_bin(std::string* why) {
  const char* env = std::getenv("MINIGPT_LLAMA_CPP_BIN");
  const char* home = std::getenv("HOME");
  const fs::path bin = env != nullptr && *env != 0 ? fs::path(env)
                                                   : fs::path(home ? home : "/root") / ".cache" /
                                                         "minigpt-peer" / "llama.cpp" / "build" / "bin";
  for (const char* tool : {"llama-quantize", "llama-completion"}) {
    if (!fs::exists(bin / tool)) {
      *why = "no " + (bin / tool).string() +
             " (scripts/llama_cpp_tools.sh builds llama.cpp's tools and prints their folder; "
             "MINIGPT_LLAMA_CPP_BIN names it)";
      return {};
    }
  }
  return bin;
}
// Under ASan these tests would spend minutes in llama.cpp's runs and minigpt's ~200 loads for outputs the
// Release build already compares; what they exercise of minigpt (quantize, load, decode) the sanitizer
// build's own tests cover.
#ifdef MINIGPT_TEST_ASAN
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif
#define LLAMA_CPP_BIN_OR_SKIP(bin)                                                                           \
  if (kUnderAsan) GTEST_SKIP() << "under ASan: the Release build compares minigpt's files with llama.cpp's"; \
  std::string why_skip;                                                                                      \
  const fs::path bin = llama_cpp_bin(&why_skip);                                                             \
  if (bin.empty()) GTEST_SKIP() << why_skip;

int shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

// A random model of `config` (model_type, sizes) as a Hugging Face directory, with the shipped model's
// byte-level tokenizer (256 tokens, one per byte, no merges): small token tables, so that the matrices can be
// 256 wide (whole K super-blocks) and the files stay small.
fs::path write_hf(const fs::path& dir, const json& config) {
  fs::create_directories(dir);
  { std::ofstream(dir / "config.json") << config.dump(); }
  write_random_model(dir, load_config(dir / "config.json"));
  { std::ofstream(dir / "config.json") << config.dump(); }  // as transformers writes it
  const fs::path tok = test::source_dir() / "models" / "shakespeare-char";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"})
    fs::copy_file(tok / f, dir / f);
  return dir;
}

// Every preset `minigpt quantize --type` takes, as llama-quantize names it.
std::vector<std::string> all_presets() {
  std::vector<std::string> v;
  for (int i = 0; i < int(GgufPreset::Auto); ++i) v.push_back(preset_info(GgufPreset(i)).name);
  return v;
}
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The first tensor whose type or bytes differ between two GGUF files, for the message.
std::string first_difference(const fs::path& a, const fs::path& b) {
  auto fa = GgufFile::open(a), fb = GgufFile::open(b);
  if (fa->keys() != fb->keys()) return "the metadata keys differ";
  if (fa->tensors().size() != fb->tensors().size()) return "the tensor counts differ";
  for (size_t i = 0; i < fa->tensors().size(); ++i) {
    const GgufTensor &x = fa->tensors()[i], &y = fb->tensors()[i];
    if (x.name != y.name) return "tensor " + std::to_string(i) + ": " + x.name + " against " + y.name;
    const std::string tx = ggml_type_info(uint32_t(x.type))->name,
                      ty = ggml_type_info(uint32_t(y.type))->name;
    if (tx != ty) return x.name + ": minigpt " + tx + ", llama-quantize " + ty;
    std::vector<uint8_t> bx(x.nbytes), by(y.nbytes);
    fa->read(x, bx.data());
    fb->read(y, by.data());
    for (size_t k = 0; k < bx.size() && k < by.size(); ++k) {
      if (bx[k] != by[k]) {
        return x.name + " (" + tx + "): byte " + std::to_string(k) + " is " + std::to_string(bx[k]) +
               ", llama-quantize's " + std::to_string(by[k]);
      }
    }
  }
  return "the metadata values or the layout differ";
}

// For each of two models, `minigpt quantize` of its F32 GGUF (`minigpt convert --outtype f32`) and
// llama-quantize of the same file give the same bytes, for every preset. The models are large enough for
// llama-quantize's per-tensor choices: a tied llama of 16 layers (the "more bits" layers, the first 1/8 and
// 1/16, the first 2 and 4 attn_v) with 4 query heads per KV head (Q2_K's attn_v Q4_K), and an untied qwen2 of
// 8 layers with 2 (Q2_K's attn_v Q3_K) whose ffn_down rows (288) are not whole K super-blocks (every K
// type's fallback).
TEST(LlamaCppInterop, QuantizeIsByteIdenticalToLlamaQuantizeForEveryPreset) {
  LLAMA_CPP_BIN_OR_SKIP(bin);
  const json llama = {{"model_type", "llama"},    {"num_hidden_layers", 16},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 1},
                      {"hidden_size", 256},       {"intermediate_size", 512},
                      {"vocab_size", 256},        {"max_position_embeddings", 64},
                      {"rms_norm_eps", 1e-5},     {"tie_word_embeddings", true}};
  json qwen2 = llama;
  qwen2["model_type"] = "qwen2";
  qwen2["num_hidden_layers"] = 8;
  qwen2["num_key_value_heads"] = 2;
  qwen2["intermediate_size"] = 288;
  qwen2["tie_word_embeddings"] = false;
  std::map<std::string, std::set<std::string>> types_seen;  // preset -> the tensor types of its files
  int compared = 0;
  for (const auto& [name, config] : {std::pair{"llama", llama}, std::pair{"qwen2", qwen2}}) {
    test::TempDir tmp;
    const fs::path hf = write_hf(tmp / name, config), f32 = tmp / "f32.gguf";
    const auto c = test::run_cli("convert " + hf.string() + " " + f32.string() + " --outtype f32");
    ASSERT_EQ(c.status, 0) << c.err;
    for (const std::string& preset : all_presets()) {
      const fs::path mine = tmp / ("mine-" + preset + ".gguf"), ref = tmp / ("ref-" + preset + ".gguf");
      const auto r = test::run_cli("quantize " + f32.string() + " " + mine.string() + " --type " + preset);
      ASSERT_EQ(r.status, 0) << name << " " << preset << ": " << r.err;
      const std::string cmd = (bin / "llama-quantize").string() + " " + f32.string() + " " + ref.string() +
                              " " + upper(preset) + " 2 >" + (tmp / "llama-quantize.log").string() + " 2>&1";
      ASSERT_EQ(shell(cmd), 0) << name << " " << preset << ":\n"
                               << test::read_file(tmp / "llama-quantize.log");
      const bool same = test::read_file(mine) == test::read_file(ref);
      EXPECT_TRUE(same) << name << " --type " << preset
                        << " differs from llama-quantize's file: " << first_difference(mine, ref);
      for (const GgufTensor& t : GgufFile::open(ref)->tensors())
        types_seen[preset].insert(ggml_type_info(uint32_t(t.type))->name);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * int(all_presets().size()));
  // The mixtures were there to compare: each K preset's files hold the types its rules choose.
  // q2_k: attn_v Q4_K (llama) / Q3_K (qwen2), attn_output and ffn_down Q3_K, qwen2's ffn_down Q3_K's
  // fallback Q4_0, the head Q6_K. q3_k_m: attn_v Q5_K / Q4_K, ffn_down Q5_K in llama's first layer, Q4_K (and
  // its fallback Q5_0) after. q4_k_m: Q6_K in the "more bits" layers, the fallbacks Q5_0 and Q8_0.
  EXPECT_EQ(types_seen["q2_k"], (std::set<std::string>{"F32", "Q2_K", "Q3_K", "Q4_K", "Q4_0", "Q6_K"}));
  EXPECT_EQ(types_seen["q3_k_m"], (std::set<std::string>{"F32", "Q3_K", "Q4_K", "Q5_K", "Q5_0", "Q6_K"}));
  EXPECT_EQ(types_seen["q4_k_m"], (std::set<std::string>{"F32", "Q4_K", "Q6_K", "Q5_0", "Q8_0"}));
}

// llama-completion's tokens, read from its batch log (LLAMA_BATCH_DEBUG=1 with -v prints every token it
// decodes with its position; its output is text, which a byte-level vocabulary cannot map back to ids
// unambiguously): the prompt's, then the generated ones but the last (which is sampled, never decoded).
struct LlamaTokens {
  std::vector<int32_t> ids;  // by position
  size_t n_prompt = 0;
};
bool parse_batch_log(const std::string& log, LlamaTokens* out) {
  const size_t first = log.find("n_tokens     = ");
  if (first == std::string::npos) return false;
  out->n_prompt = size_t(std::atoi(log.c_str() + first + 15));
  std::map<int, int32_t> by_pos;
  // "    3: id =     79 (               O), pos =    3, n_seq_id =  1, seq_id = [0], output = 0"
  for (size_t at = log.find(": id = "); at != std::string::npos; at = log.find(": id = ", at + 1)) {
    const int32_t id = std::atoi(log.c_str() + at + 7);
    const size_t pos = log.find("), pos = ", at);  // after the token's text, which may hold any byte
    if (pos == std::string::npos) return false;
    const int p = std::atoi(log.c_str() + pos + 9);
    auto [it, fresh] = by_pos.emplace(p, id);
    if (!fresh && it->second != id) return false;  // a position decoded twice with different tokens
  }
  for (const auto& [p, id] : by_pos) {
    if (p != int(out->ids.size())) return false;
    out->ids.push_back(id);
  }
  return out->n_prompt > 0 && out->ids.size() > out->n_prompt;
}

// The Hugging Face config of a small random model of each family minigpt writes GGUF for: 256 wide (the K
// types' kernels run on whole super-blocks), the shipped model's 256-token vocabulary.
std::vector<std::pair<std::string, json>> family_configs() {
  const json base = {{"num_hidden_layers", 2},      {"num_attention_heads", 4},
                     {"num_key_value_heads", 2},    {"hidden_size", 256},
                     {"intermediate_size", 512},    {"vocab_size", 256},
                     {"rms_norm_eps", 1e-5},        {"max_position_embeddings", 64},
                     {"tie_word_embeddings", true}, {"bos_token_id", 10},
                     {"eos_token_id", 10}};
  std::vector<std::pair<std::string, json>> v;
  for (const char* family :
       {"llama", "mistral", "qwen2", "qwen3", "smollm3", "phi3", "gemma2", "gemma3_text"}) {
    json c = base;
    c["model_type"] = family;
    if (std::string(family) == "phi3") c["tie_word_embeddings"] = false;
    if (std::string(family).starts_with("gemma")) {  // Gemma's defaults are its published sizes'
      c["head_dim"] = 64;
      c["query_pre_attn_scalar"] = 64;
      c["sliding_window"] = 4;
      c["num_hidden_layers"] = 6;  // gemma3: 5 sliding-window layers, then a global one
    }
    v.emplace_back(family, c);
  }
  v.emplace_back("gpt2", json{{"model_type", "gpt2"},
                              {"n_layer", 2},
                              {"n_head", 4},
                              {"n_embd", 256},
                              {"n_positions", 64},
                              {"vocab_size", 256}});
  v.emplace_back("gpt_neox", json{{"model_type", "gpt_neox"},
                                  {"num_hidden_layers", 2},
                                  {"num_attention_heads", 4},
                                  {"hidden_size", 256},
                                  {"intermediate_size", 512},
                                  {"max_position_embeddings", 64},
                                  {"vocab_size", 256},
                                  {"layer_norm_eps", 1e-5},
                                  {"rotary_pct", 0.5},
                                  {"use_parallel_residual", true},
                                  {"tie_word_embeddings", false}});
  v.emplace_back("gpt_bigcode", json{{"model_type", "gpt_bigcode"},
                                     {"n_layer", 2},
                                     {"n_head", 4},
                                     {"n_embd", 256},
                                     {"n_positions", 64},
                                     {"vocab_size", 256},
                                     {"multi_query", true},
                                     {"n_inner", 512}});
  return v;
}

// llama.cpp's greedy tokens (llama-completion, --temp 0, a fixed seed) on `minigpt convert`'s F32, F16 and
// BF16 files and `minigpt quantize`'s file of every quantized preset, for every family minigpt writes GGUF
// for, are minigpt's greedy tokens on the same file. The check walks llama.cpp's path (its tokens, teacher
// forced through minigpt) and asks at every generated step that llama.cpp's token is minigpt's first choice,
// or a near-tie: within twice the activation rounding of the family's files of the tie's gap, the rule
// GgufConvert.LlamaQuantizeFilesOfTheFamiliesLoad applies (a top token may differ only where the top two are
// within twice the engines' difference). The two engines round activations differently: llama.cpp to 8
// bits before every quantized product (Q8_0 per 32 values, Q8_K per 256) and to F16 / BF16 before 16-bit
// ones; minigpt to 8 bits for Q4_0/Q4_1/Q5_0/Q5_1 and the K types it has kernels for, to 16 for Q8_0, not at
// all for Q2_K, Q3_K, F16 and BF16 (rows widened to F32). The size of 8-bit activation rounding is measured
// on minigpt itself, per family: d = the largest |logit| change between minigpt on its files with 8-bit
// activations and on the same weights in F32 (LoadOptions::weight_dtype), so each engine is within about d
// of exact and the two within 2 d. The F32 files must agree at every step (both compute in F32).
TEST(LlamaCppInterop, GreedyTokensOfEveryFamilyAndTypeAreMinigpts) {
  LLAMA_CPP_BIN_OR_SKIP(bin);
  // Steps compared per file. llama-completion generates kExtra more: its logger is leaked at exit (its own
  // comment: "this design may cause logs to be lost"), and the last up to 512 queued lines, about 12 tokens'
  // batch logs, may never be written.
  constexpr int kSteps = 16, kExtra = 16;
  // minigpt's presets with 8-bit activations in every quantized product (q4_k_m's Q6_K and fallbacks too)
  const std::set<std::string> acts8 = {"q4_0",   "q4_1",   "q5_0",   "q5_1", "q4_k_s",
                                       "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"};
  int64_t steps = 0, agree = 0, files = 0;
  double worst_ratio = 0;
  std::string worst_where;
  for (const auto& [family, config] : family_configs()) {
    test::TempDir tmp;
    // not named after the family: llama.cpp gives a model whose general.name says Phi-3 Phi-3's own tokens
    const fs::path hf = write_hf(tmp / "tiny", config);
    std::vector<std::string> types = {"f32", "f16", "bf16"};
    for (const std::string& p : all_presets())
      if (p != "f32" && p != "f16" && p != "bf16") types.push_back(p);
    struct Disagreement {
      std::string type;
      size_t step;
      int32_t theirs;
      int64_t mine;
      double gap;
    };
    std::vector<Disagreement> ties;
    double d = 0;  // the family's 8-bit activation rounding, as measured on minigpt
    for (const std::string& type : types) {
      SCOPED_TRACE(family + " " + type);
      const bool convert = type == "f32" || type == "f16" || type == "bf16";
      const fs::path file = tmp / (type + ".gguf");
      const auto r = test::run_cli((convert ? "convert " : "quantize ") + hf.string() + " " + file.string() +
                                   (convert ? " --outtype " : " --type ") + type);
      ASSERT_EQ(r.status, 0) << r.err;
      // -nr: no weight repacking (llama.cpp's AMX repack crashes on quantized files on CPUs with AMX); -t 1:
      // llama.cpp's idle threads spin, and two of them on a busy machine take seconds a token.
      const fs::path log = tmp / "llama.log";
      const std::string cmd = "LLAMA_BATCH_DEBUG=1 " + (bin / "llama-completion").string() + " -m " +
                              file.string() + " -p Hello -n " + std::to_string(kSteps + kExtra) +
                              " --temp 0 -s 1 --ignore-eos -no-cnv --no-warmup -nr -t 1 -c 64 -v >" +
                              log.string() + " 2>&1";
      const int rc = shell(cmd);
      const std::string text = test::read_file(log);
      ASSERT_EQ(rc, 0) << text.substr(text.size() > 4000 ? text.size() - 4000 : 0);
      LlamaTokens llama;
      ASSERT_TRUE(parse_batch_log(text, &llama)) << "no batch log in llama-completion's output";
      ASSERT_GE(llama.ids.size(), llama.n_prompt + kSteps)
          << "llama-completion's log stops early:\n"
          << text.substr(text.size() > 3000 ? text.size() - 3000 : 0);
      llama.ids.resize(llama.n_prompt + kSteps);
      auto model = Model::load(file, LoadOptions::threads(1));
      const int64_t V = model->config().n_vocab;
      Session s(model, SessionOptions{.n_ctx = 64});
      const auto logits = s.eval_all(llama.ids);
      const size_t first = llama.n_prompt - 1;  // the row that predicts the first generated token
      if (acts8.count(type)) {
        LoadOptions wide = LoadOptions::threads(1);
        wide.weight_dtype = DType::F32;
        Session f32(Model::load(file, wide), SessionOptions{.n_ctx = 64});
        const auto exact = f32.eval_all(llama.ids);
        for (size_t i = size_t(first) * size_t(V); i < logits.size(); ++i)
          d = std::max(d, double(std::fabs(logits[i] - exact[i])));
      }
      ++files;
      for (size_t t = first; t + 1 < llama.ids.size(); ++t) {
        const float* row = logits.data() + int64_t(t) * V;
        const int64_t best = test::argmax(row, V);
        const int32_t theirs = llama.ids[t + 1];
        ++steps;
        if (best == theirs) {
          ++agree;
          continue;
        }
        ties.push_back({type, t - first, theirs, best, double(row[best]) - double(row[theirs])});
      }
    }
    std::printf("[ measured ] %s: 8-bit activation rounding d = %.4g; %zu disagreements\n", family.c_str(), d,
                ties.size());
    for (const Disagreement& t : ties) {
      std::printf("[ measured ]   %s step %zu: llama.cpp %d, minigpt %lld, gap %.4g = %.2f d\n",
                  t.type.c_str(), t.step, t.theirs, (long long)t.mine, t.gap, t.gap / d);
      EXPECT_NE(t.type, "f32") << family << " step " << t.step << ": both engines compute in F32";
      EXPECT_LE(t.gap, 2 * d) << family << " " << t.type << " step " << t.step << ": llama.cpp's token "
                              << t.theirs << " is " << t.gap << " below minigpt's first choice " << t.mine
                              << ", more than twice the activation rounding d = " << d;
      if (t.gap / d > worst_ratio) {
        worst_ratio = t.gap / d;
        worst_where = family + " " + t.type + " step " + std::to_string(t.step);
      }
    }
  }
  std::printf(
      "[ measured ] %lld files: llama.cpp's greedy tokens are minigpt's first choice at %lld of %lld steps; "
      "the largest gap at a disagreement %.2f d (%s)\n",
      (long long)files, (long long)agree, (long long)steps, worst_ratio, worst_where.c_str());
}

}  // namespace
}  // namespace minigpt
