// llm.c checkpoints (-m FILE.bin): the F32 and BF16 files tools/reference/make_llmc_reference.py wrote as
// llm.c's write_model does give transformers' logits and greedy tokens; the padded vocabulary rows are never
// read; every malformed header is one line; the CLI asks for --tokenizer.
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "arch/llmc.h"
#include "minigpt/generate.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

fs::path llmc_dir() { return test::source_dir() / "tests" / "fixtures" / "llmc"; }
fs::path f32_file() { return llmc_dir() / "gpt2-f32.bin"; }
fs::path bf16_file() { return llmc_dir() / "gpt2-bf16.bin"; }
fs::path bytelevel_tokenizer() {
  return test::source_dir() / "tests" / "fixtures" / "tokenizer" / "bytelevel";
}

constexpr int64_t kV = 300, kVp = 384, kC = 24, kL = 2, kMaxT = 64;

struct LlmcReference {
  std::vector<int32_t> tokens, prompt, greedy_f32, greedy_bf16;
  std::vector<float> logits_f32, logits_bf16;  // [T, V]
};

LlmcReference llmc_reference() {
  auto f = SafeTensorsFile::open(llmc_dir() / "reference.safetensors");
  using test::read_tensor;
  LlmcReference r;
  r.tokens = read_tensor<int32_t>(*f, "tokens", StDtype::I32);
  r.prompt = read_tensor<int32_t>(*f, "prompt", StDtype::I32);
  r.greedy_f32 = read_tensor<int32_t>(*f, "greedy_f32", StDtype::I32);
  r.greedy_bf16 = read_tensor<int32_t>(*f, "greedy_bf16", StDtype::I32);
  r.logits_f32 = read_tensor<float>(*f, "logits_f32", StDtype::F32);
  r.logits_bf16 = read_tensor<float>(*f, "logits_bf16", StDtype::F32);
  return r;
}

double max_abs_diff(std::span<const float> a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

std::vector<int32_t> greedy(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& prompt,
                            int64_t n) {
  Session s(model);
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  return generate(s, nullptr, prompt, o).tokens;
}

// The header's int32 field i of a checkpoint image.
void set_field(std::string& image, int i, int32_t v) { std::memcpy(image.data() + 4 * i, &v, 4); }

// A random llm.c checkpoint (F32, version 3), written as write_model lays it out: for shapes the fixture
// does not have (GPT-2's vocabulary of 50257, padded to 50304).
void write_random_llmc(const fs::path& path, int32_t maxT, int32_t V, int32_t L, int32_t NH, int32_t C,
                       int32_t Vp) {
  std::vector<int32_t> header(256, 0);
  const int32_t fields[] = {kLlmcMagic, 3, maxT, V, L, NH, C, Vp};
  std::copy(std::begin(fields), std::end(fields), header.begin());
  const size_t n =
      size_t(Vp) * C + size_t(maxT) * C + size_t(L) * (12 * size_t(C) * C + 13 * size_t(C)) + 2 * size_t(C);
  std::vector<float> params = test::randn(n, 7, 0.1f);
  std::string image(reinterpret_cast<const char*>(header.data()), 1024);
  image.append(reinterpret_cast<const char*>(params.data()), n * sizeof(float));
  test::write_file(path, image);
}

TEST(Llmc, HeaderBecomesAGpt2ConfigWithTheUnpaddedVocabulary) {
  auto f = LlmcFile::open(f32_file());
  const LlmcHeader& h = f->header();
  EXPECT_EQ(h.version, 3);
  EXPECT_EQ(h.n_vocab, kV);
  EXPECT_EQ(h.n_vocab_padded, kVp);
  const Config c = llmc_config(h);
  EXPECT_EQ(c.arch, "gpt2");
  EXPECT_EQ(c.n_layer, kL);
  EXPECT_EQ(c.n_head, 3);
  EXPECT_EQ(c.n_embd, kC);
  EXPECT_EQ(c.n_ctx, kMaxT);
  EXPECT_EQ(c.n_vocab, kV);  // never Vp
  EXPECT_EQ(c.n_inner, 4 * kC);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  // wte's slice is its first V rows; wpe starts after all Vp of them.
  ASSERT_GE(f->tensors().size(), 2u);
  EXPECT_EQ(llmc_gguf_name(f->tensors()[0]), "token_embd.weight");
  EXPECT_EQ(f->tensors()[0].shape, (std::vector<int64_t>{kV, kC}));
  EXPECT_EQ(f->tensors()[1].offset, uint64_t(1024 + kVp * kC * 4));
  EXPECT_EQ(f->tensors().size(), size_t(4 + 12 * kL));
  EXPECT_EQ(LlmcFile::open(bf16_file())->dtype(), StDtype::BF16);
}

// Tolerance 1e-4 absolute: the same F32 weights as transformers' float32 eager forward, so only the order of
// float sums differs (logits have std ~1; measured ~1e-6). A layout error (a transposed matrix, a layer's
// slice off by one, wpe read from wte's padding) moves them by ~1.
TEST(Llmc, F32FileGivesTransformersLogitsAndGreedyTokens) {
  const LlmcReference ref = llmc_reference();
  auto model = Model::load(f32_file(), LoadOptions::threads(1));
  EXPECT_EQ(model->config().n_vocab, kV);
  Session s(model);
  const auto logits = s.eval_all(ref.tokens);
  ASSERT_EQ(logits.size(), ref.tokens.size() * size_t(kV));
  const double worst = max_abs_diff(logits, ref.logits_f32);
  std::printf("[ measured ] llm.c F32 file vs transformers: max |logit difference| %.3g\n", worst);
  EXPECT_LT(worst, 1e-4);
  for (size_t t = 0; t < ref.tokens.size(); ++t) {
    EXPECT_EQ(test::argmax(&logits[t * kV], kV), test::argmax(&ref.logits_f32[t * kV], kV))
        << "position " << t;
  }
  EXPECT_EQ(greedy(model, ref.prompt, int64_t(ref.greedy_f32.size())), ref.greedy_f32);
}

// The BF16 file against transformers on the same BF16-rounded weights computed in float32: minigpt widens
// BF16 to F32 exactly and computes in F32, so the bound is the F32 one (1e-4), or where the CPU computes BF16
// weights in BF16 (test::bf16_arithmetic: the activations rounded too) test::kTolBf16Math. Against the
// unrounded weights the rounding itself (2^-9 relative per weight) moves the logits: measured 2.7e-2 by the
// script; bound 6e-2.
TEST(Llmc, Bf16FileGivesTransformersLogitsOnTheRoundedWeights) {
  const LlmcReference ref = llmc_reference();
  auto model = Model::load(bf16_file(), LoadOptions::threads(1));
  ASSERT_EQ(model->stored_bytes().size(), 1u);
  EXPECT_EQ(model->stored_bytes()[0].first, "BF16");
  Session s(model);
  const auto logits = s.eval_all(ref.tokens);
  const double worst = max_abs_diff(logits, ref.logits_bf16);
  const double vs_f32 = max_abs_diff(logits, ref.logits_f32);
  std::printf(
      "[ measured ] llm.c BF16 file vs transformers on the rounded weights: max |logit difference| %.3g "
      "(vs the F32 weights: %.3g)\n",
      worst, vs_f32);
  EXPECT_LT(worst, test::bf16_arithmetic(*model) ? test::kTolBf16Math : 1e-4);
  EXPECT_LT(vs_f32, 6e-2);
  EXPECT_EQ(greedy(model, ref.prompt, int64_t(ref.greedy_bf16.size())), ref.greedy_bf16);
}

// Token by token through the KV cache against one prefill of every position: the same weights, GEMV against
// GEMM blocking, so only summation order differs (4e-5, as test_model.cpp's chunking test); BF16 weights in
// BF16 arithmetic (test::bf16_arithmetic) differ by the activations' rounding, which the GEMM has and one
// row's GEMV has not.
TEST(Llmc, KvCacheDecodeEqualsFullRecompute) {
  const LlmcReference ref = llmc_reference();
  for (const fs::path& file : {f32_file(), bf16_file()}) {
    auto model = Model::load(file, LoadOptions::threads(1));
    Session whole(model);
    const auto all_span = whole.eval_all(ref.tokens);
    const std::vector<float> all(all_span.begin(), all_span.end());
    Session step(model);
    for (size_t t = 0; t < ref.tokens.size(); ++t) {
      const auto row = step.eval(std::span<const int32_t>(&ref.tokens[t], 1));
      const std::vector<float> want(all.begin() + ptrdiff_t(t * kV), all.begin() + ptrdiff_t((t + 1) * kV));
      ASSERT_LT(max_abs_diff(row, want), test::bf16_arithmetic(*model) ? test::kTolBf16Math : 4e-5)
          << file << " position " << t;
    }
  }
}

// llm.c pads wte to Vp rows for the GPU; no token has rows V..Vp-1. With NaN there the model is the same.
TEST(Llmc, PaddedVocabularyRowsAreNeverRead) {
  test::TempDir tmp;
  std::string image = test::read_file(f32_file());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = kV * kC; i < kVp * kC; ++i) std::memcpy(image.data() + 1024 + 4 * i, &nan, 4);
  test::write_file(tmp / "nan-padding.bin", image);
  const LlmcReference ref = llmc_reference();
  auto model = Model::load(tmp / "nan-padding.bin", LoadOptions::threads(1));
  EXPECT_EQ(model->config().n_vocab, kV);
  Session s(model);
  const auto logits = s.eval_all(ref.tokens);
  EXPECT_EQ(logits.size(), ref.tokens.size() * size_t(kV));
  EXPECT_LT(max_abs_diff(logits, ref.logits_f32), 1e-4);
  // Tokens of the padding are outside the vocabulary.
  test::expect_error([&] { s.eval(std::vector<int32_t>{int32_t(kV)}); }, ErrorKind::Argument, {"300"});
}

TEST(Llmc, InspectReadsTheHeaderOnly) {
  const ModelSummary s = Model::inspect(f32_file());
  ASSERT_TRUE(s.llmc.has_value());
  EXPECT_EQ(s.llmc->version, 3);
  EXPECT_EQ(s.llmc->n_vocab_padded, kVp);
  // Every parameter minigpt reads: wte's V rows, not Vp.
  const int64_t n = kV * kC + kMaxT * kC + kL * (12 * kC * kC + 13 * kC) + 2 * kC;
  EXPECT_EQ(s.n_params, n);
  ASSERT_EQ(s.stored_bytes.size(), 1u);
  EXPECT_EQ(s.stored_bytes[0], (std::pair<std::string, size_t>{"F32", size_t(n) * 4}));
  EXPECT_EQ(s.files, std::vector<std::string>{f32_file().string()});
  EXPECT_EQ(Model::load(f32_file(), LoadOptions::threads(1))->n_params(), n);
}

TEST(Llmc, TokenizerIsAskedFor) {
  test::expect_error(
      [&] { Tokenizer::load(f32_file()); }, ErrorKind::Unsupported,
      {f32_file().string() +
       ": an llm.c checkpoint carries no tokenizer minigpt can encode with; give a tokenizer directory "
       "(GPT-2's vocab.json + merges.txt)"});
}

// Each malformed header is refused with one line naming the file and what is wrong, from a file and from
// memory; nothing is allocated from an unchecked field.
TEST(Llmc, MalformedFilesAreOneLineErrors) {
  const std::string good = test::read_file(f32_file());
  struct Case {
    const char* what;
    std::string image;
    ErrorKind kind;
    std::string needle;
  };
  std::vector<Case> cases;
  auto with = [&](std::initializer_list<std::pair<int, int32_t>> fields) {
    std::string b = good;
    for (auto [i, v] : fields) set_field(b, i, v);
    return b;
  };
  cases.push_back(
      {"empty", "", ErrorKind::Format, "truncated: 0 bytes, shorter than llm.c's 1024-byte header"});
  cases.push_back({"header cut", good.substr(0, 1000), ErrorKind::Format, "truncated: 1000 bytes"});
  cases.push_back(
      {"truncated to half", good.substr(0, good.size() / 2), ErrorKind::Format,
       "51008 bytes, but the header implies 102016 (1024 + 25248 parameters x 4 bytes: maxT 64, V "
       "300, Vp 384, L 2, NH 3, C 24); truncated?"});
  cases.push_back({"a byte too many", good + "x", ErrorKind::Format, "extra bytes after the parameters"});
  cases.push_back(
      {"bad magic", with({{0, 12345}}), ErrorKind::Format, "not an llm.c checkpoint (magic 12345"});
  cases.push_back({"version 1", with({{1, 1}}), ErrorKind::Unsupported,
                   "version 1 (F32 parameters, vocabulary not padded"});
  cases.push_back({"version 4", with({{1, 4}}), ErrorKind::Unsupported, "export it again"});
  cases.push_back(
      {"version 99", with({{1, 99}}), ErrorKind::Format, "version 99 is unknown (3 = F32 and 5 = BF16"});
  cases.push_back({"big-endian version", with({{1, 0x03000000}}), ErrorKind::Format, "(a big-endian file?)"});
  cases.push_back(
      {"version 5 with F32 sizes", with({{1, 5}}), ErrorKind::Format, "but the header implies 51520"});
  cases.push_back({"state file", with({{0, 20240327}}), ErrorKind::Unsupported, "debug state file"});
  cases.push_back(
      {"tokenizer file", with({{0, 20240328}}), ErrorKind::Unsupported, "an llm.c tokenizer file"});
  const char* names[] = {"maxT", "V", "L", "NH", "C", "Vp"};
  for (int i = 2; i <= 7; ++i) {
    cases.push_back({"zero", with({{i, 0}}), ErrorKind::Format,
                     "header[" + std::to_string(i) + "] " + names[i - 2] + " ("});
    cases.push_back({"negative", with({{i, -5}}), ErrorKind::Format, "= -5 is out of range [1, "});
  }
  cases.push_back({"V > Vp", with({{3, 385}}), ErrorKind::Format, "header V = 385 is larger than Vp = 384"});
  cases.push_back({"C % NH", with({{6, 25}}), ErrorKind::Format, "header C = 25 is not divisible by NH = 3"});
  cases.push_back({"C = 2^31 - 1", with({{6, 2147483647}}), ErrorKind::Format,
                   "C (the channels) = 2147483647 is out of range"});
  cases.push_back({"L = 2^31 - 1", with({{4, 2147483647}}), ErrorKind::Format,
                   "header[4] L (the layers) = 2147483647 is out of range [1, 4096]"});
  // Every field at its largest: the sizes (~2^58 bytes) are computed without overflow and refused by length.
  cases.push_back(
      {"every size at its cap",
       with({{2, 1 << 20}, {3, 1 << 24}, {4, 4096}, {5, 1 << 20}, {6, 1 << 20}, {7, 1 << 24}}),
       ErrorKind::Format,
       "102016 bytes, but the header implies 216247772251161600 (1024 + 54061943062790144 parameters"});
  test::TempDir tmp;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const auto* p = reinterpret_cast<const uint8_t*>(c.image.data());
    test::expect_error([&] { LlmcFile::from_memory(p, c.image.size(), "mem.bin"); }, c.kind,
                       {"mem.bin: ", c.needle});
    try {
      LlmcFile::from_memory(p, c.image.size(), "mem.bin");
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
    // Through Model::load, where the magic picks the reader (a file with neither magic is named as neither;
    // one too short for a magic, as such).
    const fs::path path = tmp / "bad.bin";
    test::write_file(path, c.image);
    int32_t magic = 0;
    if (c.image.size() >= 4) std::memcpy(&magic, c.image.data(), 4);
    const bool llmc_magic = c.image.size() >= 4 && is_llmc_magic(magic);
    test::expect_error(
        [&] { Model::load(path, LoadOptions::threads(1)); }, llmc_magic ? c.kind : ErrorKind::Io,
        {path.string(), llmc_magic           ? c.needle
                        : c.image.size() < 4 ? "too short for a GGUF file, an llm.c or a llama2.c checkpoint"
                                             : "starts with neither \"GGUF\", llm.c's magic"});
  }
}

// A file cut short after its header was checked: the read says so, nothing past the end is used.
TEST(Llmc, AFileTruncatedAfterOpeningIsAnIoError) {
  test::TempDir tmp;
  fs::copy_file(f32_file(), tmp / "cut.bin");
  auto f = LlmcFile::open(tmp / "cut.bin");
  fs::resize_file(tmp / "cut.bin", 2048);
  const LlmcTensor& last = f->tensors().back();
  std::vector<uint8_t> buf(last.nbytes);
  test::expect_error([&] { f->read(last, buf.data()); }, ErrorKind::Io,
                     {"cut.bin: read failed at byte", "the file is shorter than when it was opened"});
}

// A NaN weight is named as llm.c names the array, with the layer.
TEST(Llmc, NonFiniteWeightsAreNamedByTheirArray) {
  test::TempDir tmp;
  std::string image = test::read_file(f32_file());
  // qkvw of layer 1: after wte (Vp C), wpe (maxT C), ln1w and ln1b (L C each), and layer 0's slice.
  const int64_t at = kVp * kC + kMaxT * kC + 2 * kL * kC + 3 * kC * kC + 5;
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(image.data() + 1024 + 4 * at, &inf, 4);
  test::write_file(tmp / "inf.bin", image);
  test::expect_error(
      [&] { Model::load(tmp / "inf.bin", LoadOptions::threads(1)); }, ErrorKind::Format,
      {"inf.bin (llm.c's qkvw, layer 1): tensor 'blk.1.attn_qkv.weight' holds inf at element 5 (row 0, "
       "column 5)"});
}

// GPT-2's own vocabulary (50257, padded to 50304) with GPT-2's tokenizer, in-process and through the CLI.
TEST(LlmcCli, Gpt2VocabularyWithTheGpt2Tokenizer) {
  test::TempDir tmp;
  const fs::path bin = tmp / "gpt2.bin";
  write_random_llmc(bin, 16, 50257, 1, 2, 8, 50304);
  auto model = Model::load(bin, LoadOptions::threads(1));
  EXPECT_EQ(model->config().n_vocab, 50257);
  const fs::path tok = test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer";
  auto r = test::run_cli("generate -m " + bin.string() + " --tokenizer " + tok.string() +
                         " -p 'Hello world' -n 3 --temperature 0 -t 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"prompt_tokens\":2"), std::string::npos) << r.out;  // [15496, 995]
  EXPECT_NE(r.out.find("\"generated_tokens\":3"), std::string::npos) << r.out;
  // The tokens the library gives.
  Session s(model);
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  const auto want = generate(s, nullptr, {15496, 995}, o).tokens;
  std::vector<int32_t> got;
  std::istringstream lines_in(r.out);
  for (std::string line; std::getline(lines_in, line);) {
    const json j = json::parse(line);
    if (j.contains("id")) got.push_back(j["id"].get<int32_t>());
  }
  if (got.size() == 3) {
    EXPECT_EQ(got, want);
  } else {  // <|endoftext|> came first (greedy stops there)
    EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + ptrdiff_t(got.size())));
  }
}

TEST(LlmcCli, GenerateAttentionPerplexityTokenizeTakeTokenizer) {
  test::TempDir tmp;
  const std::string m = "-m " + f32_file().string() + " ";
  const std::string t = "--tokenizer " + bytelevel_tokenizer().string() + " ";
  auto r = test::run_cli("generate " + m + t + "-p 'hello' -n 5 --temperature 0 -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("hello", 0), 0u) << r.out;
  test::write_file(tmp / "text.txt", std::string(200, 'a') + "bc");
  r = test::run_cli("perplexity " + m + t + "-f " + (tmp / "text.txt").string() + " -c 32 --json -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"ppl\""), std::string::npos) << r.out;
  r = test::run_cli("attention " + m + t + "-p 'abc' -o " + (tmp / "a.json").string() + " -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp / "a.json"));
  r = test::run_cli("tokenize " + m + t + "abc");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "97 98 99\n");
  // Token ids alone need no tokenizer.
  r = test::run_cli("bench " + m + "-p 4 -n 2 -r 1 -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(LlmcCli, WithoutTokenizerOneLineAndNonZeroExit) {
  test::TempDir tmp;
  test::write_file(tmp / "text.txt", "abc");
  const std::string m = "-m " + f32_file().string() + " ";
  const std::string want =
      "minigpt: error: " + f32_file().string() +
      ": an llm.c checkpoint carries no tokenizer minigpt can encode with; give a tokenizer directory "
      "(GPT-2's vocab.json + merges.txt)\n";
  for (const std::string& args :
       {"generate " + m + "-p hi", "perplexity " + m + "-f " + (tmp / "text.txt").string(),
        "attention " + m + "-p hi -o " + (tmp / "a.json").string(), "tokenize " + m + "hi"}) {
    const auto r = test::run_cli(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(r.err, want) << args;
  }
  EXPECT_FALSE(fs::exists(tmp / "a.json"));
}

TEST(LlmcCli, InfoShowsTheLlmcSource) {
  auto r = test::run_cli("info -m " + bf16_file().string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(
      r.out.find("source:       llm.c checkpoint, version 5 (BF16 parameters), V 300 (wte padded to Vp 384 "
                 "rows)"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("gpt2 (2 layers, 3 heads, n_embd 24, n_inner 96)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("give a tokenizer directory"), std::string::npos) << r.out;
  r = test::run_cli("info --json -m " + f32_file().string() + " --tokenizer " +
                    bytelevel_tokenizer().string());
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out).at("model");
  EXPECT_EQ(j.at("llmc"),
            json({{"version", 3}, {"dtype", "F32"}, {"n_vocab", 300}, {"n_vocab_padded", 384}}));
  EXPECT_EQ(j.at("n_vocab"), 300);
  EXPECT_EQ(j.at("tokenizer").at("n_vocab"), 256);
}

}  // namespace
}  // namespace minigpt
