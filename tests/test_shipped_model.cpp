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

// The tokenizer files name the BOS minigpt uses (config.json's bos_token_id 10, the newline it feeds for an
// empty prompt), so that transformers' AutoTokenizer reports it (bos_token "\u010a", id 10: checked by
// tools/train_char.py, which writes these files); and no EOS, as config.json and generation_config.json
// have none: neither transformers' generate() nor minigpt stops at a token. They named no BOS, and lm-eval's
// hf model had no prefix token.
TEST(ShippedModel, TokenizerConfigNamesTheBosMinigptUses) {
  const auto dir = test::source_dir() / "models" / "shakespeare-char";
  const auto read = [&](const char* name) { return nlohmann::json::parse(test::read_file(dir / name)); };
  const auto tc = read("tokenizer_config.json"), vocab = read("vocab.json"), config = read("config.json"),
             gen = read("generation_config.json");
  ASSERT_TRUE(tc["bos_token"].is_string()) << tc.dump();
  ASSERT_TRUE(vocab.contains(tc["bos_token"].get<std::string>())) << tc.dump();
  EXPECT_EQ(vocab[tc["bos_token"].get<std::string>()], 10);
  EXPECT_EQ(config["bos_token_id"], 10);
  EXPECT_EQ(gen["bos_token_id"], 10);
  const Tokenizer tok = Tokenizer::load(dir);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{10}), "\n");
  EXPECT_TRUE(tc["eos_token"].is_null());
  EXPECT_TRUE(config["eos_token_id"].is_null());
  EXPECT_FALSE(gen.contains("eos_token_id"));
  auto model = Model::load(dir, LoadOptions::threads(2));
  EXPECT_EQ(model->config().bos_token_id, 10);
  EXPECT_TRUE(model->config().eos_token_ids.empty());
}

}  // namespace
}  // namespace minigpt
