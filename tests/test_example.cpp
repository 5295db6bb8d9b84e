// examples/generate.cpp, built against include/minigpt/minigpt.h alone, gives transformers' greedy tokens on
// the shipped model (tests/fixtures/shakespeare-char/greedy.json,
// tools/reference/make_generate_reference.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace minigpt::test {
namespace {

TEST(Example, GenerateGivesTransformersGreedyTokens) {
  const auto ref = nlohmann::json::parse(
      read_file(source_dir() / "tests" / "fixtures" / "shakespeare-char" / "greedy.json"));
  const nlohmann::json* romeo = nullptr;
  for (const auto& c : ref["cases"])
    if (c["name"] == "romeo") romeo = &c;
  ASSERT_NE(romeo, nullptr);
  const auto prompt_ids = (*romeo)["prompt_ids"].get<std::vector<int32_t>>();
  const auto output_ids = (*romeo)["output_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> expected(output_ids.begin() + prompt_ids.size(), output_ids.end());

  TempDir tmp;
  const std::string cmd = std::string(MINIGPT_EXAMPLE_GENERATE_PATH) + " " +
                          (source_dir() / "models" / "shakespeare-char").string() + " 'ROMEO:' " +
                          std::to_string(expected.size()) + " >" + (tmp / "out").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = read_file(tmp / "out");
  ASSERT_EQ(out.rfind("ids:", 0), 0u) << out;
  std::istringstream ids(out.substr(4, out.find('\n') - 4));
  std::vector<int32_t> got;
  for (int32_t id; ids >> id;) got.push_back(id);
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace minigpt::test
