// The CLI as a user meets it: output, and one clear line plus a non-zero exit for every mistake.
#include "minigpt/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

// Counts the lines of s (a last line without '\n' counts).
size_t line_count(const std::string& s) {
  size_t n = 0;
  for (char ch : s) n += ch == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

TEST(Cli, InfoDescribesAModel) {
  auto r = test::run_cli("info -m " + test::fixture_dir("tiny-untied").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("3 layers, 3 heads, n_embd 48, n_inner 80"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lm head:      separate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("context:      32 tokens"), std::string::npos) << r.out;
}

TEST(Cli, LoadErrorsAreOneLineAndNonZero) {
  test::TempDir tmp;
  struct Case {
    std::string name;
    std::function<void(const std::filesystem::path&)> make;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"missing dir", [](auto&) {}, "does not exist"},
      {"no config", [](auto& d) { std::filesystem::create_directories(d); }, "no config.json"},
      {"bad json",
       [](auto& d) {
         write_random_model(d, test::tiny_config());
         test::write_file(d / "config.json", "{\"model_type\": ");
       },
       "not valid JSON"},
      {"truncated weights",
       [](auto& d) {
         write_random_model(d, test::tiny_config());
         std::string w = test::read_file(d / "model.safetensors");
         test::write_file(d / "model.safetensors", w.substr(0, w.size() / 2));
       },
       "past the end"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const auto dir = tmp.path() / "m" / std::to_string(i);
    c.make(dir);
    auto r = test::run_cli("info -m " + dir.string());
    EXPECT_EQ(r.status, 1) << c.name;
    EXPECT_EQ(r.out, "") << c.name;
    EXPECT_EQ(line_count(r.err), 1u) << c.name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("minigpt: error: ", 0), 0u) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.name << ": " << r.err;
  }
}

TEST(Cli, UsageErrors) {
  auto r = test::run_cli("info");  // neither -m nor --system
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("info needs --model DIR"), std::string::npos) << r.err;
  r = test::run_cli("no-such-command");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("no-such-command"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace minigpt
