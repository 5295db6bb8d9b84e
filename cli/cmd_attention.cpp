// minigpt attention: the attention probabilities of every layer and head for a prompt, as JSON, a PNG or
// SVG heatmap, or an HTML page (cli/attention_render.cpp), by the output file's extension.
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "attention_render.h"
#include "command.h"
#include "common.h"
#include "io/io.h"
#include "minigpt/attention.h"
#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

namespace minigpt::cli {
namespace {

struct AttentionCliOptions {
  ModelOptions model;
  std::string prompt;
  std::string out;
  std::optional<int64_t> layer;
  std::string head;  // empty: every head (a grid); "mean"; or a head number
  bool special = false;
};

enum class OutKind { Json, Png, Svg, Html };

OutKind out_kind(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".json") return OutKind::Json;
  if (ext == ".png") return OutKind::Png;
  if (ext == ".svg") return OutKind::Svg;
  if (ext == ".html" || ext == ".htm") return OutKind::Html;
  throw Error(ErrorKind::Argument, "-o " + path + ": unknown output type '" + ext +
                                       "' (the extension picks it: .json, .png, .svg or .html)");
}

HeadChoice parse_head(const std::string& s, int64_t n_head) {
  if (s.empty()) return {HeadChoice::Grid, 0};
  if (s == "mean") return {HeadChoice::Mean, 0};
  int64_t h = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), h);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
    throw UsageError("--head: '" + s + "' is neither a head number nor 'mean'");
  }
  if (h < 0 || h >= n_head) {
    throw Error(ErrorKind::Argument, "--head: " + s + " is outside [0, " + std::to_string(n_head) +
                                         ") (the model has " + std::to_string(n_head) + " heads)");
  }
  return {HeadChoice::One, h};
}

// Characters no installed font has, drawn as boxes: which, and the fonts that would have them.
void warn_missing_glyphs(const ImageNotes& notes) {
  std::string chars;
  int shown = 0;
  for (char32_t c : notes.missing_chars) {
    if (shown++ == 8) {
      chars += " ...";
      break;
    }
    char b[16];
    std::snprintf(b, sizeof b, "%sU+%04X", chars.empty() ? "" : " ", unsigned(c));
    chars += b;
  }
  const size_t n = notes.missing_chars.size();
  std::fprintf(stderr,
               "minigpt: warning: %zu character%s of the heatmap's text (%s) %s no glyph in the installed "
               "fonts and show%s as boxes; scripts/setup.sh installs fonts for most scripts, CJK and emoji "
               "(Debian fonts-noto-core, fonts-noto-cjk, fonts-noto-color-emoji)\n",
               n, n == 1 ? "" : "s", chars.c_str(), n == 1 ? "has" : "have", n == 1 ? "s" : "");
}

int run_attention(const AttentionCliOptions& o) {
  // What can be refused without the model is refused first; nothing is written before everything passed.
  const OutKind kind = out_kind(o.out);
  const bool image = kind == OutKind::Png || kind == OutKind::Svg;
  if (!image && (o.layer || !o.head.empty())) {
    throw UsageError(std::string(o.layer ? "--layer" : "--head") +
                     " applies to .png and .svg output only (.json and .html hold every layer and head)");
  }
  if (image && !o.layer) {
    throw UsageError(
        "-o " + o.out +
        ": a heatmap needs --layer L (and --head H, or --head mean; without --head, every head of "
        "the layer)");
  }
  if (o.prompt.empty()) throw Error(ErrorKind::Argument, "-p/--prompt: the prompt is empty");

  const auto dir = resolve_model_dir(o.model);
  const ModelSource source = ModelSource::open(dir);  // classified, a GGUF parsed, once for every reader
  check_tokenizer_source(o.model.tokenizer, source);
  check_output_not_input("-o", o.out, o.model, dir);
  auto model = Model::load(source, load_options(o.model));
  const Config& c = model->config();
  if (o.layer && (*o.layer < 0 || *o.layer >= c.n_layer)) {
    throw Error(ErrorKind::Argument, "--layer: " + std::to_string(*o.layer) + " is outside [0, " +
                                         std::to_string(c.n_layer) + ") (the model has " +
                                         std::to_string(c.n_layer) + " layers)");
  }
  const HeadChoice heads = parse_head(o.head, c.n_head);
  const Tokenizer tok = load_tokenizer(o.model.tokenizer, source, c.n_vocab);
  std::vector<int32_t> ids;
  try {
    ids = tok.encode_with_specials(o.prompt, o.special);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string("prompt (-p): ") + e.what());
  }
  if (int64_t(ids.size()) > c.n_ctx) {
    throw Error(ErrorKind::Argument, "prompt (-p): " + std::to_string(ids.size()) +
                                         " tokens, more than the model's context of " +
                                         std::to_string(c.n_ctx));
  }

  const AttentionMaps maps = attention_maps(model, ids);
  AttentionDoc doc;
  doc.maps = &maps;
  doc.ids = ids;
  for (int32_t id : ids) doc.tokens.push_back(utf8_sanitize(tok.token_bytes(id)));
  doc.model = std::filesystem::path(dir).lexically_normal().filename().string();
  if (doc.model.empty())
    doc.model = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  doc.prompt = o.prompt;

  std::string bytes, what;
  if (kind == OutKind::Json) {
    bytes = attention_json(doc);
  } else if (kind == OutKind::Html) {
    bytes = attention_html(doc);
  } else {
    struct ReleaseCaches {
      ~ReleaseCaches() { release_drawing_caches(); }
    } release;  // once the surfaces are gone, also when drawing throws
    ImageNotes notes;
    bytes = attention_image(doc, *o.layer, heads, kind == OutKind::Png ? ImageFormat::Png : ImageFormat::Svg,
                            &notes);
    what = " (" + heatmap_title(doc, *o.layer, heads) + ")";
    if (notes.missing_glyphs > 0) warn_missing_glyphs(notes);
  }
  AtomicFile out(o.out, "-o " + o.out);  // whole or not at all; never over a device or a FIFO
  out.write(bytes.data(), bytes.size());
  out.commit();
  // The ranges say that layers and heads count from 0 (--layer 3 is the last of 4).
  std::fprintf(stderr,
               "minigpt: attention of %zu tokens, %lld layers (0..%lld) x %lld heads (0..%lld) -> %s%s\n",
               ids.size(), (long long)c.n_layer, (long long)c.n_layer - 1, (long long)c.n_head,
               (long long)c.n_head - 1, o.out.c_str(), what.c_str());
  return 0;
}

const bool registered_attention = register_command(
    "attention",
    "Attention maps of a prompt: every layer and head, as JSON, a PNG/SVG heatmap or an HTML page",
    [](CLI::App& app) {
      auto o = std::make_shared<AttentionCliOptions>();
      add_model_options(app, o->model, false);
      add_tokenizer_option(app, o->model.tokenizer);
      app.add_option("-p,--prompt", o->prompt, "Prompt text")->required();
      app.add_option("-o,--output", o->out,
                     "Output file; its extension picks the kind: .json (every layer and head), .png or .svg "
                     "(a heatmap of --layer), .html (every layer and head, interactive)")
          ->required();
      app.add_option_function<int64_t>(
          "--layer", [o](const int64_t& l) { o->layer = l; },
          "The layer a .png/.svg heatmap shows, counted from 0: 0 is the first, n_layer - 1 the last");
      app.add_option(
          "--head", o->head,
          "The head a .png/.svg heatmap shows, counted from 0 (0 .. n_head - 1), or 'mean' (the mean "
          "over the layer's heads); default: every head of the layer, as a grid");
      app.add_flag("--special", o->special, "Recognise special tokens such as <|endoftext|> in the prompt");
      return [o] { return run_attention(*o); };
    });

}  // namespace
}  // namespace minigpt::cli
