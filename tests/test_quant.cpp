// Dequantization of ggml's block types, bit for bit as the gguf package's gguf.quants.dequantize (the
// reference; tools/reference/make_gguf_reference.py wrote random blocks and its output side by side in
// quants.gguf).
#include <cstring>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "test_util.h"

namespace minigpt {
namespace {

TEST(Quant, DequantizationEqualsTheGgufPackageBitForBit) {
  auto f = GgufFile::open(test::source_dir() / "tests" / "fixtures" / "gguf" / "quants.gguf");
  int checked = 0;
  for (const char* name : {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}) {
    SCOPED_TRACE(name);
    const GgufTensor* q = f->find(name);
    const GgufTensor* want = f->find(std::string(name) + ".expected");
    ASSERT_NE(q, nullptr);
    ASSERT_NE(want, nullptr);
    ASSERT_EQ(q->numel(), want->numel());
    EXPECT_STREQ(ggml_type_info(uint32_t(q->type))->name, name);
    EXPECT_TRUE(can_dequantize(q->type));
    std::vector<uint8_t> raw(q->nbytes);
    f->read(*q, raw.data());
    std::vector<float> expected(size_t(want->numel())), got(expected.size(), -1.0f);
    f->read(*want, expected.data());
    dequantize(q->type, raw.data(), got.data(), q->numel());
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &expected[i], 4);
      if (a != b && differ++ < 3) ADD_FAILURE() << "value " << i << ": " << got[i] << " vs " << expected[i];
    }
    EXPECT_EQ(differ, 0);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

TEST(Quant, TypesWithoutADequantizerAreRefused) {
  EXPECT_FALSE(can_dequantize(GgmlType::IQ2_XXS));
  EXPECT_FALSE(can_dequantize(GgmlType::TQ1_0));
  std::vector<uint8_t> raw(84);
  std::vector<float> out(256);
  test::expect_error([&] { dequantize(GgmlType::TQ1_0, raw.data(), out.data(), 256); },
                     ErrorKind::Unsupported, {"TQ1_0"});
  test::expect_error([&] { dequantize(GgmlType::Q8_0, raw.data(), out.data(), 33); }, ErrorKind::Unsupported,
                     {"Q8_0", "33"});
}

}  // namespace
}  // namespace minigpt
