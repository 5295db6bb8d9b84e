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

// The normalizer: none, NFC, or a Sequence of these (NFC after NFC changes nothing).
void read_normalizer(const json& n, const std::string& where, RawTokenizer& raw, int depth = 0) {
  if (n.is_null()) return;
  const std::string& type = type_of(n, where, "normalizer").get_ref<const std::string&>();
  if (type == "NFC") {
    raw.nfc = true;
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
              where + ": normalizer " + type_name(type) + " is not supported (NFC and a Sequence of it are)");
}

// The pre_tokenizer: ByteLevel, alone or last in a Sequence after Digits (StarCoder's). Digits after
// ByteLevel would split the byte symbols of numeric characters ('\u00b2' stands for byte 0xB2): refused.
void read_pre_tokenizer(const json& p, const std::string& where, RawTokenizer& raw, int depth = 0) {
  auto is_null_or = [&](const char* key, const json& ok) {
    return !p.contains(key) || p[key].is_null() || p[key] == ok;
  };
  if (p.is_null())
    throw Error(ErrorKind::Unsupported,
                where +
                    ": no pre_tokenizer: only byte-level BPE (ByteLevel) is supported, and character-level "
                    "BPE (no pre_tokenizer, no merges, the Fuse decoder)");
  const std::string& type = type_of(p, where, "pre_tokenizer").get_ref<const std::string&>();
  if (type == "ByteLevel") {
    if (!is_null_or("add_prefix_space", false) || !is_null_or("use_regex", true))
      throw Error(
          ErrorKind::Unsupported,
          where + ": pre_tokenizer ByteLevel with add_prefix_space or without use_regex is not supported");
    if (++raw.byte_level > 1)
      throw Error(ErrorKind::Unsupported,
                  where + ": pre_tokenizer: more than one ByteLevel is not supported");
    return;
  }
  if (type == "Digits") {
    if (raw.byte_level > 0)
      throw Error(
          ErrorKind::Unsupported,
          where + ": pre_tokenizer Digits after ByteLevel is not supported (before it, as StarCoder's, is)");
    bool individual = false;  // tokenizers' default
    if (p.contains("individual_digits") && !p["individual_digits"].is_null()) {
      if (!p["individual_digits"].is_boolean())
        throw Error(ErrorKind::Format,
                    where + ": pre_tokenizer Digits: individual_digits is not true or false");
      individual = p["individual_digits"].get<bool>();
    }
    // Individual after contiguous splits the runs again; contiguous after individual changes nothing.
    if (individual || raw.digits == Digits::individual)
      raw.digits = Digits::individual;
    else
      raw.digits = Digits::contiguous;
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
  throw Error(ErrorKind::Unsupported,
              where + ": pre_tokenizer " + type_name(type) +
                  " is not supported (ByteLevel, after Digits in a Sequence or alone, is)");
}

// The BPE options GPT-2, GPT-NeoX, OPT and StarCoder leave unset; anything else would silently give
// different ids.
void check_bpe_options(const json& model, const std::string& where) {
  static const std::pair<const char*, json> kUnset[] = {{"dropout", 0.0},
                                                        {"continuing_subword_prefix", ""},
                                                        {"end_of_word_suffix", ""},
                                                        {"byte_fallback", false},
                                                        {"ignore_merges", false}};
  for (const auto& [key, unset] : kUnset) {
    if (model.contains(key) && !model[key].is_null() && model[key] != unset)
      throw Error(ErrorKind::Unsupported,
                  where + ": model BPE with " + key + " " + json_quote(model[key]) + " is not supported");
  }
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
  // type_of: a "type" that is not a string is a format error (json's value() threw a type_error here: a
  // crash the fuzz target found).
  const std::string& model_type = type_of(model, where, "model").get_ref<const std::string&>();
  if (model_type != "BPE")
    throw Error(ErrorKind::Unsupported, where + ": model type \"" + model_type + "\" is not BPE");
  check_bpe_options(model, where);
  read_normalizer(j.value("normalizer", json()), where, raw);
  const json pre = j.value("pre_tokenizer", json());
  const json merges_json = model.value("merges", json::array());
  const json decoder = j.value("decoder", json());
  if (pre.is_null() && merges_json.is_array() && merges_json.empty() && decoder.is_object() &&
      decoder.contains("type") && decoder["type"] == "Fuse") {
    // Character-level: tokenizers splits the text into characters and looks each up; Fuse joins them back.
    raw.char_level = true;
    if (model.contains("unk_token") && !model["unk_token"].is_null())
      throw Error(ErrorKind::Unsupported,
                  where +
                      ": a character-level BPE with an unk_token is not supported (unknown characters are "
                      "refused instead)");
  } else {
    read_pre_tokenizer(pre, where, raw);
    if (raw.byte_level == 0)
      throw Error(ErrorKind::Unsupported,
                  where +
                      ": the pre_tokenizer has no ByteLevel: only byte-level BPE is supported (and "
                      "character-level BPE: no pre_tokenizer, no merges, the Fuse decoder)");
  }
  if (j.contains("post_processor")) read_post_processor(j["post_processor"], where, raw);
  if (!model.contains("vocab")) throw Error(ErrorKind::Format, where + ": model has no \"vocab\"");
  read_vocab_object(model["vocab"], where, raw);
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

// llama.cpp's tokenizer.ggml.* keys (convert_hf_to_gguf.py, _set_vocab_gpt2): the byte-level symbols in id
// order, the merges as "left right" lines by rank, token types (3 = control, 4 = user-defined: the added
// tokens), bos/eos ids and whether a BOS is added.
RawTokenizer read_gguf_tokenizer(const GgufFile& f) {
  const std::string& where = f.path();
  const auto model = f.get_string(gguf_tokenizer::kModelKey);
  if (!model) throw Error(ErrorKind::Format, where + ": no tokenizer in the file (tokenizer.ggml.model)");
  if (*model != gguf_tokenizer::kByteLevelBpe) {
    throw Error(ErrorKind::Unsupported, where + ": tokenizer.ggml.model '" + *model + "' is not supported (" +
                                            gguf_tokenizer::kByteLevelBpe + ": byte-level BPE)");
  }
  const auto pre = f.get_string(gguf_tokenizer::kPreKey).value_or(gguf_tokenizer::kGpt2Pre);
  if (pre != gguf_tokenizer::kGpt2Pre && pre != "default") {
    throw Error(ErrorKind::Unsupported, where + ": tokenizer.ggml.pre '" + pre +
                                            "' is not supported (gpt-2: GPT-2's pre-tokenizer regex)");
  }
  auto strings = [&](const char* key, bool required) {
    std::vector<std::string> out;
    const GgufValue* v = f.find_value(key);
    if (v == nullptr) {
      if (required) throw Error(ErrorKind::Format, where + ": missing metadata '" + key + "'");
      return out;
    }
    if (v->type != GgufType::ARRAY || v->elem != GgufType::STRING)
      throw Error(ErrorKind::Format, where + ": metadata '" + key + "' is not an array of strings");
    for (const GgufValue& s : v->items) out.push_back(s.s);
    return out;
  };
  const auto tokens = strings("tokenizer.ggml.tokens", true);
  const auto merges = strings("tokenizer.ggml.merges", false);
  RawTokenizer raw;
  raw.vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) raw.vocab.emplace_back(tokens[i], int64_t(i));
  for (size_t i = 0; i < merges.size(); ++i)
    split_merge_line(merges[i], i + 1, where + ": tokenizer.ggml.merges", raw);
  if (const GgufValue* types = f.find_value("tokenizer.ggml.token_type")) {
    if (types->type != GgufType::ARRAY || types->items.size() != tokens.size())
      throw Error(ErrorKind::Format, where + ": tokenizer.ggml.token_type is not one integer per token");
    for (size_t i = 0; i < tokens.size(); ++i) {
      // A control token is special; a user-defined one is always recognised, as llama.cpp does
      // (following tokenizers' non-special added tokens).
      const int64_t t = types->items[i].i;
      if (t == 3 || t == 4) raw.added.push_back({tokens[i], int64_t(i), /*special=*/t == 3});
    }
  } else {
    for (auto& [sym, id] : raw.vocab)
      if (sym == "<|endoftext|>") raw.added.push_back({sym, id});
  }
  const GgufValue* add_bos = f.find_value("tokenizer.ggml.add_bos_token");
  if (add_bos != nullptr && add_bos->type == GgufType::BOOL && add_bos->i != 0) {
    const auto bos = f.get_int("tokenizer.ggml.bos_token_id");
    if (!bos || *bos < 0 || *bos >= int64_t(tokens.size()))
      throw Error(ErrorKind::Format, where + ": tokenizer.ggml.add_bos_token without a valid bos_token_id");
    raw.template_prefix.emplace_back(tokens[size_t(*bos)], *bos);
    raw.has_template = true;
  }
  return raw;
}

}  // namespace minigpt::tokenizer_detail
