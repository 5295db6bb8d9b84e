// The quantizers against their references byte for byte (tools/reference/make_quantize_reference.py:
// gguf.quants for the 32-value types, llama.cpp's libggml for the K types), and round trips through
// dequantize().
#include <cmath>
#include <cstring>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace minigpt {
namespace {

std::filesystem::path quantize_dir() { return test::source_dir() / "tests" / "fixtures" / "quantize"; }

std::vector<float> read_f32(const GgufFile& f, const std::string& name) {
  const GgufTensor* t = f.find(name);
  if (t == nullptr || t->type != GgmlType::F32) throw std::runtime_error("no F32 tensor " + name);
  std::vector<float> v(size_t(t->numel()));
  f.read(*t, v.data());
  return v;
}

TEST(Quantize, BytesEqualTheReferences) {
  auto f = GgufFile::open(quantize_dir() / "blocks.gguf");
  const std::vector<float> x = read_f32(*f, "x");
  const GgufTensor* xt = f->find("x");
  const int64_t cols = xt->ne[0], rows = xt->ne[1];
  ASSERT_EQ(cols, 256);
  int checked = 0;
  for (const char* name : {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"}) {
    SCOPED_TRACE(name);
    const GgufTensor* want = f->find(name);
    ASSERT_NE(want, nullptr);
    EXPECT_STREQ(ggml_type_info(uint32_t(want->type))->name, name);
    ASSERT_TRUE(can_quantize(want->type));
    std::vector<uint8_t> expected(want->nbytes);
    f->read(*want, expected.data());
    const uint64_t row_bytes = quantized_size(want->type, cols);
    ASSERT_EQ(row_bytes * uint64_t(rows), want->nbytes);
    std::vector<uint8_t> got(want->nbytes, 0xAA);
    quantize(want->type, x.data(), got.data(), cols * rows);
    // Row by row, so that a failure names the kind of input (see the script's rows()).
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* a = got.data() + r * row_bytes;
      const uint8_t* b = expected.data() + r * row_bytes;
      if (std::memcmp(a, b, row_bytes) != 0) {
        size_t i = 0;
        while (a[i] == b[i]) ++i;
        ADD_FAILURE() << "row " << r << ": first differing byte " << i << " (" << int(a[i]) << " vs "
                      << int(b[i]) << ")";
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

// Quantizing and dequantizing gives values within the type's step of the input (on the normal rows), and
// quantizing the dequantized values again gives the same bytes for the 8-bit type.
TEST(Quantize, RoundTripsThroughDequantize) {
  const std::vector<float> x = test::randn(4 * 256, 11, 0.05f);
  struct Case {
    GgmlType type;
    double max_rel;  // max |error| / max |x| of a block
  };
  for (const Case c :
       {Case{GgmlType::Q8_0, 1.0 / 127}, Case{GgmlType::Q4_0, 1.0 / 8}, Case{GgmlType::Q4_1, 1.0 / 15},
        Case{GgmlType::Q5_0, 1.0 / 16}, Case{GgmlType::Q5_1, 1.0 / 31}, Case{GgmlType::Q4_K, 0.2},
        Case{GgmlType::Q5_K, 0.1}, Case{GgmlType::Q6_K, 0.05}, Case{GgmlType::F16, 1e-3},
        Case{GgmlType::BF16, 1e-2}, Case{GgmlType::F32, 0}}) {
    SCOPED_TRACE(ggml_type_info(uint32_t(c.type))->name);
    std::vector<uint8_t> q(quantized_size(c.type, int64_t(x.size())));
    quantize(c.type, x.data(), q.data(), int64_t(x.size()));
    std::vector<float> y(x.size());
    dequantize(c.type, q.data(), y.data(), int64_t(y.size()));
    const int64_t block = ggml_type_info(uint32_t(c.type))->block_size == 1 ? 256 : 32;
    for (size_t b = 0; b < x.size(); b += size_t(block)) {
      float amax = 0, err = 0;
      for (size_t i = b; i < b + size_t(block); ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        err = std::max(err, std::fabs(x[i] - y[i]));
      }
      EXPECT_LE(err, c.max_rel * amax * 1.0001) << "block at " << b;
    }
    if (c.type == GgmlType::Q8_0 || c.type == GgmlType::F16 || c.type == GgmlType::F32) {
      std::vector<uint8_t> again(q.size());
      quantize(c.type, y.data(), again.data(), int64_t(y.size()));
      EXPECT_EQ(again, q);
    }
  }
}

TEST(Quantize, AllZeroBlocksAreZeroBytes) {
  const std::vector<float> zeros(256, 0.0f);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    std::vector<uint8_t> q(quantized_size(t, 256), 0xAA);
    quantize(t, zeros.data(), q.data(), 256);
    std::vector<float> y(256, 1.0f);
    dequantize(t, q.data(), y.data(), 256);
    EXPECT_EQ(y, zeros) << ggml_type_info(uint32_t(t))->name;
  }
}

TEST(Quantize, BadCallsAreRefused) {
  std::vector<float> x(300);
  std::vector<uint8_t> q(1024);
  test::expect_error([&] { quantize(GgmlType::Q4_K, x.data(), q.data(), 32); }, ErrorKind::Unsupported,
                     {"Q4_K", "32"});
  test::expect_error([&] { quantize(GgmlType::Q8_0, x.data(), q.data(), 33); }, ErrorKind::Unsupported,
                     {"Q8_0", "33"});
  test::expect_error([&] { quantize(GgmlType::IQ2_XXS, x.data(), q.data(), 256); }, ErrorKind::Unsupported,
                     {"IQ2_XXS"});
  EXPECT_FALSE(can_quantize(GgmlType::IQ4_NL));
  EXPECT_EQ(quantized_size(GgmlType::Q6_K, 512), 420u);
}

}  // namespace
}  // namespace minigpt
