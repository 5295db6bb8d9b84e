// What `minigpt attention` writes: the maps as JSON, a heatmap as PNG or SVG (cairo, its text shaped by Pango
// with the installed fonts' fallback), or a self-contained HTML page. Each function returns the whole file's
// bytes; the command writes them (atomically).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "minigpt/attention.h"

namespace minigpt::cli {

struct AttentionDoc {
  const AttentionMaps* maps = nullptr;
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;  // each token's text, valid UTF-8 (U+FFFD for a partial character)
  std::string model;                // the model's name, for titles
  std::string prompt;
};

// {"tokens", "ids", "n_layer", "n_head", "attentions": [layer][head][query][key]} (full square rows).
std::string attention_json(const AttentionDoc& doc);

// Which heads a heatmap shows: one, the mean over the layer's heads, or all of them as a grid.
struct HeadChoice {
  enum Kind { One, Mean, Grid } kind = Grid;
  int64_t head = 0;
};
enum class ImageFormat { Png, Svg };
// The heatmap's title: the model, the layer and the head(s), each with the range it counts in (from 0):
// "shakespeare-char: layer 3 of 0..3, head 1 of 0..3".
std::string heatmap_title(const AttentionDoc& doc, int64_t layer, HeadChoice heads);
// The line below the heatmap: what rows and columns are, that each row sums to 1, and the count from 0.
std::string heatmap_caption();
// What drawing a heatmap found: the characters of its text (labels, title) that no installed font has a
// glyph for, each drawn as the missing-glyph box.
struct ImageNotes {
  int64_t missing_glyphs = 0;        // boxes drawn
  std::set<char32_t> missing_chars;  // the characters they stand for
};
// The heatmap of layer `layer` (queries down, keys across, token labels on both axes, a colour bar), with
// heatmap_title() above and heatmap_caption() below. Labels are display_token() of each token, cut at 16
// characters; a character the first font (DejaVu Sans) lacks is drawn from another installed font that
// has it (Noto's CJK, emoji, Arabic, Hebrew, Indic ...), and one no font has is counted in `notes`.
std::string attention_image(const AttentionDoc& doc, int64_t layer, HeadChoice heads, ImageFormat format,
                            ImageNotes* notes = nullptr);

// Frees Pango's, cairo's and fontconfig's process-wide caches (fonts, glyphs), which live until exit
// otherwise and which LeakSanitizer would report. Call it when no cairo or Pango object is left, e.g. after
// attention_image().
void release_drawing_caches();

// Every layer and head as thumbnails, one enlarged on click, hover for the query, key and weight, and a
// head view (lines from a token to what it attends to). No network: data and script inline.
std::string attention_html(const AttentionDoc& doc);

// A token as a label, in the PNG, the SVG and the HTML page alike: every space as ␣ (so that " 日" and "日",
// two tokens, look different), control characters as visible symbols (newline: ↵, tab: ⇥, others from the
// Control Pictures block), an empty token as ∅.
std::string display_token(const std::string& text);

}  // namespace minigpt::cli
