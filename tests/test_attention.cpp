// Attention maps against transformers' output_attentions (fixtures from
// tools/reference/make_attention_reference.py), and `minigpt attention` as a user runs it: JSON, PNG, SVG,
// HTML, and one clear line for every mistake.
#include <nlohmann/json.hpp>

#include "minigpt/attention.h"
#include "minigpt/model.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

// F32 q and k computed in another order than PyTorch's give scores that differ by ~1e-6; the probabilities
// then differ by less than that. A wrong scale, mask or head mapping moves them by 1e-2 or more.
constexpr double kTol = 1e-5;

json load_fixture(const std::string& name) {
  return json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "attention" / (name + ".json")));
}

// max |got - want| over every layer, head, query and key; -1 when a shape differs.
double max_diff(const AttentionMaps& got, const json& want) {
  const json& a = want.at("attentions");
  if (int64_t(a.size()) != got.n_layer) return -1;
  double d = 0;
  for (int64_t l = 0; l < got.n_layer; ++l) {
    if (int64_t(a[size_t(l)].size()) != got.n_head) return -1;
    for (int64_t h = 0; h < got.n_head; ++h) {
      const json& m = a[size_t(l)][size_t(h)];
      if (int64_t(m.size()) != got.n_tokens) return -1;
      for (int64_t q = 0; q < got.n_tokens; ++q) {
        if (int64_t(m[size_t(q)].size()) != got.n_tokens) return -1;
        for (int64_t k = 0; k < got.n_tokens; ++k)
          d = std::max(d, std::fabs(double(got.at(l, h, q, k)) - m[size_t(q)][size_t(k)].get<double>()));
      }
    }
  }
  return d;
}

class AttentionFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(AttentionFixture, ProbabilitiesMatchTransformers) {
  const json want = load_fixture(GetParam());
  const auto ids = want.at("ids").get<std::vector<int32_t>>();
  auto model = Model::load(test::source_dir() / want.at("model").get<std::string>(), LoadOptions::threads(2));
  const AttentionMaps got = attention_maps(model, ids);
  ASSERT_EQ(got.n_layer, want.at("n_layer").get<int64_t>());
  ASSERT_EQ(got.n_head, want.at("n_head").get<int64_t>());
  ASSERT_EQ(got.n_tokens, int64_t(ids.size()));
  const double d = max_diff(got, want);
  std::printf(
      "[ measured ] %s: max |attention - transformers| = %.3g over %lld layers x %lld heads x %zu tokens\n",
      GetParam(), d, (long long)got.n_layer, (long long)got.n_head, ids.size());
  EXPECT_GE(d, 0) << "shapes differ";
  EXPECT_LE(d, kTol) << GetParam();
  // Causal: nothing above the diagonal; each row a distribution.
  for (int64_t l = 0; l < got.n_layer; ++l) {
    for (int64_t h = 0; h < got.n_head; ++h) {
      for (int64_t q = 0; q < got.n_tokens; ++q) {
        double sum = 0;
        for (int64_t k = 0; k < got.n_tokens; ++k) {
          if (k > q) {
            ASSERT_EQ(got.at(l, h, q, k), 0.0f);
          }
          sum += got.at(l, h, q, k);
        }
        ASSERT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, AttentionFixture,
                         ::testing::Values("tiny", "tiny-sinusoidal", "tiny-untied", "tiny-relu-legacy",
                                           "shakespeare-char"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(Attention, AGrownPromptKeepsTheEarlierRows) {
  // Causal: the rows of the first tokens do not depend on what follows them.
  auto model = Model::load(test::fixture_dir("tiny"), LoadOptions::threads(1));
  const std::vector<int32_t> ids = {5, 17, 300, 2, 99, 41, 7};
  const AttentionMaps all = attention_maps(model, ids);
  const AttentionMaps part = attention_maps(model, std::span<const int32_t>(ids).first(4));
  for (int64_t l = 0; l < all.n_layer; ++l)
    for (int64_t h = 0; h < all.n_head; ++h)
      for (int64_t q = 0; q < 4; ++q)
        for (int64_t k = 0; k < 4; ++k) EXPECT_NEAR(all.at(l, h, q, k), part.at(l, h, q, k), 1e-6);
}

TEST(Attention, BadInputsAreArgumentErrors) {
  auto model = Model::load(test::fixture_dir("tiny"), LoadOptions::threads(1));  // n_positions 64, vocab 320
  test::expect_error([&] { attention_maps(model, {}); }, ErrorKind::Argument, {"no tokens"});
  const std::vector<int32_t> long_ids(65, 1);
  test::expect_error([&] { attention_maps(model, long_ids); }, ErrorKind::Argument,
                     {"65 tokens", "context of 64"});
  const std::vector<int32_t> bad = {1, 320};
  test::expect_error([&] { attention_maps(model, bad); }, ErrorKind::Argument, {"320", "vocabulary"});
  const std::vector<int32_t> full(64, 3);  // exactly the context is fine
  EXPECT_EQ(attention_maps(model, full).n_tokens, 64);
}

// ---- the command ----

const std::string kShippedDir = (test::source_dir() / "models" / "shakespeare-char").string();
const std::string kShipped = "-m " + kShippedDir + " ";

size_t files_in(const std::filesystem::path& dir) {
  return size_t(std::distance(std::filesystem::directory_iterator(dir), {}));
}

TEST(AttentionCli, JsonMatchesTransformers) {
  const json want = load_fixture("shakespeare-char");
  test::TempDir tmp;
  const auto out = tmp / "att.json";
  auto r = test::run_cli("attention " + kShipped + "-p '" + want.at("text").get<std::string>() + "' -o " +
                         out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(files_in(tmp.path()), 1u);  // no temporary left beside it
  const json got = json::parse(test::read_file(out));
  EXPECT_EQ(got.at("ids"), want.at("ids"));
  EXPECT_EQ(got.at("tokens"), want.at("tokens"));
  EXPECT_EQ(got.at("n_layer"), want.at("n_layer"));
  EXPECT_EQ(got.at("n_head"), want.at("n_head"));
  // Rebuild maps from the file to compare with the same function.
  AttentionMaps m;
  m.n_layer = got.at("n_layer");
  m.n_head = got.at("n_head");
  m.n_tokens = int64_t(got.at("ids").size());
  for (const auto& layer : got.at("attentions"))
    for (const auto& head : layer)
      for (const auto& row : head)
        for (const auto& v : row) m.probs.push_back(v.get<float>());
  ASSERT_EQ(m.probs.size(), size_t(m.n_layer * m.n_head * m.n_tokens * m.n_tokens));
  const double d = max_diff(m, want);
  std::printf("[ measured ] minigpt attention -o .json: max |attention - transformers| = %.3g\n", d);
  EXPECT_GE(d, 0);
  EXPECT_LE(d, kTol);
}

TEST(AttentionCli, PngAndSvgHeatmaps) {
  test::TempDir tmp;
  auto png_size = [](const std::string& b) {
    auto be32 = [&](size_t at) {
      return uint32_t(uint8_t(b[at])) << 24 | uint32_t(uint8_t(b[at + 1])) << 16 |
             uint32_t(uint8_t(b[at + 2])) << 8 | uint32_t(uint8_t(b[at + 3]));
    };
    return std::make_pair(be32(16), be32(20));  // IHDR's width and height
  };
  const std::string prompt = "-p 'ROMEO: But soft, what light through yonder window breaks? It is the east' ";
  for (const char* head : {"--head 2", "--head mean", ""}) {
    const auto png = tmp / "a.png", svg = tmp / "a.svg";
    auto r = test::run_cli("attention " + kShipped + prompt + "--layer 3 " + head + " -o " + png.string());
    ASSERT_EQ(r.status, 0) << head << ": " << r.err;
    const std::string b = test::read_file(png);
    ASSERT_GT(b.size(), 24u);
    EXPECT_EQ(b.substr(0, 8), "\x89PNG\r\n\x1a\n") << head;
    const auto [w, h] = png_size(b);
    EXPECT_GE(w, 200u) << head;  // 72 tokens: at least a 6-pixel cell per token and the labels
    EXPECT_GE(h, 200u) << head;
    EXPECT_LE(w, 4000u) << head;
    EXPECT_LE(h, 4000u) << head;
    r = test::run_cli("attention " + kShipped + prompt + "--layer 0 " + head + " -o " + svg.string());
    ASSERT_EQ(r.status, 0) << head << ": " << r.err;
    const std::string s = test::read_file(svg);
    EXPECT_EQ(s.rfind("<?xml", 0), 0u) << head;
    EXPECT_NE(s.find("<svg"), std::string::npos) << head;
    EXPECT_NE(s.find("</svg>"), std::string::npos) << head;
  }
  EXPECT_EQ(files_in(tmp.path()), 2u);
}

// A character no installed font has is drawn as a box, and the command says which and what to install. Here
// fontconfig is given a configuration with no fonts at all, so that every character is one; with the
// machine's fonts (scripts/setup.sh's), none is and nothing is said.
TEST(AttentionCli, CharactersWithoutAFontAreNamedOnStderr) {
  test::TempDir tmp;
  test::write_file(tmp / "fonts.conf", "<?xml version=\"1.0\"?>\n<fontconfig><cachedir>" +
                                           (tmp / "cache").string() + "</cachedir></fontconfig>\n");
  const auto out = (tmp / "a.png").string();
  const std::vector<std::string> args = {"attention", "-m",     kShippedDir, "-p", "ROMEO:", "--layer",
                                         "0",         "--head", "1",         "-o", out};
  auto r = test::run_minigpt(args, {"FONTCONFIG_FILE=" + (tmp / "fonts.conf").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.rfind("minigpt: warning: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(" of the heatmap's text (U+0020 U+0028 "), std::string::npos) << r.err;  // " ", "("
  EXPECT_NE(r.err.find(" have no glyph in the installed fonts and show as boxes; scripts/setup.sh installs "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(Debian fonts-noto-core, fonts-noto-cjk, fonts-noto-color-emoji)\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(test::line_count(r.err), 2u) << r.err;  // the warning, and the line of what was written
  EXPECT_TRUE(std::filesystem::exists(out));

  r = test::run_minigpt(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
}

// Layers and heads count from 0 (--layer 3 is the last of 4): --help says so, and so do the line the command
// prints and the heatmap's title, which names the model for one head too (only the grid's did).
TEST(AttentionCli, LayersAndHeadsCountFromZeroAndTitlesNameTheModel) {
  test::TempDir tmp;
  const auto help = test::run_cli("attention --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("counted from 0: 0 is the first, n_layer - 1 the last"), std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("counted from 0 (0 .. n_head - 1)"), std::string::npos) << help.out;
  const struct {
    const char* args;
    const char* title;
  } cases[] = {{"--layer 3 --head 1", "(shakespeare-char: layer 3 of 0..3, head 1 of 0..3)"},
               {"--layer 0 --head mean", "(shakespeare-char: layer 0 of 0..3, mean of its 4 heads)"},
               {"--layer 2", "(shakespeare-char: layer 2 of 0..3, every head (0..3))"}};
  for (const auto& c : cases) {
    const auto out = tmp / "a.png";
    const auto r = test::run_cli("attention " + kShipped + "-p 'ROMEO:' " + c.args + " -o " + out.string());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("4 layers (0..3) x 4 heads (0..3) -> " + out.string() + " " + c.title),
              std::string::npos)
        << r.err;
  }
}

// For a learner, in the page itself: rows sum to 1, layers and heads count from 0; the enlarged head sits
// beside the thumbnails and stays in view (sticky), not below a grid of 12 x 12 of them; the head view draws
// no line before a hover (scripts/check_attention_html.sh runs the page's own test of that in Chromium).
TEST(AttentionCli, HtmlSaysRowsSumToOneAndKeepsTheEnlargedHeadInView) {
  test::TempDir tmp;
  const auto out = tmp / "att.html";
  auto r = test::run_cli("attention " + kShipped + "-p 'ROMEO:' -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string page = test::read_file(out);
  for (const char* says : {"Each row sums to 1", "counted from 0", "#main { position: sticky;",
                           "#layout { display: flex;", "\"Layer \" + l + \" of 0..\" + (L - 1)",
                           "the head view shows \" + before + \" lines before any hover"})
    EXPECT_NE(page.find(says), std::string::npos) << says;
  // the enlarged head and the head view come after the thumbnails, inside the same row
  const size_t layout = page.find("<div id=\"layout\">"), thumbs = page.find("<div id=\"thumbs\">"),
               main = page.find("<div id=\"main\">");
  ASSERT_NE(layout, std::string::npos);
  EXPECT_LT(layout, thumbs);
  EXPECT_LT(thumbs, main);
}

TEST(AttentionCli, HtmlIsSelfContainedWithTheData) {
  test::TempDir tmp;
  const auto out = tmp / "att.html";
  // A prompt with markup in it: it must stay data.
  auto r = test::run_cli("attention " + kShipped + "-p 'a</script><!--b@DATA@' -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string page = test::read_file(out);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* remote : {"<link", "src=", "https://", "@import"})
    EXPECT_EQ(page.find(remote), std::string::npos) << remote;
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const size_t a = page.find(open);
  ASSERT_NE(a, std::string::npos);
  const size_t b = page.find("</script>", a);
  ASSERT_NE(b, std::string::npos);
  const json data = json::parse(page.substr(a + open.size(), b - a - open.size()));
  const auto tokens = data.at("tokens").get<std::vector<std::string>>();
  EXPECT_EQ(tokens.size(), 21u);  // byte-level: one token per character
  EXPECT_EQ(tokens[1], "<");
  // The data is the library's, rounded to 5 decimals, lower triangle only.
  auto model = Model::load(test::source_dir() / "models" / "shakespeare-char", LoadOptions::threads(1));
  const AttentionMaps m = attention_maps(model, data.at("ids").get<std::vector<int32_t>>());
  ASSERT_EQ(data.at("att").size(), size_t(m.n_layer));
  double d = 0;
  for (int64_t l = 0; l < m.n_layer; ++l)
    for (int64_t h = 0; h < m.n_head; ++h)
      for (int64_t q = 0; q < m.n_tokens; ++q) {
        const json& row = data["att"][size_t(l)][size_t(h)][size_t(q)];
        ASSERT_EQ(row.size(), size_t(q + 1));
        for (int64_t k = 0; k <= q; ++k)
          d = std::max(d, std::fabs(row[size_t(k)].get<double>() - m.at(l, h, q, k)));
      }
  EXPECT_LE(d, 6e-6);  // 5e-6 from the rounding, and the float
}

// Every mistake: one line, "minigpt: error: ...", a non-zero exit, and nothing written.
TEST(AttentionCli, MistakesAreOneLineAndWriteNothing) {
  test::TempDir tmp;
  const std::string o = " -o " + (tmp / "out").string();
  const std::string long_prompt(200, 'a');  // the shipped model's context is 128
  struct Case {
    std::string args;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"-p abc" + o + ".txt", {"unknown output type '.txt'", ".json, .png, .svg or .html"}},
      {"-p abc" + o, {"unknown output type ''"}},
      {"-p ''" + o + ".json", {"prompt is empty"}},
      {"-p abc --layer 4" + o + ".png", {"--layer: 4 is outside [0, 4)"}},
      {"-p abc --layer -1" + o + ".svg", {"--layer: -1 is outside [0, 4)"}},
      {"-p abc --layer 0 --head 4" + o + ".png", {"--head: 4 is outside [0, 4)"}},
      {"-p abc --layer 0 --head x" + o + ".png", {"--head: 'x' is neither a head number nor 'mean'"}},
      {"-p abc --head 1" + o + ".png", {"needs --layer"}},
      {"-p abc --layer 1" + o + ".json", {"--layer applies to .png and .svg output only"}},
      {"-p abc --head 1" + o + ".html", {"--head applies to .png and .svg output only"}},
      {"-p " + long_prompt + o + ".json", {"200 tokens", "context of 128"}},
      {"-p abc -o " + (tmp / "no-such-dir" / "x.json").string(),
       {"no-such-dir", "No such file or directory"}},
      {"-o " + (tmp / "x.json").string(), {"--prompt is required"}},
  };
  for (const Case& c : cases) {
    auto r = test::run_cli("attention " + kShipped + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_EQ(test::line_count(r.err), 1u) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("minigpt: error: ", 0), 0u) << r.err;
    for (const auto& s : c.says)
      EXPECT_NE(r.err.find(s), std::string::npos) << "'" << s << "' not in: " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(files_in(tmp.path()), 0u) << c.args;
  }
}

TEST(AttentionCli, AFailedRunLeavesAnExistingFileAlone) {
  test::TempDir tmp;
  const auto out = tmp / "keep.json";
  test::write_file(out, "old");
  auto r = test::run_cli("attention " + kShipped + "-p " + std::string(200, 'a') + " -o " + out.string());
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(test::read_file(out), "old");
  EXPECT_EQ(files_in(tmp.path()), 1u);
}

// -o may not be a file the run reads: the map would replace the model's config.json after reading it, and
// the model would be gone (exit 0). Likewise a file of the --tokenizer directory.
TEST(AttentionCli, TheOutputMayNotReplaceAFileItReads) {
  test::TempDir tmp;
  const auto model = tmp / "model";
  std::filesystem::copy(test::source_dir() / "models" / "shakespeare-char", model);
  for (const std::string f : {"config.json", "generation_config.json", "tokenizer.json"}) {
    const std::string before = test::read_file(model / f);
    for (const std::string& tok : {std::string(), " --tokenizer " + model.string()}) {
      const auto out = model / f;
      const auto r = test::run_cli("attention -m " + model.string() + tok + " -p abc -o " + out.string());
      EXPECT_EQ(r.status, 1) << f << tok << ": " << r.err;
      EXPECT_EQ(r.err, "minigpt: error: -o " + out.string() + ": is '" + out.string() +
                           "', which this run reads (write it elsewhere)\n")
          << f;
      EXPECT_EQ(test::read_file(model / f), before) << f << tok;
    }
  }
  // The same name in another directory is a new file: written.
  const auto fine = tmp / "config.json";
  const auto r = test::run_cli("attention -m " + model.string() + " -p abc -o " + fine.string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(test::read_file(fine).find("\"attentions\""), std::string::npos);
}

}  // namespace
}  // namespace minigpt
