#include <gtest/gtest.h>
#include "minigpt/tokenizer.h"
TEST(TokenizerSmoke, HelloWorld) {
  auto t = minigpt::Tokenizer::load(MINIGPT_SOURCE_DIR "/../shared/tokenizers/gpt2");
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
}
