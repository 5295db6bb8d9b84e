// The outputs of `minigpt attention`: JSON (nlohmann::json), PNG and SVG heatmaps (cairo, text by Pango),
// HTML.
#include "attention_render.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <pango/pangocairo.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "minigpt/error.h"

namespace minigpt::cli {

using json = nlohmann::json;

namespace {
// The double nearest the shortest decimal that reads back as `f`: printed as that decimal ("0.1", not
// 0.10000000149011612), and read back as a float it is `f` again.
double shortest(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = 0;
  std::from_chars(buf, r.ptr, d);
  return d;
}
}  // namespace

std::string attention_json(const AttentionDoc& doc) {
  const AttentionMaps& m = *doc.maps;
  const int64_t T = m.n_tokens;
  json att = json::array();
  for (int64_t l = 0; l < m.n_layer; ++l) {
    json layer = json::array();
    for (int64_t h = 0; h < m.n_head; ++h) {
      json head = json::array();
      const auto p = m.head(l, h);
      for (int64_t q = 0; q < T; ++q) {
        json row = json::array();
        for (int64_t k = 0; k < T; ++k) row.push_back(shortest(p[size_t(q * T + k)]));
        head.push_back(std::move(row));
      }
      layer.push_back(std::move(head));
    }
    att.push_back(std::move(layer));
  }
  json j = {{"tokens", doc.tokens}, {"ids", doc.ids},     {"n_layer", m.n_layer},
            {"n_head", m.n_head},   {"model", doc.model}, {"attentions", std::move(att)}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string display_token(const std::string& text) {
  if (text.empty()) return "\u2205";  // ∅
  std::string out;
  for (unsigned char ch : text) {
    if (ch == ' ') {
      out += "\u2423";  // ␣: " 日" and "日" are different tokens
    } else if (ch == '\n') {
      out += "\u21b5";  // ↵
    } else if (ch == '\r') {
      out += "\u240d";  // ␍
    } else if (ch == '\t') {
      out += "\u21e5";  // ⇥
    } else if (ch < 0x20 || ch == 0x7f) {
      const int code = ch == 0x7f ? 0x2421 : 0x2400 + ch;  // the Control Pictures block
      out += char(0xE0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3F));
      out += char(0x80 | (code & 0x3F));
    } else {
      out += char(ch);
    }
  }
  return out;
}

namespace {

// ---- the colour map: viridis (matplotlib's), piecewise linear between 9 of its colours ----
struct Rgb {
  double r, g, b;
};
Rgb viridis(double v) {
  static constexpr std::array<std::array<double, 3>, 9> k = {{{68, 1, 84},
                                                              {71, 44, 122},
                                                              {59, 81, 139},
                                                              {44, 113, 142},
                                                              {33, 144, 141},
                                                              {39, 173, 129},
                                                              {92, 200, 99},
                                                              {170, 220, 50},
                                                              {253, 231, 37}}};
  v = std::clamp(std::isfinite(v) ? v : 0.0, 0.0, 1.0) * double(k.size() - 1);
  const size_t i = std::min(size_t(v), k.size() - 2);
  const double f = v - double(i);
  auto mix = [&](int c) { return (k[i][size_t(c)] * (1 - f) + k[i + 1][size_t(c)] * f) / 255.0; };
  return {mix(0), mix(1), mix(2)};
}
constexpr Rgb kMasked{0.93, 0.93, 0.93};  // above the diagonal: no weight, the causal mask
constexpr Rgb kText{0.13, 0.13, 0.13};

// ---- cairo with RAII ----
struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};
using Surface = std::unique_ptr<cairo_surface_t, SurfaceDeleter>;
using Context = std::unique_ptr<cairo_t, ContextDeleter>;

void check(cairo_status_t s, const char* what) {
  if (s != CAIRO_STATUS_SUCCESS) {
    throw Error(ErrorKind::Io,
                std::string("drawing the heatmap (") + what + "): " + cairo_status_to_string(s));
  }
}

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

// The first font asked for; a character it lacks (CJK, emoji, most scripts) comes from another installed
// font that has it, as fontconfig orders them (Pango's fallback).
constexpr const char* kFont = "DejaVu Sans";
constexpr size_t kMaxLabelChars = 16;

// At most kMaxLabelChars characters (UTF-8 aware), else cut with an ellipsis.
std::string clip_label(const std::string& s) {
  size_t chars = 0, i = 0;
  while (i < s.size()) {
    if (chars == kMaxLabelChars) return s.substr(0, i) + "\u2026";
    const unsigned char c = static_cast<unsigned char>(s[i]);
    i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    ++chars;
  }
  return s;
}

void set_rgb(cairo_t* cr, const Rgb& c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

struct GObjectDeleter {
  void operator()(void* p) const { g_object_unref(p); }
};
struct FontDeleter {
  void operator()(PangoFontDescription* f) const { pango_font_description_free(f); }
};

// Text on one cairo context, shaped by Pango: one layout, re-aimed at the context's current transformation
// before each use. It also counts the characters it drew that no installed font has a glyph for.
class Text {
 public:
  explicit Text(cairo_t* cr, ImageNotes* notes)
      : cr_(cr),
        layout_(pango_cairo_create_layout(cr)),
        font_(pango_font_description_from_string(kFont)),
        notes_(notes) {
    set_font(12);
  }

  void set_font(double size, bool bold = false) {
    pango_font_description_set_absolute_size(font_.get(), size * PANGO_SCALE);
    pango_font_description_set_weight(font_.get(), bold ? PANGO_WEIGHT_BOLD : PANGO_WEIGHT_NORMAL);
    pango_layout_set_font_description(layout_.get(), font_.get());
    // The first font's ascent and descent: every line of text is centred by them, so that the baselines of
    // labels in different scripts (whose fonts' heights differ) line up.
    PangoFontMetrics* m =
        pango_context_get_metrics(pango_layout_get_context(layout_.get()), font_.get(), nullptr);
    ascent_ = double(pango_font_metrics_get_ascent(m)) / PANGO_SCALE;
    descent_ = double(pango_font_metrics_get_descent(m)) / PANGO_SCALE;
    pango_font_metrics_unref(m);
  }

  double width(const std::string& s) {
    shape(s);
    PangoRectangle logical;
    pango_layout_get_extents(layout_.get(), nullptr, &logical);
    return double(logical.width) / PANGO_SCALE;
  }

  // Text with its left end (align 0), centre (0.5) or right end (1) at x, vertically centred on y.
  void draw(const std::string& s, double x, double y, double align) {
    const double w = width(s);  // shapes s under the current transformation
    const double baseline = double(pango_layout_get_baseline(layout_.get())) / PANGO_SCALE;
    cairo_move_to(cr_, x - align * w, y + (ascent_ - descent_) / 2 - baseline);
    pango_cairo_show_layout(cr_, layout_.get());
    count_missing();
  }

 private:
  void shape(const std::string& s) {
    pango_cairo_update_layout(cr_, layout_.get());
    pango_layout_set_text(layout_.get(), s.data(), int(s.size()));
  }

  // The characters of the drawn text that came out as the missing-glyph box (Pango marks each one's glyph
  // with PANGO_GLYPH_UNKNOWN_FLAG and the character).
  void count_missing() {
    if (!notes_ || pango_layout_get_unknown_glyphs_count(layout_.get()) == 0) return;
    PangoLayoutIter* it = pango_layout_get_iter(layout_.get());
    do {
      const PangoLayoutRun* run = pango_layout_iter_get_run_readonly(it);
      if (!run) continue;
      for (int i = 0; i < run->glyphs->num_glyphs; ++i) {
        const PangoGlyph g = run->glyphs->glyphs[i].glyph;
        if (g & PANGO_GLYPH_UNKNOWN_FLAG) {
          ++notes_->missing_glyphs;
          notes_->missing_chars.insert(char32_t(g & ~PANGO_GLYPH_UNKNOWN_FLAG));
        }
      }
    } while (pango_layout_iter_next_run(it));
    pango_layout_iter_free(it);
  }

  cairo_t* cr_;
  std::unique_ptr<PangoLayout, GObjectDeleter> layout_;
  std::unique_ptr<PangoFontDescription, FontDeleter> font_;
  ImageNotes* notes_;
  double ascent_ = 0, descent_ = 0;
};

// The sizes of one heatmap panel: a title, the query labels at the left, the key labels below (turned a
// quarter), the axis names.
struct PanelLayout {
  int64_t T = 0;
  double cell = 0, font = 0, title_font = 0;
  double label_w = 0;  // the widest label at `font`
  double axis = 0;     // the band for "query" / "key"
  double pad = 4;
  double title_h() const { return title_font * 1.8; }
  double matrix_x() const { return axis + label_w + pad; }
  double matrix_y() const { return title_h(); }
  double width() const { return matrix_x() + double(T) * cell; }
  double height() const { return matrix_y() + double(T) * cell + pad + label_w + axis; }
};

PanelLayout layout_panel(Text& text, const std::vector<std::string>& labels, double cell, double font,
                         double title_font) {
  PanelLayout p;
  p.T = int64_t(labels.size());
  p.cell = cell;
  p.font = font;
  p.title_font = title_font;
  text.set_font(font);
  for (const auto& s : labels) p.label_w = std::max(p.label_w, text.width(s));
  p.axis = std::max(font, 9.0) * 1.6;
  return p;
}

// m: T x T, row = query, column = key.
void draw_panel(cairo_t* cr, Text& text, const PanelLayout& p, double x0, double y0,
                const std::vector<double>& m, const std::vector<std::string>& labels,
                const std::string& title) {
  const int64_t T = p.T;
  const double mx = x0 + p.matrix_x(), my = y0 + p.matrix_y(), side = double(T) * p.cell;
  set_rgb(cr, kText);
  text.set_font(p.title_font, true);
  text.draw(title, mx + side / 2, y0 + p.title_h() / 2, 0.5);
  for (int64_t q = 0; q < T; ++q) {
    for (int64_t k = 0; k < T; ++k) {
      set_rgb(cr, k <= q ? viridis(m[size_t(q * T + k)]) : kMasked);
      // A hair wider than the cell, so that no seam shows between neighbours when antialiased.
      cairo_rectangle(cr, mx + double(k) * p.cell, my + double(q) * p.cell, p.cell + 0.5, p.cell + 0.5);
      cairo_fill(cr);
    }
  }
  cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, mx - 0.5, my - 0.5, side + 1, side + 1);
  cairo_stroke(cr);

  set_rgb(cr, kText);
  text.set_font(p.font);
  for (int64_t i = 0; i < T; ++i) {
    const double c = double(i) * p.cell + p.cell / 2;
    text.draw(labels[size_t(i)], mx - p.pad, my + c, 1.0);  // query i: the row
    cairo_save(cr);                                         // key i: the column, read downwards
    cairo_translate(cr, mx + c, my + side + p.pad);
    cairo_rotate(cr, M_PI / 2);
    text.draw(labels[size_t(i)], 0, 0, 0.0);
    cairo_restore(cr);
  }
  cairo_set_source_rgb(cr, 0.4, 0.4, 0.4);
  text.set_font(std::max(p.font, 9.0));
  text.draw("key \u2192", mx + side / 2, my + side + p.pad + p.label_w + p.axis / 2, 0.5);
  cairo_save(cr);
  cairo_translate(cr, x0 + p.axis / 2, my + side / 2);
  cairo_rotate(cr, -M_PI / 2);
  text.draw("\u2190 query", 0, 0, 0.5);
  cairo_restore(cr);
}

constexpr double kBarW = 16, kBarGap = 24, kBarTicks = 44;

// A vertical colour bar from 1 (top) to 0, with ticks every 0.25.
void draw_colour_bar(cairo_t* cr, Text& text, double x, double y, double h) {
  const int steps = 128;
  for (int i = 0; i < steps; ++i) {
    set_rgb(cr, viridis(1.0 - (i + 0.5) / steps));
    cairo_rectangle(cr, x, y + h * i / steps, kBarW, h / steps + 0.5);
    cairo_fill(cr);
  }
  cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, x - 0.5, y - 0.5, kBarW + 1, h + 1);
  cairo_stroke(cr);
  set_rgb(cr, kText);
  text.set_font(11);
  for (int t = 0; t <= 4; ++t) {
    const double yy = y + h * (1.0 - t / 4.0);
    cairo_move_to(cr, x + kBarW, yy);
    cairo_line_to(cr, x + kBarW + 4, yy);
    cairo_stroke(cr);
    static const char* names[] = {"0", "0.25", "0.5", "0.75", "1"};
    text.draw(names[t], x + kBarW + 6, yy, 0.0);
  }
}

}  // namespace

std::string heatmap_title(const AttentionDoc& doc, int64_t layer, HeadChoice heads) {
  const AttentionMaps& m = *doc.maps;
  const auto last = [](int64_t n) { return "0.." + std::to_string(n - 1); };
  std::string t = doc.model.empty() ? "" : doc.model + ": ";
  t += "layer " + std::to_string(layer) + " of " + last(m.n_layer) + ", ";
  if (heads.kind == HeadChoice::One) {
    t += "head " + std::to_string(heads.head) + " of " + last(m.n_head);
  } else if (heads.kind == HeadChoice::Mean) {
    t += "mean of its " + std::to_string(m.n_head) + " heads";
  } else {
    t += "every head (" + last(m.n_head) + ")";
  }
  return t;
}

std::string heatmap_caption() {
  return "Rows: queries, columns: keys. Each row sums to 1 (a softmax over the keys up to its query). "
         "Layers and heads count from 0.";
}

std::string attention_image(const AttentionDoc& doc, int64_t layer, HeadChoice heads, ImageFormat format,
                            ImageNotes* notes) {
  const AttentionMaps& m = *doc.maps;
  const int64_t T = m.n_tokens, H = m.n_head;
  std::vector<std::string> labels;
  for (const auto& t : doc.tokens) labels.push_back(clip_label(display_token(t)));

  // The matrices to draw, with their titles.
  std::vector<std::vector<double>> mats;
  std::vector<std::string> titles;
  auto head_matrix = [&](int64_t h) {
    const auto p = m.head(layer, h);
    return std::vector<double>(p.begin(), p.end());
  };
  if (heads.kind == HeadChoice::One) {
    mats.push_back(head_matrix(heads.head));
    titles.push_back("head " + std::to_string(heads.head));
  } else if (heads.kind == HeadChoice::Mean) {
    std::vector<double> mean(size_t(T * T), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const auto p = m.head(layer, h);
      for (size_t i = 0; i < mean.size(); ++i) mean[i] += double(p[i]) / double(H);
    }
    mats.push_back(std::move(mean));
    titles.push_back("mean of " + std::to_string(H) + " heads");
  } else {
    for (int64_t h = 0; h < H; ++h) {
      mats.push_back(head_matrix(h));
      titles.push_back("head " + std::to_string(h));
    }
  }

  // Measure with a scratch context, then draw on a surface of the size found.
  Surface scratch(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1));
  Context measure(cairo_create(scratch.get()));
  Text measure_text(measure.get(), nullptr);
  const bool grid = heads.kind == HeadChoice::Grid;
  // Cells big enough for a label's text beside each row and column: 64 tokens make a matrix of 768 pixels
  // (a grid's panels: 512 each).
  const double cell = grid ? std::clamp(std::floor(480.0 / double(T)), 8.0, 28.0)
                           : std::clamp(std::floor(720.0 / double(T)), 12.0, 48.0);
  const double font = grid ? std::min(11.0, cell * 0.9) : std::min(14.0, cell * 0.8);
  const PanelLayout p = layout_panel(measure_text, labels, cell, font, grid ? 12 : 15);
  const int64_t cols = grid ? int64_t(std::ceil(std::sqrt(double(mats.size())))) : 1;
  const int64_t rows = (int64_t(mats.size()) + cols - 1) / cols;
  const double margin = 16, gap = 20;
  // The title above the panels (the model, the layer and the head, counted from 0), the caption below.
  const std::string title = heatmap_title(doc, layer, heads), caption = heatmap_caption();
  const double header = 30, footer = 24;
  const double grid_w = double(cols) * p.width() + double(cols - 1) * gap;
  const double grid_h = double(rows) * p.height() + double(rows - 1) * gap;
  measure_text.set_font(16, true);
  const double title_w = measure_text.width(title);
  measure_text.set_font(12);
  const double caption_w = measure_text.width(caption);
  const double W =
      std::ceil(margin * 2 + std::max({grid_w + kBarGap + kBarW + kBarTicks, title_w, caption_w}));
  const double Hpx = std::ceil(margin * 2 + header + grid_h + footer);

  std::string bytes;
  Surface surface(format == ImageFormat::Png
                      ? cairo_image_surface_create(CAIRO_FORMAT_ARGB32, int(W), int(Hpx))
                      : cairo_svg_surface_create_for_stream(append_to_string, &bytes, W, Hpx));
  check(cairo_surface_status(surface.get()), "surface");
  {
    Context cr(cairo_create(surface.get()));
    cairo_set_source_rgb(cr.get(), 1, 1, 1);
    cairo_paint(cr.get());
    set_rgb(cr.get(), kText);
    Text text(cr.get(), notes);
    text.set_font(16, true);
    text.draw(title, margin, margin + 10, 0.0);
    text.set_font(12);
    text.draw(caption, margin, Hpx - margin - footer / 2 + 4, 0.0);
    const double y0 = margin + header;
    for (size_t i = 0; i < mats.size(); ++i) {
      const double x = margin + double(int64_t(i) % cols) * (p.width() + gap);
      const double y = y0 + double(int64_t(i) / cols) * (p.height() + gap);
      draw_panel(cr.get(), text, p, x, y, mats[i], labels, titles[i]);
    }
    // The colour bar beside the first row's matrices.
    draw_colour_bar(cr.get(), text, margin + grid_w + kBarGap, y0 + p.matrix_y(), double(T) * p.cell);
    check(cairo_status(cr.get()), "drawing");
  }
  if (format == ImageFormat::Png) {
    cairo_surface_flush(surface.get());
    check(cairo_surface_write_to_png_stream(surface.get(), append_to_string, &bytes), "PNG");
  } else {
    cairo_surface_finish(surface.get());
    check(cairo_surface_status(surface.get()), "SVG");
  }
  return bytes;
}

void release_drawing_caches() {
  pango_cairo_font_map_set_default(nullptr);  // this thread's font map, and the fonts it holds
  cairo_debug_reset_static_data();
  FcFini();
}

// ---- HTML ----
namespace {

// The page; @TITLE@ (escaped text) and @DATA@ (JSON, with every '<' escaped) are filled in.
constexpr const char* kHtml = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>@TITLE@</title>
<style>
body { font: 14px/1.4 "DejaVu Sans", Verdana, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px; }
h2 { font-size: 15px; margin: 0 0 8px; }
#prompt { color: #555; margin-bottom: 12px; white-space: pre-wrap; max-width: 1100px; }
#thumbs { display: grid; gap: 3px; align-items: center; justify-items: center; width: max-content; }
#thumbs .hdr { font-size: 11px; color: #666; }
canvas.thumb { cursor: pointer; border: 2px solid transparent; image-rendering: pixelated; }
canvas.thumb:hover { border-color: #aaa; }
canvas.thumb.sel { border-color: #e4572e; }
#layout { display: flex; gap: 32px; align-items: flex-start; margin-top: 12px; }
#main { position: sticky; top: 8px; display: flex; gap: 32px; align-items: flex-start; flex-wrap: wrap; }
#big { cursor: crosshair; max-height: calc(100vh - 120px); max-width: 70vw; }
#bar { display: flex; align-items: center; gap: 6px; font-size: 11px; color: #555; margin-top: 6px; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; padding: 3px 7px;
       border-radius: 3px; font-size: 12px; display: none; white-space: pre; z-index: 2; }
#headview text { font-size: 12px; cursor: default; white-space: pre; }
#headview rect.hl { fill: #e4572e; }
.help { color: #666; font-size: 12px; margin: 4px 0 8px; }
</style>
</head>
<body>
<h1>@TITLE@</h1>
<div id="prompt"></div>
<div id="layout">
<div>
  <div class="help">Every layer (rows) and head (columns), counted from 0: click one to enlarge it.</div>
  <div id="thumbs"></div>
</div>
<div id="main">
  <div>
    <h2 id="sel-title"></h2>
    <div class="help">Rows: queries, columns: keys. Each row sums to 1: a softmax over the keys up to its
      query (later keys, grey, are masked). Hover a cell for its weight.</div>
    <canvas id="big"></canvas>
    <div id="bar"><span>0</span><canvas id="barc" width="200" height="12"></canvas><span>1</span></div>
  </div>
  <div>
    <h2>Head view</h2>
    <div class="help">Hover a token on the left to see what it attends to (right), or one on the right to see
      what attends to it: the lines of that token, as thick and dark as its weights (each left token's sum to 1).</div>
    <svg id="headview" xmlns="http://www.w3.org/2000/svg"></svg>
  </div>
</div>
</div>
<div id="tip"></div>
<script type="application/json" id="data">@DATA@</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.tokens.length, L = D.n_layer, H = D.n_head;
const SVGNS = "http://www.w3.org/2000/svg";
// att[l][h][q] holds keys 0..q
const w = (l, h, q, k) => (k <= q ? D.att[l][h][q][k] : 0);
// Token i's label as the PNG and SVG draw it (display_token: spaces as \u2423, control characters as
// symbols), cut at 24 characters.
const label = (i) => {
  const t = Array.from(D.labels[i]);
  return t.length > 24 ? t.slice(0, 23).join("") + "\u2026" : t.join("");
};
const K = [[68,1,84],[71,44,122],[59,81,139],[44,113,142],[33,144,141],[39,173,129],[92,200,99],[170,220,50],[253,231,37]];
function viridis(v) {
  v = Math.min(1, Math.max(0, v || 0)) * (K.length - 1);
  const i = Math.min(Math.floor(v), K.length - 2), f = v - i;
  return K[i].map((c, j) => Math.round(c * (1 - f) + K[i + 1][j] * f));
}
function drawMatrix(canvas, l, h, cell) {
  canvas.width = canvas.height = T * cell;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "rgb(237,237,237)";
  ctx.fillRect(0, 0, T * cell, T * cell);
  for (let q = 0; q < T; q++)
    for (let k = 0; k <= q; k++) {
      const c = viridis(w(l, h, q, k));
      ctx.fillStyle = "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")";
      ctx.fillRect(k * cell, q * cell, cell, cell);
    }
}
document.getElementById("prompt").textContent = "Prompt (" + T + " tokens): " + D.labels.join("\u2009|\u2009");

// thumbnails: a row per layer, a column per head
const thumbs = document.getElementById("thumbs");
thumbs.style.gridTemplateColumns = "auto repeat(" + H + ", auto)";
// smaller for many layers or heads (12 x 12: 46 pixels), so that the grid stays beside the enlarged head
const thumbCell = Math.max(1, Math.floor(64 / T));
const thumbPx = Math.max(24, Math.min(96, T * thumbCell, Math.floor(560 / Math.max(L, H))));
thumbs.appendChild(document.createElement("div"));
for (let h = 0; h < H; h++) {
  const d = document.createElement("div");
  d.className = "hdr";
  d.textContent = "head " + h;
  thumbs.appendChild(d);
}
const thumbOf = [];
for (let l = 0; l < L; l++) {
  const d = document.createElement("div");
  d.className = "hdr";
  d.textContent = "layer " + l;
  thumbs.appendChild(d);
  thumbOf.push([]);
  for (let h = 0; h < H; h++) {
    const c = document.createElement("canvas");
    c.className = "thumb";
    c.title = "layer " + l + ", head " + h;
    c.dataset.layer = l;
    c.dataset.head = h;
    drawMatrix(c, l, h, thumbCell);
    c.style.width = c.style.height = thumbPx + "px";
    c.addEventListener("click", () => select(l, h));
    thumbs.appendChild(c);
    thumbOf[l].push(c);
  }
}
const bar = document.getElementById("barc").getContext("2d");
for (let x = 0; x < 200; x++) {
  const c = viridis(x / 199);
  bar.fillStyle = "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")";
  bar.fillRect(x, 0, 1, 12);
}

// the enlarged head: the matrix at (ox, 0), query labels at its left, key labels below it
const big = document.getElementById("big"), tip = document.getElementById("tip");
const cell = Math.max(8, Math.min(40, Math.floor(640 / T)));
const bigFont = Math.min(13, Math.max(8, Math.floor(cell * 0.8))) + "px \"DejaVu Sans\", Verdana, sans-serif";
let ox = 0;
{
  const ctx = big.getContext("2d");
  ctx.font = bigFont;
  for (let i = 0; i < T; i++) ox = Math.max(ox, Math.ceil(ctx.measureText(label(i)).width));
  ox += 8;
}
function drawBig(l, h) {
  big.width = ox + T * cell + 2;
  big.height = T * cell + ox + 2;
  const ctx = big.getContext("2d");
  ctx.fillStyle = "rgb(237,237,237)";
  ctx.fillRect(ox, 0, T * cell, T * cell);
  for (let q = 0; q < T; q++)
    for (let k = 0; k <= q; k++) {
      const c = viridis(w(l, h, q, k));
      ctx.fillStyle = "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")";
      ctx.fillRect(ox + k * cell, q * cell, cell, cell);
    }
  ctx.fillStyle = "#222";
  ctx.font = bigFont;
  ctx.textBaseline = "middle";
  for (let i = 0; i < T; i++) {
    ctx.textAlign = "right";
    ctx.fillText(label(i), ox - 4, (i + 0.5) * cell);
    ctx.save();
    ctx.translate(ox + (i + 0.5) * cell, T * cell + 4);
    ctx.rotate(Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(label(i), 0, 0);
    ctx.restore();
  }
}
let cur = [0, 0];
// The canvas may be shown smaller than its pixels (fitted to the window): s pixels per CSS pixel.
const bigScale = () => big.width / big.getBoundingClientRect().width;
big.addEventListener("mousemove", (e) => {
  const r = big.getBoundingClientRect(), s = bigScale();
  const k = Math.floor(((e.clientX - r.left) * s - ox) / cell), q = Math.floor(((e.clientY - r.top) * s) / cell);
  if (q < 0 || q >= T || k < 0 || k >= T) return hideTip();
  tip.textContent = "query " + q + " " + JSON.stringify(D.tokens[q]) + "\nkey " + k + " " + JSON.stringify(D.tokens[k]) +
      "\n" + (k <= q ? "weight " + w(cur[0], cur[1], q, k).toFixed(4) : "masked (a later token)");
  tip.style.display = "block";
  tip.style.left = e.clientX + 14 + "px";
  tip.style.top = e.clientY + 14 + "px";
  showLines(q, -1);
});
big.addEventListener("mouseleave", () => { hideTip(); showLines(-1, -1); });
function hideTip() { tip.style.display = "none"; }

// the head view: queries on the left, keys on the right, a line per weight
const hv = document.getElementById("headview");
const rowH = 20, colW = 150, gapW = 160;
hv.setAttribute("width", 2 * colW + gapW);
hv.setAttribute("height", T * rowH + 10);
const lines = [], leftRects = [], rightRects = [];
function el(name, attrs, parent) {
  const e = document.createElementNS(SVGNS, name);
  for (const a in attrs) e.setAttribute(a, attrs[a]);
  parent.appendChild(e);
  return e;
}
const lineLayer = el("g", {}, hv);
for (let i = 0; i < T; i++) {
  const y = 5 + i * rowH;
  leftRects.push(el("rect", { x: 0, y: y, width: colW - 6, height: rowH - 2, fill: "#fff", opacity: 0.8 }, hv));
  rightRects.push(el("rect", { x: colW + gapW + 6, y: y, width: colW - 6, height: rowH - 2, fill: "#fff", opacity: 0.8 }, hv));
  const a = el("text", { x: colW - 10, y: y + rowH / 2 + 4, "text-anchor": "end" }, hv);
  a.textContent = label(i);
  a.addEventListener("mouseenter", () => showLines(i, -1));
  a.addEventListener("mouseleave", () => showLines(-1, -1));
  const b = el("text", { x: colW + gapW + 10, y: y + rowH / 2 + 4 }, hv);
  b.textContent = label(i);
  b.addEventListener("mouseenter", () => showLines(-1, i));
  b.addEventListener("mouseleave", () => showLines(-1, -1));
}
for (let q = 0; q < T; q++)
  for (let k = 0; k <= q; k++) {
    const ln = el("line", { x1: colW - 4, y1: 4 + q * rowH + rowH / 2, x2: colW + gapW + 4, y2: 4 + k * rowH + rowH / 2,
                            stroke: "#3b528b", "stroke-width": 2 }, lineLayer);
    ln.dataset.q = q;
    ln.dataset.k = k;
    lines.push(ln);
  }
// Only the lines of query q (or into key k); -1, -1: none (every line at once is a tangle that hides them
// all). Token boxes shaded by the weight.
function showLines(q, k) {
  const [l, h] = cur;
  for (const ln of lines) {
    const lq = +ln.dataset.q, lk = +ln.dataset.k;
    const on = lq === q || lk === k;
    const v = w(l, h, lq, lk);
    ln.setAttribute("stroke-opacity", on ? Math.min(1, v) : 0);
    ln.setAttribute("stroke-width", on ? 1 + 3 * v : 0);
    ln.style.display = on && v > 0.002 ? "" : "none";
  }
  for (let i = 0; i < T; i++) {
    const c = q >= 0 ? viridis(w(l, h, q, i)) : k >= 0 ? viridis(w(l, h, i, k)) : null;
    (q >= 0 ? rightRects : leftRects)[i].setAttribute("fill", c ? "rgb(" + c + ")" : "#fff");
    (q >= 0 ? leftRects : rightRects)[i].setAttribute("fill", (q >= 0 ? q : k) === i ? "#fdd" : "#fff");
  }
}
// Layers and heads count from 0: the title says the range.
const selTitle = (l, h) => "Layer " + l + " of 0.." + (L - 1) + ", head " + h + " of 0.." + (H - 1) +
    (D.model ? " (" + D.model + ")" : "");
function select(l, h) {
  thumbOf[cur[0]][cur[1]].classList.remove("sel");
  cur = [l, h];
  thumbOf[l][h].classList.add("sel");
  document.getElementById("sel-title").textContent = selTitle(l, h);
  drawBig(l, h);
  showLines(-1, -1);
}
select(0, 0);
document.body.dataset.ready = "1";

// #selftest (scripts/check_attention_html.sh): click, hover and read back, in a headless browser.
if (location.hash === "#selftest") {
  let result = "pass";
  try {
    const l = L - 1, h = H - 1;
    thumbOf[l][h].dispatchEvent(new MouseEvent("click", { bubbles: true }));
    if (document.getElementById("sel-title").textContent !== selTitle(l, h)) throw "click did not select";
    const before = lines.filter((ln) => ln.style.display !== "none").length;
    if (before !== 0) throw "the head view shows " + before + " lines before any hover";
    const r = big.getBoundingClientRect(), s = bigScale();
    big.dispatchEvent(new MouseEvent("mousemove", { clientX: r.left + (ox + cell / 2) / s,
                                                    clientY: r.top + (T - 0.5) * cell / s }));
    const want = "weight " + w(l, h, T - 1, 0).toFixed(4);
    if (tip.style.display !== "block" || tip.textContent.indexOf(want) < 0) throw "tooltip: " + tip.textContent;
    hv.querySelectorAll("text")[0].dispatchEvent(new MouseEvent("mouseenter"));
    const shown = lines.filter((ln) => ln.style.display !== "none").length;
    if (shown !== 1) throw "token 0 shows " + shown + " lines, not 1";
    result += " " + L + "x" + H + " thumbnails " + document.querySelectorAll("canvas.thumb").length;
  } catch (e) {
    result = "fail: " + e;
  }
  document.body.dataset.selftest = result;
}
</script>
</body>
</html>
)HTML";

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '@':
        out += "&#64;";
        break;  // no placeholder of the page can come from the text
      default:
        out += c;
    }
  }
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

std::string attention_html(const AttentionDoc& doc) {
  const AttentionMaps& m = *doc.maps;
  const int64_t T = m.n_tokens;
  // Rows of the lower triangle only (keys 0 .. query), to 5 decimals: the page shows 4.
  json att = json::array();
  for (int64_t l = 0; l < m.n_layer; ++l) {
    json layer = json::array();
    for (int64_t h = 0; h < m.n_head; ++h) {
      json head = json::array();
      const auto p = m.head(l, h);
      for (int64_t q = 0; q < T; ++q) {
        json row = json::array();
        for (int64_t k = 0; k <= q; ++k) row.push_back(std::round(double(p[size_t(q * T + k)]) * 1e5) / 1e5);
        head.push_back(std::move(row));
      }
      layer.push_back(std::move(head));
    }
    att.push_back(std::move(layer));
  }
  std::vector<std::string> labels;
  for (const auto& t : doc.tokens) labels.push_back(display_token(t));
  const json data = {{"tokens", doc.tokens}, {"labels", labels},   {"ids", doc.ids},
                     {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"model", doc.model},
                     {"att", std::move(att)}};
  // '<' only occurs inside JSON strings, where \u003c means the same: no "</script>" or "<!--" can end or
  // change the script element.
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  replace_all(text, "<", "\\u003c");
  replace_all(text, "@", "\\u0040");  // nor can a placeholder of the page
  std::string page = kHtml;
  replace_all(page, "@TITLE@", html_escape("minigpt attention: " + doc.model));
  replace_all(page, "@DATA@", text);
  return page;
}

}  // namespace minigpt::cli
