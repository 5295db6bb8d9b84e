// The model minigpt ships (models/shakespeare-char): greedy generation equals transformers', token for
// token (golden from tools/reference/make_generate_reference.py).
#include <nlohmann/json.hpp>

#include "minigpt/generate.h"
#include "test_util.h"

namespace minigpt {
namespace {

TEST(ShippedModel, GreedyGenerationEqualsTransformers) {
  const auto dir = test::source_dir() / "models" / "shakespeare-char";
  const auto golden = nlohmann::json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "shakespeare-char" / "greedy.json"));
  auto model = Model::load(dir, LoadOptions::threads(2));
  const Tokenizer tok = Tokenizer::load(dir);
  EXPECT_EQ(tok.n_vocab(), 256);
  ASSERT_EQ(golden["cases"].size(), 3u);
  for (const auto& c : golden["cases"]) {
    const std::string prompt = c["prompt"];
    const auto prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto output_ids = c["output_ids"].get<std::vector<int32_t>>();
    // The empty prompt is [10] (BOS) in the golden data, as generate() substitutes it.
    if (!prompt.empty()) {
      EXPECT_EQ(tok.encode(prompt), prompt_ids) << prompt;
    }
    Session s(model);
    GenerateOptions o;
    o.max_new_tokens = int64_t(output_ids.size() - prompt_ids.size());
    o.sampling.temperature = 0;
    const auto r = generate(s, &tok, tok.encode(prompt), o);
    EXPECT_EQ(r.prompt, prompt_ids) << prompt;
    EXPECT_EQ(r.tokens, std::vector<int32_t>(output_ids.begin() + long(prompt_ids.size()), output_ids.end()))
        << prompt;
  }
}

}  // namespace
}  // namespace minigpt
