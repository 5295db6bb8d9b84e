// Reads the tokenizer file formats (tokenizer.json, vocab.json + merges.txt + tokenizer_config.json, a GGUF
// file's tokenizer.ggml.* keys) into a RawTokenizer, refusing what minigpt does not implement; tokenizer.cpp
// builds the tables from it.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "formats/gguf.h"
#include "io/json_parse.h"
#include "minigpt/error.h"
#include "tokenizer/gguf_names.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/tokenizer_pre.h"

namespace minigpt::tokenizer_detail {

using json = nlohmann::json;

// A name or value as JSON spells it (escaped, so that a message stays one line), cut at 60 characters.
std::string json_quote(const json& v) {
  std::string q = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return q.size() > 60 ? q.substr(0, 57) + "..." : q;
}

namespace {

json parse_json(std::string_view text, const std::string& where) {
  try {
    return parse_json_bounded(true, text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, where + ": not valid JSON: " + e.what());
  }
}

// A component's "type" in a message: 'NFKC' (escaped as JSON escapes it, so still one line).
std::string type_name(const std::string& type) {
  std::string q = json_quote(type);
  if (q.size() >= 2 && q.front() == '"' && q.back() == '"') return "'" + q.substr(1, q.size() - 2) + "'";
  return q;
}

void read_vocab_object(const json& v, const std::string& where, RawTokenizer& raw) {
  if (!v.is_object()) throw Error(ErrorKind::Format, where + ": the vocabulary is not a JSON object");
  raw.vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer())
      throw Error(ErrorKind::Format, where + ": the id of token \"" + it.key() + "\" is not an integer");
    raw.vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
}

void split_merge_line(std::string_view line, size_t line_no, const std::string& where, RawTokenizer& raw) {
  size_t sp = line.find(' ');
  if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size() ||
      line.find(' ', sp + 1) != std::string_view::npos)
    throw Error(ErrorKind::Format, where + ": merge " + std::to_string(line_no) +
                                       " is not two symbols separated by a space: \"" + std::string(line) +
                                       "\"");
  raw.merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  raw.merge_lines.push_back(line_no);
}

const json& type_of(const json& component, const std::string& where, const char* what) {
  if (!component.is_object() || !component.contains("type") || !component["type"].is_string())
    throw Error(ErrorKind::Format, where + ": " + what + " is not an object with a string \"type\"");
  return component["type"];
}

// The normalizer: none, NFC, SentencePiece's Prepend("▁") and Replace(" ", "▁") (Llama's), or a Sequence of
// these.
void read_normalizer(const json& n, const std::string& where, RawTokenizer& raw, int depth = 0) {
  if (n.is_null()) return;
  const std::string& type = type_of(n, where, "normalizer").get_ref<const std::string&>();
  if (type == "NFC") {
    raw.nfc = true;
    return;
  }
  if (type == "Prepend") {
    if (!n.contains("prepend") || n["prepend"] != std::string(kSpaceSymbol))
      throw Error(ErrorKind::Unsupported,
                  where + ": normalizer Prepend of anything but \"\u2581\" (U+2581) is not supported");
    raw.prefix = Prefix::every_section;
    return;
  }
  if (type == "Replace") {
    const bool space_to_symbol = n.contains("pattern") && n["pattern"].is_object() &&
                                 n["pattern"].contains("String") && n["pattern"]["String"] == " " &&
                                 n.contains("content") && n["content"] == std::string(kSpaceSymbol);
    if (!space_to_symbol)
      throw Error(ErrorKind::Unsupported,
                  where + ": normalizer Replace of anything but \" \" by \"\u2581\" is not supported");
    raw.escape_spaces = true;
    return;
  }
  if (type == "Sequence") {
    if (depth >= 16)
      throw Error(ErrorKind::Format, where + ": normalizer: Sequences nested more than 16 deep");
    if (!n.contains("normalizers") || !n["normalizers"].is_array())
      throw Error(ErrorKind::Format, where + ": normalizer Sequence: \"normalizers\" is not a list");
    for (const json& part : n["normalizers"]) read_normalizer(part, where, raw, depth + 1);
    return;
  }
  throw Error(ErrorKind::Unsupported,
              where + ": normalizer " + type_name(type) +
                  " is not supported (NFC, Prepend, Replace and a Sequence of them are)");
}

// A regex as a literal string matches that string: its metacharacters escaped.
std::string quote_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// The pre_tokenizer: a Sequence of Split (behavior Isolated), Digits, Punctuation and ByteLevel, or
// Metaspace (SentencePiece). After ByteLevel a split sees byte symbols ('\u00b2' stands for byte 0xB2), so
// only Digits and a pattern of ASCII digits (falcon's) may follow it.
void read_pre_tokenizer(const json& p, const std::string& where, RawTokenizer& raw, int depth = 0) {
  auto is_null_or = [&](const char* key, const json& ok) {
    return !p.contains(key) || p[key].is_null() || p[key] == ok;
  };
  if (p.is_null()) return;
  const std::string& type = type_of(p, where, "pre_tokenizer").get_ref<const std::string&>();
  if (type == "ByteLevel") {
    if (!is_null_or("add_prefix_space", false))
      throw Error(ErrorKind::Unsupported,
                  where + ": pre_tokenizer ByteLevel with add_prefix_space is not supported");
    if (++raw.byte_level > 1)
      throw Error(ErrorKind::Unsupported,
                  where + ": pre_tokenizer: more than one ByteLevel is not supported");
    if (is_null_or("use_regex", true)) raw.splits.push_back(gpt2_step());
    return;
  }
  if (type == "Digits") {
    bool individual = false;  // tokenizers' default
    if (p.contains("individual_digits") && !p["individual_digits"].is_null()) {
      if (!p["individual_digits"].is_boolean())
        throw Error(ErrorKind::Format,
                    where + ": pre_tokenizer Digits: individual_digits is not true or false");
      individual = p["individual_digits"].get<bool>();
    }
    raw.splits.push_back(raw.byte_level > 0
                             ? byte_digits_step(individual)
                             : digits_step(individual ? Digits::individual : Digits::contiguous));
    return;
  }
  if (type == "Split") {
    const std::string what = where + ": pre_tokenizer Split: ";
    if (!is_null_or("behavior", "Isolated") || !is_null_or("invert", false))
      throw Error(ErrorKind::Unsupported, what +
                                              "only behavior \"Isolated\" without invert is supported, not " +
                                              json_quote(p.value("behavior", json())));
    const json pat = p.value("pattern", json());
    std::string regex;
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      regex = pat["Regex"].get<std::string>();
    } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      regex = quote_regex(pat["String"].get<std::string>());
    } else {
      throw Error(ErrorKind::Format, what + "\"pattern\" is neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    if (regex.empty()) throw Error(ErrorKind::Format, what + "the pattern is empty");
    if (raw.byte_level > 0) {
      if (regex.find_first_not_of("0123456789[]{},-+*?") != std::string::npos)
        throw Error(
            ErrorKind::Unsupported,
            what + "after ByteLevel only a pattern of ASCII digits is supported, not " + json_quote(regex));
      raw.splits.push_back({regex, /*utf=*/false});
    } else {
      raw.splits.push_back({translate_pattern(regex)});
    }
    return;
  }
  if (type == "Punctuation") {
    if (raw.byte_level > 0)
      throw Error(ErrorKind::Unsupported,
                  where + ": pre_tokenizer Punctuation after ByteLevel is not supported");
    if (!is_null_or("behavior", "Isolated") && !is_null_or("behavior", "Contiguous"))
      throw Error(
          ErrorKind::Unsupported,
          where + ": pre_tokenizer Punctuation: only behavior \"Isolated\" or \"Contiguous\" is supported");
    raw.splits.push_back(punctuation_step(p.contains("behavior") && p["behavior"] == "Contiguous"));
    return;
  }
  if (type == "Metaspace") {
    const std::string what = where + ": pre_tokenizer Metaspace: ";
    if (!is_null_or("replacement", std::string(kSpaceSymbol)))
      throw Error(ErrorKind::Unsupported,
                  what + "a replacement other than \"\u2581\" (U+2581) is not supported");
    std::string scheme = "always";
    if (p.contains("prepend_scheme") && p["prepend_scheme"].is_string()) {
      scheme = p["prepend_scheme"].get<std::string>();
    } else if (p.contains("add_prefix_space") && p["add_prefix_space"].is_boolean()) {
      scheme = p["add_prefix_space"].get<bool>() ? "always" : "never";
    }
    if (scheme == "always") {
      raw.prefix = Prefix::every_section_unless_space;
    } else if (scheme == "first") {
      raw.prefix = Prefix::first_section_unless_space;
    } else if (scheme == "never") {
      raw.prefix = Prefix::none;
    } else {
      throw Error(ErrorKind::Format,
                  what + "prepend_scheme " + json_quote(scheme) + " is not always, first or never");
    }
    raw.escape_spaces = true;
    raw.metaspace = true;
    raw.split_on_space = !p.contains("split") || !p["split"].is_boolean() || p["split"].get<bool>();
    return;
  }
  if (type == "Sequence") {
    if (depth >= 16)
      throw Error(ErrorKind::Format, where + ": pre_tokenizer: Sequences nested more than 16 deep");
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      throw Error(ErrorKind::Format, where + ": pre_tokenizer Sequence: \"pretokenizers\" is not a list");
    for (const json& part : p["pretokenizers"]) read_pre_tokenizer(part, where, raw, depth + 1);
    return;
  }
  throw Error(
      ErrorKind::Unsupported,
      where + ": pre_tokenizer " + type_name(type) +
          " is not supported (ByteLevel, Split, Digits, Punctuation, Metaspace and a Sequence of them are)");
}

// The decoder of a SentencePiece BPE: whether it drops the dummy prefix's space (Strip(" ", 1, 0) after
// Replace / ByteFallback / Fuse, as Llama's; or Metaspace with a prepend_scheme other than "never").
void read_spm_decoder(const json& d, const std::string& where, RawTokenizer& raw, int depth = 0) {
  if (d.is_null()) return;
  const std::string& type = type_of(d, where, "decoder").get_ref<const std::string&>();
  if (type == "Sequence") {
    if (depth >= 16) throw Error(ErrorKind::Format, where + ": decoder: Sequences nested more than 16 deep");
    if (!d.contains("decoders") || !d["decoders"].is_array())
      throw Error(ErrorKind::Format, where + ": decoder Sequence: \"decoders\" is not a list");
    for (const json& part : d["decoders"]) read_spm_decoder(part, where, raw, depth + 1);
    return;
  }
  if (type == "Strip") {
    const int start = d.value("start", 0), stop = d.value("stop", 0);
    if (d.value("content", std::string(" ")) != " " || start > 1 || stop != 0)
      throw Error(ErrorKind::Unsupported,
                  where + ": decoder Strip of anything but one leading space is not supported");
    raw.strip_prefix_on_decode = start == 1;
    return;
  }
  if (type == "Metaspace") {
    raw.strip_prefix_on_decode =
        d.value("prepend_scheme", std::string("always")) != "never" && d.value("add_prefix_space", true);
    return;
  }
  // Replace("▁", " "), ByteFallback and Fuse are what decode() does for every SentencePiece BPE.
  if (type == "Replace" || type == "ByteFallback" || type == "Fuse") return;
  throw Error(ErrorKind::Unsupported,
              where + ": decoder " + type_name(type) +
                  " is not supported for a SentencePiece BPE (Replace, ByteFallback, Fuse, "
                  "Strip, Metaspace and a Sequence of them are)");
}

// The BPE options that would silently give other ids if ignored: refused unless unset. byte_fallback,
// ignore_merges and fuse_unk are read by read_tokenizer_json.
void check_bpe_options(const json& model, const std::string& where) {
  static const std::pair<const char*, json> kUnset[] = {
      {"dropout", 0.0}, {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}};
  for (const auto& [key, unset] : kUnset) {
    if (model.contains(key) && !model[key].is_null() && model[key] != unset)
      throw Error(ErrorKind::Unsupported,
                  where + ": model BPE with " + key + " " + json_quote(model[key]) + " is not supported");
  }
  for (const char* key : {"byte_fallback", "ignore_merges", "fuse_unk"})
    if (model.contains(key) && !model[key].is_null() && !model[key].is_boolean())
      throw Error(ErrorKind::Format, where + ": model BPE: " + key + " is not true or false");
}

// A TemplateProcessing's "single" template: {"SpecialToken": {"id": NAME, "type_id": n}} pieces around
// exactly one {"Sequence": {"id": "A", "type_id": n}}, each NAME expanded to special_tokens[NAME].ids.
void read_template(const json& pp, const std::string& where, RawTokenizer& raw) {
  const std::string what = where + ": post_processor TemplateProcessing: ";
  auto bad = [&](const std::string& msg) { return Error(ErrorKind::Format, what + msg); };
  if (!pp.contains("single") || !pp["single"].is_array()) throw bad("\"single\" is not a list of pieces");
  static const json kNoSpecials = json::object();
  const json& specials = pp.contains("special_tokens") ? pp["special_tokens"] : kNoSpecials;
  if (!specials.is_object()) throw bad("\"special_tokens\" is not an object");
  size_t n_a = 0;
  size_t k = 0;
  for (const json& piece : pp["single"]) {
    const std::string at = "piece " + std::to_string(k++) + " of the single template";
    const bool is_seq = piece.is_object() && piece.size() == 1 && piece.contains("Sequence");
    const bool is_special = piece.is_object() && piece.size() == 1 && piece.contains("SpecialToken");
    if (!is_seq && !is_special) throw bad(at + " is neither {\"SpecialToken\": ...} nor {\"Sequence\": ...}");
    const auto only = piece.begin();  // the object's one member
    const json& body = only.value();
    if (!body.is_object() || !body.contains("id") || !body["id"].is_string() || !body.contains("type_id") ||
        !body["type_id"].is_number_unsigned())
      throw bad(at + " lacks a string \"id\" or a non-negative integer \"type_id\"");
    const std::string& id = body["id"].get_ref<const std::string&>();
    if (is_seq) {
      if (id != "A")
        throw bad(at + " is sequence " + json_quote(id) +
                  ": a single text is sequence \"A\" (\"B\" is for pairs)");
      ++n_a;
      continue;
    }
    if (!specials.contains(id))
      throw bad(at + " is special token " + json_quote(id) + ", which special_tokens lacks");
    const json& entry = specials[id];
    if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array())
      throw bad("special_tokens[" + json_quote(id) + "] has no \"ids\" list");
    for (const json& v : entry["ids"]) {
      if (!v.is_number_integer())
        throw bad("special_tokens[" + json_quote(id) + "].ids holds " + json_quote(v) + ", not an integer");
      (n_a == 0 ? raw.template_prefix : raw.template_suffix).emplace_back(id, v.get<int64_t>());
    }
  }
  if (n_a != 1) throw bad("the single template has " + std::to_string(n_a) + " sequences A, not exactly one");
  raw.has_template = true;
}

// What `tokenizers` does to the ids with add_special_tokens=True. ByteLevel only trims offsets;
// TemplateProcessing adds special tokens around the text; Sequence applies its processors in order.
void read_post_processor(const json& pp, const std::string& where, RawTokenizer& raw, int depth = 0) {
  if (pp.is_null()) return;
  if (!pp.is_object() || !pp.contains("type") || !pp["type"].is_string())
    throw Error(ErrorKind::Format, where + ": post_processor is not an object with a string \"type\"");
  const std::string& type = pp["type"].get_ref<const std::string&>();
  if (type == "ByteLevel") return;
  if (type == "TemplateProcessing") {
    // tokenizers hands a second template the pieces of the first as separate sequences (so it
    // applies its pair template, or panics): nothing a model relies on, so refused, not imitated.
    if (raw.has_template)
      throw Error(
          ErrorKind::Unsupported,
          where + ": post_processor: a Sequence of more than one TemplateProcessing is not supported");
    read_template(pp, where, raw);
    return;
  }
  if (type == "Sequence") {
    if (depth >= 16)
      throw Error(ErrorKind::Format, where + ": post_processor: Sequences nested more than 16 deep");
    if (!pp.contains("processors") || !pp["processors"].is_array())
      throw Error(ErrorKind::Format, where + ": post_processor Sequence: \"processors\" is not a list");
    for (const json& p : pp["processors"]) read_post_processor(p, where, raw, depth + 1);
    return;
  }
  throw Error(ErrorKind::Unsupported,
              where + ": post_processor " + type_name(type) +
                  " is not supported (ByteLevel, TemplateProcessing and a Sequence of them are)");
}

// An added token's flags from its JSON object (tokenizer.json's added_tokens, tokenizer_config.json's
// added_tokens_decoder); `a` has a string "content".
tokenizer_detail::RawAdded read_added_token(const json& a, int64_t id, const std::string& where) {
  tokenizer_detail::RawAdded r{a["content"].get<std::string>(), id};
  // tokenizers requires every flag; a file that leaves one out gets minigpt's earlier behaviour (a
  // special token matched exactly where its text occurs).
  auto flag = [&](const char* key, bool unset) {
    if (!a.contains(key) || a[key].is_null()) return unset;
    if (!a[key].is_boolean())
      throw Error(ErrorKind::Format, where + ": added token " + json_quote(r.content) + ": \"" + key +
                                         "\" is not true or false");
    return a[key].get<bool>();
  };
  r.special = flag("special", true);
  r.normalized = flag("normalized", false);
  r.lstrip = flag("lstrip", false);
  r.rstrip = flag("rstrip", false);
  if (flag("single_word", false))
    throw Error(ErrorKind::Unsupported,
                where + ": added token " + json_quote(r.content) + ": single_word is not supported");
  return r;
}

// The ids the reference gives added tokens, whatever ids the file wrote: tokenizers (AddedVocabulary's
// add_tokens, and so transformers over a tokenizer.json) takes them in order, and a text that the vocabulary
// or an earlier added token has keeps that id; any other gets the vocabulary's size, or one past the largest
// id given so far once that is beyond it. A file that tokenizers or transformers wrote agrees; a hand-edited
// one may not (an added "hello" at 60000 is the vocabulary's 31373 there, and two texts at one id get two
// ids).
void assign_added_ids(RawTokenizer& raw) {
  std::unordered_map<std::string_view, int64_t> vocab, given;
  vocab.reserve(raw.vocab.size());
  for (const auto& [sym, id] : raw.vocab) vocab.emplace(sym, id);
  const int64_t n = int64_t(raw.vocab.size());
  int64_t max_given = -1;
  for (auto& a : raw.added) {
    if (const auto g = given.find(a.content); g != given.end()) {
      a.id = g->second;
    } else if (const auto v = vocab.find(a.content); v != vocab.end()) {
      a.id = v->second;
    } else {
      a.id = max_given >= n ? max_given + 1 : n;
    }
    given.emplace(a.content, a.id);
    max_given = std::max(max_given, a.id);
  }
}

}  // namespace

RawTokenizer read_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                               const std::string& vocab_where, const std::string& merges_where) {
  RawTokenizer raw;
  raw.splits.push_back(gpt2_step());  // GPT-2's ByteLevel, which these files leave implicit
  raw.byte_level = 1;
  read_vocab_object(parse_json(vocab_json, vocab_where), vocab_where, raw);
  std::string_view rest(merges_txt);
  size_t line_no = 0;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    split_merge_line(line, line_no, merges_where, raw);
  }
  // GPT-2's files carry no list of special tokens; <|endoftext|> is the one GPT-2 uses.
  for (auto& [sym, id] : raw.vocab)
    if (sym == "<|endoftext|>") raw.added.push_back({sym, id});
  return raw;
}

RawTokenizer read_tokenizer_json(std::string_view text, const std::string& where) {
  RawTokenizer raw;
  json j = parse_json(text, where);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw Error(ErrorKind::Format, where + ": no \"model\" object");
  const json& model = j["model"];
  // type_of: a "type" that is not a string is a format error (json's value() would throw a type_error:
  // tests/fuzz/regressions/tokenizer_model_type_null.bin).
  const std::string& model_type = type_of(model, where, "model").get_ref<const std::string&>();
  if (model_type != "BPE")
    throw Error(ErrorKind::Unsupported, where + ": model type \"" + model_type + "\" is not BPE");
  check_bpe_options(model, where);
  auto model_flag = [&](const char* key) {
    return model.contains(key) && model[key].is_boolean() && model[key].get<bool>();
  };
  raw.ignore_merges = model_flag("ignore_merges");
  raw.byte_fallback = model_flag("byte_fallback");
  raw.fuse_unk = model_flag("fuse_unk");
  read_normalizer(j.value("normalizer", json()), where, raw);
  const json pre = j.value("pre_tokenizer", json());
  const json merges_json = model.value("merges", json::array());
  const json decoder = j.value("decoder", json());
  if (pre.is_null() && !raw.escape_spaces && merges_json.is_array() && merges_json.empty() &&
      decoder.is_object() && decoder.contains("type") && decoder["type"] == "Fuse") {
    // Character-level: tokenizers splits the text into characters and looks each up; Fuse joins them back.
    raw.char_level = true;
    if (model.contains("unk_token") && !model["unk_token"].is_null())
      throw Error(ErrorKind::Unsupported,
                  where +
                      ": a character-level BPE with an unk_token is not supported (unknown characters are "
                      "refused instead)");
  } else {
    read_pre_tokenizer(pre, where, raw);
    if (raw.byte_level > 0) {
      if (raw.escape_spaces || raw.prefix != Prefix::none)
        throw Error(
            ErrorKind::Unsupported,
            where + ": ByteLevel with a SentencePiece space (Metaspace, Prepend, Replace) is not supported");
      if (raw.byte_fallback)
        throw Error(ErrorKind::Unsupported,
                    where + ": model BPE with byte_fallback and ByteLevel is not supported");
    } else if (raw.escape_spaces) {
      // SentencePiece BPE: characters are the symbols, a space is U+2581.
      raw.sentencepiece = true;
      if (raw.metaspace && !raw.splits.empty())
        throw Error(
            ErrorKind::Unsupported,
            where + ": pre_tokenizer: splits beside Metaspace are not supported (Metaspace alone is)");
      if (!raw.splits.empty())
        throw Error(ErrorKind::Unsupported,
                    where + ": pre_tokenizer: splits of a SentencePiece BPE are not supported");
      read_spm_decoder(decoder, where, raw);
    } else {
      throw Error(
          ErrorKind::Unsupported,
          where +
              ": neither ByteLevel nor a SentencePiece space (Metaspace, or a Replace normalizer): only "
              "byte-level BPE, SentencePiece BPE and character-level BPE (no pre_tokenizer, no merges, the "
              "Fuse decoder) are supported");
    }
  }
  if (j.contains("post_processor")) read_post_processor(j["post_processor"], where, raw);
  if (!model.contains("vocab")) throw Error(ErrorKind::Format, where + ": model has no \"vocab\"");
  read_vocab_object(model["vocab"], where, raw);
  if (raw.sentencepiece && model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string& unk = model["unk_token"].get_ref<const std::string&>();
    for (const auto& [sym, id] : raw.vocab)
      if (sym == unk) raw.unk_id = id;
    if (raw.unk_id < 0)
      throw Error(ErrorKind::Format,
                  where + ": model.unk_token " + json_quote(unk) + " is not in the vocabulary");
  }
  const json& merges = model.value("merges", json::array());
  if (!merges.is_array()) throw Error(ErrorKind::Format, where + ": model.merges is not an array");
  size_t rank = 0;
  for (const json& m : merges) {
    ++rank;
    // Older files spell a merge "left right", newer ones ["left", "right"].
    if (m.is_string()) {
      split_merge_line(m.get_ref<const std::string&>(), rank, where, raw);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      raw.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      raw.merge_lines.push_back(rank);
    } else {
      throw Error(ErrorKind::Format,
                  where + ": merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  const json& added = j.value("added_tokens", json::array());
  if (!added.is_array()) throw Error(ErrorKind::Format, where + ": added_tokens is not an array");
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string())
      throw Error(ErrorKind::Format,
                  where + ": an added token lacks an integer \"id\" or a string \"content\"");
    // tokenizers reads the id as a u32 and then gives the token its own (assign_added_ids).
    const int64_t id =
        a["id"].is_number_unsigned() && a["id"].get<uint64_t>() <= UINT32_MAX ? a["id"].get<int64_t>() : -1;
    if (id < 0)
      throw Error(ErrorKind::Format, where + ": added token " + json_quote(a["content"].get<std::string>()) +
                                         ": id " + a["id"].dump() + " is not in [0, 2^32)");
    raw.added.push_back(read_added_token(a, id, where));
  }
  assign_added_ids(raw);
  return raw;
}

// tokenizer_config.json beside vocab.json + merges.txt, as transformers' GPT2Tokenizer reads it: its
// added_tokens_decoder ({"ID": {"content", "special", "lstrip", "rstrip", "normalized", "single_word"}})
// replaces the <|endoftext|> default; add_prefix_space true is refused (as in tokenizer.json's ByteLevel).
// It was ignored: "[USER]" added as 50257 was split into 3 tokens and id 50257 could not be decoded.
void read_tokenizer_config(std::string_view text, const std::string& where, RawTokenizer& raw) {
  const json j = parse_json(text, where);
  if (!j.is_object()) throw Error(ErrorKind::Format, where + ": not a JSON object");
  if (j.contains("add_prefix_space") && !j["add_prefix_space"].is_null()) {
    if (!j["add_prefix_space"].is_boolean())
      throw Error(ErrorKind::Format, where + ": add_prefix_space is not true or false");
    if (j["add_prefix_space"].get<bool>())
      throw Error(ErrorKind::Unsupported, where + ": add_prefix_space true is not supported");
  }
  if (!j.contains("added_tokens_decoder") || j["added_tokens_decoder"].is_null()) return;
  const json& dec = j["added_tokens_decoder"];
  if (!dec.is_object()) throw Error(ErrorKind::Format, where + ": added_tokens_decoder is not an object");
  raw.added.clear();
  for (const auto& [key, a] : dec.items()) {
    const std::string at = where + ": added_tokens_decoder[" + json_quote(key) + "]";
    const bool decimal =
        !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
    if (!decimal) throw Error(ErrorKind::Format, at + ": the key is not a token id");
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string())
      throw Error(ErrorKind::Format, at + ": no string \"content\"");
    raw.added.push_back(read_added_token(a, std::stoll(key), at));
  }
  // transformers adds them in the order of their ids, then gives each the id tokenizers would.
  std::stable_sort(
      raw.added.begin(), raw.added.end(),
      [](const tokenizer_detail::RawAdded& x, const tokenizer_detail::RawAdded& y) { return x.id < y.id; });
  assign_added_ids(raw);
}

// llama.cpp's tokenizer.ggml.* keys (convert_hf_to_gguf.py): the tokens in id order, their types (1 normal,
// 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), and either the merges as "left right" lines by
// rank (model "gpt2": byte-level BPE, its pre-tokenizer named by tokenizer.ggml.pre) or the scores (model
// "llama": SentencePiece BPE); bos/eos ids and whether they are added.
RawTokenizer read_gguf_tokenizer(const GgufFile& f) {
  const std::string& where = f.path();
  const auto model = f.get_string(gguf_tokenizer::kModelKey);
  if (!model) throw Error(ErrorKind::Format, where + ": no tokenizer in the file (tokenizer.ggml.model)");
  const bool spm = *model == gguf_tokenizer::kSentencePiece;
  if (*model != gguf_tokenizer::kByteLevelBpe && !spm) {
    throw Error(ErrorKind::Unsupported, where + ": tokenizer.ggml.model '" + *model + "' is not supported (" +
                                            gguf_tokenizer::kByteLevelBpe + ": byte-level BPE, " +
                                            gguf_tokenizer::kSentencePiece + ": SentencePiece BPE)");
  }
  RawTokenizer raw;
  if (!spm) {
    const auto pre_name = f.get_string(gguf_tokenizer::kPreKey).value_or(gguf_tokenizer::kGpt2Pre);
    const TokenizerPre* pre = find_tokenizer_pre(pre_name);
    if (pre == nullptr)
      throw Error(ErrorKind::Unsupported, where + ": tokenizer.ggml.pre '" + pre_name +
                                              "' is not supported (" + tokenizer_pre_names() + " are)");
    for (std::string_view sp : pre->splits) raw.splits.push_back({translate_pattern(sp)});
    for (std::string_view sp : pre->byte_splits)
      raw.splits.push_back(sp == "digits+" ? byte_digits_step(false) : SplitStep{std::string(sp), false});
    raw.nfc = pre->nfc;
    raw.ignore_merges = pre->ignore_merges;
    raw.byte_level = 1;
  }
  static const StringTable kNone;
  auto strings = [&](const char* key, bool required) -> const StringTable& {
    const GgufValue* v = f.find_value(key);
    if (v == nullptr) {
      if (required) throw Error(ErrorKind::Format, where + ": missing metadata '" + key + "'");
      return kNone;
    }
    if (v->type != GgufType::ARRAY || v->elem != GgufType::STRING)
      throw Error(ErrorKind::Format, where + ": metadata '" + key + "' is not an array of strings");
    return v->strings;
  };
  const auto& tokens = strings("tokenizer.ggml.tokens", true);
  raw.vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) raw.vocab.emplace_back(std::string(tokens[i]), int64_t(i));
  if (!spm) {
    const auto& merges = strings("tokenizer.ggml.merges", false);
    for (size_t i = 0; i < merges.size(); ++i)
      split_merge_line(merges[i], i + 1, where + ": tokenizer.ggml.merges", raw);
  }
  const GgufValue* types = f.find_value("tokenizer.ggml.token_type");
  if (types != nullptr) {
    if (types->type != GgufType::ARRAY || gguf_array_kind(types->elem) != GgufArrayKind::ints ||
        types->ints.size() != tokens.size())
      throw Error(ErrorKind::Format, where + ": tokenizer.ggml.token_type is not one integer per token");
    raw.types.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t t = types->ints[i];
      if (t < 1 || t > 6)
        throw Error(ErrorKind::Format, where + ": tokenizer.ggml.token_type of token " + std::to_string(i) +
                                           " is " + std::to_string(t) + ", not 1..6");
      raw.types.push_back(static_cast<PieceType>(t));
    }
  }
  if (spm) {
    const GgufValue* scores = f.find_value("tokenizer.ggml.scores");
    if (scores == nullptr || scores->type != GgufType::ARRAY ||
        gguf_array_kind(scores->elem) != GgufArrayKind::floats || scores->floats.size() != tokens.size())
      throw Error(ErrorKind::Format, where + ": tokenizer.ggml.scores is not one number per token");
    raw.scores.assign(scores->floats.begin(), scores->floats.end());
    raw.sentencepiece = true;
    raw.escape_spaces = true;
    // llama.cpp puts the dummy prefix before the text and after every special token; only a file that says
    // tokenizer.ggml.add_space_prefix = false has none.
    const GgufValue* add_space = f.find_value("tokenizer.ggml.add_space_prefix");
    const bool prefix = add_space == nullptr || add_space->type != GgufType::BOOL || add_space->i != 0;
    raw.prefix = prefix ? Prefix::every_section : Prefix::none;
    raw.strip_prefix_on_decode = prefix;
    if (const auto unk = f.get_int("tokenizer.ggml.unknown_token_id");
        unk && *unk >= 0 && *unk < int64_t(tokens.size()))
      raw.unk_id = *unk;
    for (PieceType t : raw.types) raw.byte_fallback |= t == PieceType::byte;
  }
  if (!raw.types.empty()) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // A control (or the unknown) token is special; a user-defined one is always recognised, as llama.cpp
      // does (following tokenizers' non-special added tokens).
      const PieceType t = raw.types[i];
      if (t == PieceType::control || t == PieceType::user_defined || (spm && t == PieceType::unknown))
        raw.added.push_back({std::string(tokens[i]), int64_t(i), /*special=*/t != PieceType::user_defined});
    }
  } else {
    for (auto& [sym, id] : raw.vocab)
      if (sym == "<|endoftext|>") raw.added.push_back({sym, id});
  }
  auto add_special = [&](const char* flag, const char* id_key, auto& side) {
    const GgufValue* add = f.find_value(flag);
    if (add == nullptr || add->type != GgufType::BOOL || add->i == 0) return;
    const auto id = f.get_int(id_key);
    if (!id || *id < 0 || *id >= int64_t(tokens.size()))
      throw Error(ErrorKind::Format, where + ": " + flag + " without a valid " + id_key);
    side.emplace_back(std::string(tokens[size_t(*id)]), *id);
    raw.has_template = true;
  };
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &raw.bos_id},
                         std::pair{"tokenizer.ggml.eos_token_id", &raw.eos_id}})
    if (const auto v = f.get_int(key); v && *v >= 0 && *v < int64_t(tokens.size())) *id = *v;
  add_special("tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id", raw.template_prefix);
  add_special("tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id", raw.template_suffix);
  return raw;
}

}  // namespace minigpt::tokenizer_detail
