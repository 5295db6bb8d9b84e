// `minigpt attention`'s renderer (cli/attention_render.cpp) called directly: the labels of a real
// multilingual vocabulary (Chinese, Japanese, Korean, Arabic, Hebrew, emoji) are drawn with glyphs, not the
// missing-glyph box, in the PNG and the SVG; and a token's spaces show, the same in the images and the page.
#include <nlohmann/json.hpp>

#include "attention_render.h"
#include "minigpt/tokenizer.h"
#include "test_util.h"

namespace minigpt {
namespace {

using cli::AttentionDoc;
using cli::display_token;
using cli::HeadChoice;
using cli::ImageFormat;
using cli::ImageNotes;
using json = nlohmann::json;

// One layer, one head, each query attending evenly to the keys up to it: the renderer needs maps, not
// these in particular.
AttentionMaps even_maps(int64_t T) {
  AttentionMaps m;
  m.n_layer = 1;
  m.n_head = 1;
  m.n_tokens = T;
  m.probs.assign(size_t(T * T), 0.0f);
  for (int64_t q = 0; q < T; ++q)
    for (int64_t k = 0; k <= q; ++k) m.probs[size_t(q * T + k)] = 1.0f / float(q + 1);
  return m;
}

// The code points of a UTF-8 string (valid UTF-8 assumed: the tokens went through utf8_sanitize).
std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int j = 1; j < n; ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(j)]) & 0x3F);
    out.push_back(cp);
    i += size_t(n);
  }
  return out;
}

std::string hex_list(const std::set<char32_t>& cs) {
  std::string s;
  for (char32_t c : cs) {
    char b[16];
    std::snprintf(b, sizeof b, " U+%04X", unsigned(c));
    s += b;
  }
  return s;
}

const char* kInstallFonts =
    "scripts/setup.sh installs the fonts (Debian fonts-noto-core, fonts-noto-cjk, fonts-noto-color-emoji)";

// Qwen2's tokens (llama.cpp's vocabulary file, byte-level BPE) of text in six scripts: what `attention`
// labels with a real multilingual model. Every character of every label must come out as a glyph: Pango
// marks one that no installed font has (the box) in the very layouts the renderer draws.
TEST(AttentionRender, CjkEmojiAndRightToLeftLabelsHaveGlyphs) {
  const Tokenizer tok =
      Tokenizer::load(test::source_dir() / "tests" / "fixtures" / "ggml-vocab" / "ggml-vocab-qwen2.gguf");
  // 🤗 and 🔥 are in no DejaVu font (😀 is): an emoji font draws them.
  const std::string text =
      "日本語 中文 한국어 مرحبا بالعالم שלום עולם 😀🤗🔥 ok";
  AttentionDoc doc;
  doc.ids = tok.encode(text);
  for (int32_t id : doc.ids) doc.tokens.push_back(utf8_sanitize(tok.token_bytes(id)));
  const AttentionMaps maps = even_maps(int64_t(doc.ids.size()));
  doc.maps = &maps;
  doc.model = "qwen2-vocab";

  // The labels hold each script, as whole characters (not U+FFFD for a character split across tokens):
  // else this test would pass on boxes it never drew.
  struct Script {
    const char* name;
    char32_t lo, hi;
    bool seen = false;
  } scripts[] = {{"Han", 0x4E00, 0x9FFF},
                 {"Hangul", 0xAC00, 0xD7AF},
                 {"Arabic", 0x0600, 0x06FF},
                 {"Hebrew", 0x0590, 0x05FF},
                 {"emoji", 0x1F300, 0x1FAFF}};
  for (const auto& t : doc.tokens)
    for (char32_t c : code_points(t))
      for (auto& s : scripts) s.seen = s.seen || (c >= s.lo && c <= s.hi);
  for (const auto& s : scripts) EXPECT_TRUE(s.seen) << s.name << " is in no label";

  for (const ImageFormat f : {ImageFormat::Png, ImageFormat::Svg}) {
    ImageNotes notes;
    const std::string bytes = cli::attention_image(doc, 0, {HeadChoice::One, 0}, f, &notes);
    EXPECT_FALSE(bytes.empty());
    EXPECT_EQ(notes.missing_glyphs, 0)
        << (f == ImageFormat::Png ? "PNG" : "SVG") << ": drawn as boxes:" << hex_list(notes.missing_chars)
        << "; " << kInstallFonts;
  }
  cli::release_drawing_caches();
}

// What the test above counts is there to count: a character no font has (the last private-use code point
// of plane 16) is reported, once for its row's label and once for its column's.
TEST(AttentionRender, ACharacterNoFontHasIsCountedAsABox) {
  AttentionDoc doc;
  doc.tokens = {"a", "\U0010FFFD"};
  doc.ids = {0, 1};
  const AttentionMaps maps = even_maps(2);
  doc.maps = &maps;
  ImageNotes notes;
  cli::attention_image(doc, 0, {HeadChoice::One, 0}, ImageFormat::Png, &notes);
  EXPECT_EQ(notes.missing_glyphs, 2);
  EXPECT_EQ(notes.missing_chars, std::set<char32_t>{0x10FFFD}) << hex_list(notes.missing_chars);
  cli::release_drawing_caches();
}

// " 日" and "日" are different tokens and look it: every space is ␣, in the images' labels and the page's.
TEST(AttentionRender, SpacesInATokenShow) {
  EXPECT_EQ(display_token(" 日"), "\u2423日");
  EXPECT_EQ(display_token("日"), "日");
  EXPECT_EQ(display_token(" the"), "\u2423the");
  EXPECT_EQ(display_token("a b "), "a\u2423b\u2423");
  EXPECT_EQ(display_token("   "), "\u2423\u2423\u2423");
  EXPECT_EQ(display_token("\n"), "\u21b5");
  EXPECT_EQ(display_token(" \t"), "\u2423\u21e5");
  EXPECT_EQ(display_token(""), "\u2205");

  AttentionDoc doc;
  doc.tokens = {"日", " 日", "\n"};
  doc.ids = {0, 1, 2};
  const AttentionMaps maps = even_maps(3);
  doc.maps = &maps;
  const std::string page = cli::attention_html(doc);
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const size_t a = page.find(open);
  ASSERT_NE(a, std::string::npos);
  const json data = json::parse(page.substr(a + open.size(), page.find("</script>", a) - a - open.size()));
  EXPECT_EQ(data.at("tokens"), json({"日", " 日", "\n"}));  // the tokens as they are, for the tooltip
  EXPECT_EQ(data.at("labels"), json({"日", "\u2423日", "\u21b5"}));
  // The page labels with those (cut to 24 characters), not the raw tokens.
  EXPECT_NE(page.find("Array.from(D.labels[i])"), std::string::npos);
  EXPECT_EQ(page.find("label(D.tokens"), std::string::npos);
}

}  // namespace
}  // namespace minigpt
