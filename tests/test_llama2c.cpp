// llama2.c checkpoints (-m FILE.bin): the files tools/reference/make_llama2c_reference.py wrote as llama2.c's
// export.py writes versions 0, 1 and 2 are read as their headers say and give transformers' logits and
// greedy tokens; version 2's values lie within half their group's scale of the weights it quantized; a
// legacy file (no magic) is told by its size; every malformed header is one line.
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/llama2c.h"
#include "minigpt/generate.h"
#include "minigpt/model_source.h"
#include "minigpt/tokenizer.h"
#include "test_util.h"

namespace minigpt {
namespace {

namespace fs = std::filesystem;

fs::path llama2c_dir() { return test::source_dir() / "tests" / "fixtures" / "llama2c"; }
fs::path llama2c_file(const std::string& name) { return llama2c_dir() / (name + ".bin"); }

// The fixtures' shapes as the script's FIXTURES table gives them.
struct Llama2cFixture {
  const char* name;
  int version;
  int64_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
  bool shared;
  int64_t group_size;
};
constexpr Llama2cFixture kLlama2cFixtures[] = {
    {"v0-tied", 0, 32, 96, 2, 4, 4, 256, 64, true, 0},
    {"v0-untied", 0, 32, 96, 2, 4, 2, 256, 64, false, 0},
    {"v1-tied", 1, 32, 96, 3, 4, 2, 256, 64, true, 0},
    {"v1-untied", 1, 48, 128, 2, 6, 2, 128, 48, false, 0},
    {"v2-tied", 2, 64, 192, 2, 4, 2, 256, 64, true, 64},
    {"v2-untied", 2, 32, 96, 2, 4, 2, 256, 64, false, 32},
};

const Llama2cTensor& find_llama2c_tensor(const Llama2cFile& f, const std::string& name, int64_t layer = -1) {
  for (const Llama2cTensor& t : f.tensors())
    if (t.name == name && t.layer == layer) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(Llama2c, EachVersionsHeaderAndTensorsAreReadAsExportWritesThem) {
  for (const Llama2cFixture& x : kLlama2cFixtures) {
    SCOPED_TRACE(x.name);
    EXPECT_EQ(ModelSource::open(llama2c_file(x.name)).format(), ModelFormat::Llama2c);
    auto f = Llama2cFile::open(llama2c_file(x.name));
    const Llama2cHeader& h = f->header();
    EXPECT_EQ(h.version, x.version);
    EXPECT_EQ(h.header_bytes, x.version == 0 ? 28u : 256u);
    EXPECT_EQ(h.dim, x.dim);
    EXPECT_EQ(h.hidden_dim, x.hidden);
    EXPECT_EQ(h.n_layers, x.n_layers);
    EXPECT_EQ(h.n_heads, x.n_heads);
    EXPECT_EQ(h.n_kv_heads, x.n_kv_heads);
    EXPECT_EQ(h.vocab_size, x.vocab);
    EXPECT_EQ(h.seq_len, x.seq_len);
    EXPECT_EQ(h.shared_classifier, x.shared);
    EXPECT_EQ(h.group_size, x.group_size);
    // 9 arrays per layer, the embedding, the final norm and the unshared classifier.
    EXPECT_EQ(f->tensors().size(), size_t(9 * x.n_layers + 2 + (x.shared ? 0 : 1)));
    const Llama2cTensor& wk = find_llama2c_tensor(*f, "wk", x.n_layers - 1);
    EXPECT_EQ(wk.shape, (std::vector<int64_t>{x.n_kv_heads * x.dim / x.n_heads, x.dim}));
    EXPECT_EQ(wk.quantized(), x.version == 2);
    EXPECT_FALSE(find_llama2c_tensor(*f, "rms_final_weight").quantized());
    EXPECT_EQ(find_llama2c_tensor(*f, "w2", 0).shape, (std::vector<int64_t>{x.dim, x.hidden}));
  }
}

// export.py's quantize_q80: per group, scale = max |w| / 127 and q = round(w / scale), so the group's largest
// value is stored as +-127 exactly and every value lies within scale / 2 of the weight it quantized. A dot
// product of a row with x therefore moves by at most sum over the row's groups of scale / 2 * |x|_1 of the
// group: checked here against the original embedding the script kept, for one x.
TEST(Llama2c, Version2ValuesLieWithinHalfTheirGroupsScale) {
  for (const char* name : {"v2-tied", "v2-untied"}) {
    SCOPED_TRACE(name);
    auto f = Llama2cFile::open(llama2c_file(name));
    const Llama2cTensor& t = find_llama2c_tensor(*f, "token_embedding_table");
    ASSERT_TRUE(t.quantized());
    auto ref = SafeTensorsFile::open(llama2c_dir() / "reference.safetensors");
    const std::vector<float> orig = test::read_tensor<float>(*ref, std::string(name) + ".embd", StDtype::F32);
    ASSERT_EQ(orig.size(), size_t(t.numel()));
    std::vector<float> deq(orig.size());
    f->read(t, deq.data());
    const std::vector<float> scales = f->read_scales(t);
    const size_t gs = size_t(f->header().group_size);
    ASSERT_EQ(scales.size() * gs, orig.size());
    for (size_t g = 0; g < scales.size(); ++g) {
      float group_max = 0;
      for (size_t i = g * gs; i < (g + 1) * gs; ++i) {
        group_max = std::max(group_max, std::fabs(deq[i]));
        // |w - q s| <= s / 2, with float32's rounding of w / s and of q * s (a few ulps of s).
        ASSERT_LE(std::fabs(deq[i] - orig[i]), scales[g] * (0.5f + 1e-5f)) << "value " << i;
      }
      ASSERT_FLOAT_EQ(group_max, 127 * scales[g]) << "group " << g;
    }
    const int64_t V = t.shape[0], C = t.shape[1];
    const std::vector<float> x = test::randn(size_t(C), 3);
    for (int64_t v = 0; v < V; ++v) {
      double exact = 0, quant = 0, bound = 0;
      for (int64_t i = 0; i < C; ++i) {
        const size_t k = size_t(v * C + i);
        exact += double(orig[k]) * x[size_t(i)];
        quant += double(deq[k]) * x[size_t(i)];
        bound += scales[k / gs] * 0.5 * std::fabs(x[size_t(i)]);
      }
      ASSERT_LE(std::fabs(quant - exact), bound * (1 + 1e-5)) << "row " << v;
    }
  }
}

// A legacy file has no magic: it is one when its seven int32 are each in range and imply its exact size.
TEST(Llama2c, ALegacyFileIsToldByTheSizeItsHeaderImplies) {
  const std::string image = test::read_file(llama2c_file("v0-untied"));
  uint64_t implied = 0;
  const auto* p = reinterpret_cast<const uint8_t*>(image.data());
  EXPECT_TRUE(probe_llama2c_legacy(p, image.size(), image.size(), &implied));
  EXPECT_EQ(implied, image.size());
  EXPECT_FALSE(probe_llama2c_legacy(p, image.size(), image.size() - 1, &implied));
  EXPECT_EQ(implied, image.size());
  EXPECT_FALSE(probe_llama2c_legacy(p, 27, image.size(), &implied));

  test::TempDir tmp;
  // Cut short: neither format, and the message gives the size the legacy reading implies.
  test::write_file(tmp / "cut.bin", image.substr(0, image.size() - 4));
  test::expect_error([&] { ModelSource::open(tmp / "cut.bin"); }, ErrorKind::Io,
                     {"cut.bin", "no llama2.c legacy checkpoint",
                      "implies " + std::to_string(image.size()) + " bytes, but the file has " +
                          std::to_string(image.size() - 4) + " (truncated?)"});
  // Text is no model of any kind, and the message does not pretend to know its size.
  test::write_file(tmp / "notes.txt", "these are not the weights you are looking for\n");
  test::expect_error(
      [&] { ModelSource::open(tmp / "notes.txt"); }, ErrorKind::Io,
      {"notes.txt", "starts with neither \"GGUF\", llm.c's magic 20240326 nor llama2.c's \"ak42\""});
  try {
    ModelSource::open(tmp / "notes.txt");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("implies"), std::string::npos) << e.what();
  }
}

void put_i32(std::string& image, size_t at, int32_t v) { std::memcpy(image.data() + at, &v, 4); }

// Each malformed header or length is one line naming the file and the field, before any size is used.
TEST(Llama2c, MalformedHeadersAreOneLineEach) {
  const std::string v0 = test::read_file(llama2c_file("v0-tied"));
  const std::string v1 = test::read_file(llama2c_file("v1-tied"));
  const std::string v2 = test::read_file(llama2c_file("v2-untied"));
  struct Case {
    std::string what, image;
    ErrorKind kind;
    std::string needle;
  };
  auto edit = [](std::string image, size_t at, int32_t v) {
    put_i32(image, at, v);
    return image;
  };
  const int32_t int_min = std::numeric_limits<int32_t>::min();
  const std::vector<Case> cases = {
      {"too short for a header", v0.substr(0, 20), ErrorKind::Format,
       "shorter than a llama2.c checkpoint's header"},
      {"v1 header cut", v1.substr(0, 200), ErrorKind::Format, "shorter than llama2.c's 256-byte header"},
      {"v0 dim 0", edit(v0, 0, 0), ErrorKind::Format, "version 0): dim = 0 is out of range [1, 1048576]"},
      {"v0 vocab INT_MIN", edit(v0, 20, int_min), ErrorKind::Format,
       "vocab_size = 2147483648 is out of range"},
      {"v0 heads not dividing dim", edit(v0, 12, 5), ErrorKind::Format,
       "dim = 32 is not divisible by n_heads = 5"},
      {"v0 odd head size", edit(edit(v0, 12, 32), 16, 32), ErrorKind::Format,
       "head size dim / n_heads = 1 is odd"},
      {"v0 kv heads not dividing heads", edit(v0, 16, 3), ErrorKind::Format,
       "n_kv_heads = 3 does not divide n_heads = 4"},
      {"v0 more kv heads than heads", edit(v0, 16, 8), ErrorKind::Format, "n_kv_heads = 8 does not divide"},
      {"v0 layers at the cap", edit(v0, 8, 4096), ErrorKind::Format, "; truncated?"},
      {"v0 one byte extra", v0 + "x", ErrorKind::Format, "extra bytes after the weights"},
      {"v0 shared flipped to unshared", edit(v0, 20, -256), ErrorKind::Format,
       std::to_string(v0.size()) + " bytes, but the header implies " +
           std::to_string(v0.size() + 256 * 32 * 4)},
      {"unknown version", edit(v1, 4, 3), ErrorKind::Unsupported, "llama2.c checkpoint version 3 is unknown"},
      {"v1 negative vocab", edit(v1, 28, -256), ErrorKind::Format, "vocab_size = -256 is out of range"},
      {"v1 shared byte 2",
       [&] {
         std::string s = v1;
         s[36] = 2;
         return s;
       }(),
       ErrorKind::Format, "shared_classifier = 2 is not 0 or 1"},
      {"v2 group size 0", edit(v2, 37, 0), ErrorKind::Format, "group size 0 does not divide dim = 32"},
      {"v2 group size 24", edit(v2, 37, 24), ErrorKind::Format, "group size 24 does not divide dim = 32"},
      {"v2 group size 16", edit(v2, 37, 16), ErrorKind::Format, "group size 16); truncated?"},
      {"v2 cut", v2.substr(0, v2.size() - 1), ErrorKind::Format, "; truncated?"},
  };
  test::TempDir tmp;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const auto* p = reinterpret_cast<const uint8_t*>(c.image.data());
    test::expect_error([&] { Llama2cFile::from_memory(p, c.image.size(), "mem.bin"); }, c.kind,
                       {"mem.bin: ", c.needle});
    try {
      Llama2cFile::from_memory(p, c.image.size(), "mem.bin");
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// A file cut short after its header was checked: the read says so, nothing past the end is used.
TEST(Llama2c, AFileTruncatedAfterOpeningIsAnIoError) {
  test::TempDir tmp;
  fs::copy_file(llama2c_file("v2-tied"), tmp / "cut.bin");
  auto f = Llama2cFile::open(tmp / "cut.bin");
  fs::resize_file(tmp / "cut.bin", 4096);
  const Llama2cTensor& last = f->tensors().back();
  std::vector<float> buf(size_t(last.numel()));
  test::expect_error([&] { f->read(last, buf.data()); }, ErrorKind::Io, {"cut.bin: read failed at byte"});
}

std::vector<float> llama2c_ref(const std::string& key) {
  auto f = SafeTensorsFile::open(llama2c_dir() / "reference.safetensors");
  return test::read_tensor<float>(*f, key, StDtype::F32);
}
std::vector<int32_t> llama2c_ref_ids(const std::string& key) {
  auto f = SafeTensorsFile::open(llama2c_dir() / "reference.safetensors");
  return test::read_tensor<int32_t>(*f, key, StDtype::I32);
}

std::vector<int32_t> llama2c_greedy(const std::shared_ptr<const Model>& model,
                                    const std::vector<int32_t>& prompt, int64_t n) {
  Session s(model);
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  return generate(s, nullptr, prompt, o).tokens;
}

// Each version gives transformers' logits (float32 on both sides: the differences are summation order,
// ~1e-6 of logits whose spread is ~2, so 1e-4 leaves room and still catches any wrong weight, rotary pair or
// norm) and its greedy tokens, decoded through the KV cache where transformers recomputes each step.
// Version 2 is compared with transformers on the weights the file holds (q x scale, 1e-4), and with
// transformers on the weights before quantization within what quantizing moved transformers' own logits
// (|minigpt - float| <= |dequantized - float| + 1e-4, the triangle inequality of the first), with the same
// greedy tokens (the script picked seeds where quantization keeps them).
TEST(Llama2c, EachVersionGivesTransformersLogitsAndGreedyTokens) {
  const std::vector<int32_t> tokens = llama2c_ref_ids("tokens"), prompt = llama2c_ref_ids("prompt");
  for (const Llama2cFixture& x : kLlama2cFixtures) {
    SCOPED_TRACE(x.name);
    const std::string name = x.name;
    auto model = Model::load(llama2c_file(name), LoadOptions::threads(2));
    const Config& c = model->config();
    EXPECT_EQ(c.rope_layout, RopeLayout::AdjacentPairs);
    EXPECT_EQ(c.tie_word_embeddings, x.shared);
    EXPECT_EQ(c.kv_heads(), x.n_kv_heads);
    Session s(model);
    const auto got = s.eval_all(tokens);
    const int64_t V = x.vocab;
    ASSERT_EQ(got.size(), tokens.size() * size_t(V));
    const std::vector<float> exact = llama2c_ref(name + (x.version == 2 ? ".logits_deq" : ".logits"));
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - exact[i]));
    std::printf("[ measured ] llama2.c %s vs transformers%s: max |logit difference| %.3g\n", x.name,
                x.version == 2 ? " on the dequantized weights" : "", worst);
    EXPECT_LT(worst, 1e-4);
    const std::vector<int32_t> greedy = llama2c_ref_ids(name + ".greedy");
    EXPECT_EQ(llama2c_greedy(model, prompt, int64_t(greedy.size())), greedy);
    if (x.version == 2) {
      EXPECT_EQ(llama2c_ref_ids(name + ".greedy_deq"), greedy);
      const std::vector<float> fl = llama2c_ref(name + ".logits");
      double moved = 0, worst_fl = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double q = std::fabs(double(exact[i]) - fl[i]);
        moved = std::max(moved, q);
        worst_fl = std::max(worst_fl, std::fabs(double(got[i]) - fl[i]));
        ASSERT_LE(std::fabs(double(got[i]) - fl[i]), q + 1e-4) << "logit " << i;
      }
      std::printf(
          "[ measured ] llama2.c %s vs transformers on the float weights: max %.3g (quantization moves "
          "transformers' own by %.3g)\n",
          x.name, worst_fl, moved);
    }
  }
}

// Without --tokenizer a command that needs text says what to pass; token ids need none.
TEST(Llama2c, TheCliAsksForTheTokenizerAndRunsOnIds) {
  const std::string m = llama2c_file("v1-tied").string();
  auto r = test::run_cli("generate -m " + m + " -p hello -n 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("a llama2.c checkpoint carries no tokenizer; give its vocabulary as the tokenizer"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(test::line_count(r.err), 1u) << r.err;
  r = test::run_cli("info -m " + llama2c_file("v2-tied").string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(
      r.out.find("source:       llama2.c checkpoint, version 2 (Q8_0 groups of 64, dequantized to F32 at "
                 "load), shared classifier"),
      std::string::npos)
      << r.out;
}

// The fixtures' ids (the prompt and each fixture's greedy tokens) decode through a llama2.c tokenizer.bin
// (--tokenizer; the spm fixture's, 2000 pieces) to the bytes its pieces spell, as run.c and sentencepiece
// decode them.
TEST(Llama2c, FixtureIdsDecodeThroughTokenizerBin) {
  const Tokenizer tok =
      Tokenizer::load(test::source_dir() / "tests" / "fixtures" / "tokenizer" / "spm" / "tokenizer.bin");
  EXPECT_EQ(tok.n_vocab(), 2000);
  const std::vector<int32_t> prompt = llama2c_ref_ids("prompt");
  auto f = SafeTensorsFile::open(llama2c_dir() / "reference.safetensors");
  for (const Llama2cFixture& x : kLlama2cFixtures) {
    SCOPED_TRACE(x.name);
    std::vector<int32_t> ids = prompt;
    for (int32_t id : llama2c_ref_ids(std::string(x.name) + ".greedy")) ids.push_back(id);
    const std::vector<uint8_t> text =
        test::read_tensor<uint8_t>(*f, std::string(x.name) + ".text", StDtype::U8);
    EXPECT_EQ(tok.decode(ids), std::string(text.begin(), text.end()));
  }
}

// A NaN weight is refused at load, named as llama2.c names the array, with its layer.
TEST(Llama2c, NonFiniteWeightsAreNamedByTheirArray) {
  std::string image = test::read_file(llama2c_file("v1-tied"));
  auto f = Llama2cFile::from_memory(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "mem.bin");
  const Llama2cTensor& wq = find_llama2c_tensor(*f, "wq", 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(image.data() + wq.offset + 4 * 5, &nan, 4);
  test::TempDir tmp;
  test::write_file(tmp / "nan.bin", image);
  test::expect_error([&] { Model::load(tmp / "nan.bin", LoadOptions::threads(1)); }, ErrorKind::Format,
                     {"nan.bin (llama2.c's wq, layer 1)"});
}

}  // namespace
}  // namespace minigpt
