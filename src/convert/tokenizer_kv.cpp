// The tokenizer.* keys of a converted Hugging Face directory: a byte-level BPE vocabulary as
// convert_hf_to_gguf.py's _set_vocab_gpt2 writes it (get_vocab_base, then gguf-py's SpecialVocab with
// merges and the chat templates).
#include <cctype>
#include <map>
#include <optional>

#include "convert/source.h"
#include "convert/util.h"
#include "formats/gguf_writer.h"
#include "io/io.h"
#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "tokenizer/gguf_names.h"

namespace minigpt::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// convert_hf_to_gguf.py's does_token_look_special.
bool looks_special(const std::string& t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  auto starts = [&](std::string_view a) { return t.size() >= a.size() && t.compare(0, a.size(), a) == 0; };
  if (starts("<|") && ends_with(t, "|>")) return true;
  if (starts("<\xEF\xBD\x9C") && ends_with(t, "\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
  if (starts("<unused") && ends_with(t, ">")) return true;
  return false;
}

}  // namespace

// From tokenizer.json or vocab.json + merges.txt, tokenizer_config.json and config.json.
void add_tokenizer_kv(const fs::path& dir, const json& config, int64_t n_vocab, Source& s) {
  // minigpt must understand the tokenizer (a byte-level BPE with GPT-2's pre-tokenizer): kGpt2Pre below
  // is then the right tokenizer.ggml.pre.
  // A character-level tokenizer (a nanoGPT character model's) has no GGUF form: llama.cpp's BPE tokenizer
  // model is byte-level, and its converter refuses such a tokenizer too (an unknown pre-tokenizer).
  const Tokenizer loaded = Tokenizer::load(dir);
  if (loaded.char_level()) {
    throw Error(ErrorKind::Unsupported,
                s.where + ": the tokenizer is character-level, which GGUF (llama.cpp's byte-level \"" +
                    gguf_tokenizer::kByteLevelBpe +
                    "\" "
                    "tokenizer) cannot hold; run the model directory as it is");
  }
  // The converter writes tokenizer.ggml.pre "gpt-2" and the merges: other tokenizers (SentencePiece, Llama
  // 3's or Qwen2's splits) would be read back as another one.
  if (!loaded.gpt2_split()) {
    throw Error(ErrorKind::Unsupported,
                s.where +
                    ": the tokenizer is not a byte-level BPE split by GPT-2's regex, the one minigpt's "
                    "converter writes to GGUF; run the model directory as it is");
  }
  struct Added {
    int64_t id;
    std::string content;
    bool special;
  };
  // An added token's "special": true only when it says so (it may be left out or null).
  auto special_flag = [](const json& a) {
    return a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>();
  };
  std::map<std::string, int64_t> vocab;
  std::vector<Added> added;       // what AutoTokenizer reports as added tokens
  std::vector<Added> json_added;  // tokenizer.json's added_tokens (SpecialVocab looks ids up in these)
  std::vector<std::string> merges;
  json tok;
  const fs::path tok_path = dir / "tokenizer.json";
  const bool have_tok = fs::exists(tok_path);
  json tc;
  const fs::path tc_path = dir / "tokenizer_config.json";
  if (fs::exists(tc_path)) {
    tc = read_json_file(tc_path, kMaxConfigBytes, "tokenizer config");
    s.files.push_back(tc_path);
  }
  if (have_tok) {
    tok = read_json_file(tok_path, kMaxTokenizerBytes, "tokenizer");
    s.files.push_back(tok_path);
    const json& model = tok.at("model");
    for (const auto& [k, v] : model.at("vocab").items()) vocab[k] = v.get<int64_t>();
    if (model.contains("merges") && model["merges"].is_array()) {
      for (const json& m : model["merges"]) {
        if (m.is_string()) {
          merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2) {
          // transformers >= 4.45 pairs; spaces inside a part become U+0120 as gguf-py writes them
          std::string line;
          for (int part = 0; part < 2; ++part) {
            if (part) line += ' ';
            for (char ch : m[part].get<std::string>())
              line += ch == ' ' ? std::string("\xC4\xA0") : std::string(1, ch);
          }
          merges.push_back(line);
        }
      }
    }
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
      for (const json& a : tok["added_tokens"]) {
        // tokenizer.json was read by Tokenizer::load above: ids and contents are checked; "special" may be
        // left out or null.
        json_added.push_back(
            {a.at("id").get<int64_t>(), a.at("content").get<std::string>(), special_flag(a)});
      }
    }
    added = json_added;
  } else {
    const fs::path vp = dir / "vocab.json";
    s.files.push_back(vp);
    const json v = read_json_file(vp, kMaxTokenizerBytes, "vocabulary");
    for (const auto& [k, id] : v.items()) vocab[k] = id.get<int64_t>();
    if (tc.contains("added_tokens_decoder") && tc["added_tokens_decoder"].is_object()) {
      // Checked as the rest of the input is: a malformed entry is an Error naming it, not a stoll exception.
      for (const auto& [id, a] : tc["added_tokens_decoder"].items()) {
        const std::string at = tc_path.string() + ": added_tokens_decoder[" +
                               json(id).dump(-1, ' ', false, json::error_handler_t::replace) + "]";
        const bool decimal =
            !id.empty() && id.size() <= 9 && id.find_first_not_of("0123456789") == std::string::npos;
        if (!decimal) throw Error(ErrorKind::Format, at + ": the key is not a token id");
        if (!a.is_object() || !a.contains("content") || !a["content"].is_string())
          throw Error(ErrorKind::Format, at + ": no string \"content\"");
        if (a.contains("special") && !a["special"].is_boolean() && !a["special"].is_null())
          throw Error(ErrorKind::Format, at + ": \"special\" is not true or false");
        added.push_back({std::stoll(id), a["content"].get<std::string>(), special_flag(a)});
      }
    } else if (vocab.count("<|endoftext|>")) {
      added.push_back({vocab["<|endoftext|>"], "<|endoftext|>", true});
    }
  }
  if (merges.empty() && fs::exists(dir / "merges.txt")) {
    const fs::path mp = dir / "merges.txt";
    s.files.push_back(mp);
    const std::string text = read_regular_file(mp, kMaxTokenizerBytes, "merges file");
    size_t pos = 0;
    bool first = true;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(pos, end - pos);
      pos = end + 1;
      const bool skip = first && !line.empty() && line.find_first_not_of(" \t\r") != std::string::npos &&
                        line[line.find_first_not_of(" \t\r")] == '#';
      first = false;
      if (skip) continue;
      // line.split(None, 3): exactly two whitespace-separated parts
      std::vector<std::string> parts;
      std::string cur;
      for (char ch : line + " ") {
        if (std::isspace(static_cast<unsigned char>(ch))) {
          if (!cur.empty()) parts.push_back(cur);
          cur.clear();
        } else {
          cur += ch;
        }
      }
      if (parts.size() == 2) merges.push_back(parts[0] + " " + parts[1]);
    }
  }

  // get_vocab_base
  std::map<int64_t, std::string> by_id;
  for (const auto& [t, id] : vocab) by_id[id] = t;
  for (const Added& a : added) by_id[a.id] = a.content;
  std::map<std::string, const Added*> added_by_content;
  for (const Added& a : added) added_by_content[a.content] = &a;
  if (!by_id.empty() && by_id.rbegin()->first >= n_vocab) {
    throw Error(ErrorKind::Format, s.where + ": the tokenizer has id " +
                                       std::to_string(by_id.rbegin()->first) +
                                       " but config.json's vocab_size is " + std::to_string(n_vocab));
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(size_t(n_vocab));
  types.reserve(size_t(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(5);  // UNUSED
      continue;
    }
    tokens.push_back(it->second);
    auto a = added_by_content.find(it->second);
    if (a == added_by_content.end()) {
      types.push_back(1);  // NORMAL
    } else {
      types.push_back(a->second->special || looks_special(it->second) ? 3 : 4);  // CONTROL / USER_DEFINED
    }
  }
  auto& kv = s.metadata;
  kv.emplace_back(gguf_tokenizer::kModelKey, gguf_string(gguf_tokenizer::kByteLevelBpe));
  kv.emplace_back(gguf_tokenizer::kPreKey, gguf_string(gguf_tokenizer::kGpt2Pre));
  kv.emplace_back("tokenizer.ggml.tokens", gguf_string_array(std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", gguf_i32_array(types));

  // SpecialVocab: ids of bos/eos/unk/sep/pad/cls/mask and whether bos/eos/sep are added.
  static const char* kTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  std::vector<std::pair<std::string, int64_t>> ids;  // in the order they were found
  std::vector<std::pair<std::string, bool>> add;
  auto set_id = [&](const std::string& typ, const json& v) {
    if (!v.is_number_integer()) return;
    const int64_t id = v.get<int64_t>();
    if (id < 0)
      throw Error(ErrorKind::Format, s.where + ": invalid " + typ + " token id " + std::to_string(id));
    for (const auto& [t, _] : ids)
      if (t == typ) return;
    ids.emplace_back(typ, id);
  };
  auto set_add = [&](const std::string& typ, bool value, bool only_if_unset) {
    for (auto& [t, v] : add) {
      if (t == typ) {
        if (!only_if_unset) v = value;
        return;
      }
    }
    add.emplace_back(typ, value);
  };
  if (have_tok && tok.contains("post_processor") && tok["post_processor"].is_object()) {
    const json& pp = tok["post_processor"];
    std::vector<json> procs;
    if (pp.contains("processors") && pp["processors"].is_array()) {
      for (const json& p : pp["processors"]) procs.push_back(p);
    } else {
      procs.push_back(pp);
    }
    const std::string bos_tok = tc.is_object() && tc.contains("bos_token") && tc["bos_token"].is_string()
                                    ? tc["bos_token"].get<std::string>()
                                    : "";
    const std::string eos_tok = tc.is_object() && tc.contains("eos_token") && tc["eos_token"].is_string()
                                    ? tc["eos_token"].get<std::string>()
                                    : "";
    for (const json& p : procs) {
      const std::string type =
          p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
      if (type == "ByteLevel") {
        set_add("bos", false, true);
        set_add("eos", false, true);
      } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array() &&
                 p["single"].size() > 1) {
        // the simple case of gguf-py's parsing: a leading BOS / trailing EOS special token
        const json& single = p["single"];
        if (single.front().contains("SpecialToken")) {
          set_add("bos",
                  single.front()["SpecialToken"].contains("id") &&
                      single.front()["SpecialToken"]["id"] == bos_tok,
                  false);
        }
        if (single.back().contains("SpecialToken")) {
          set_add(
              "eos",
              single.back()["SpecialToken"].contains("id") && single.back()["SpecialToken"]["id"] == eos_tok,
              false);
        }
      }
    }
  }
  if (tc.is_object()) {
    for (const char* typ : kTypes) {
      const std::string t = typ;
      if (tc.contains("add_" + t + "_token") && tc["add_" + t + "_token"].is_boolean()) {
        set_add(t, tc["add_" + t + "_token"].get<bool>(), true);
      }
      if (!tc.contains(t + "_token")) continue;
      const json& entry = tc[t + "_token"];
      std::string content;
      if (entry.is_string()) {
        content = entry.get<std::string>();
      } else if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) {
        content = entry["content"].get<std::string>();
      } else {
        continue;
      }
      for (const Added& a : json_added) {
        if (a.content == content) {
          set_id(t, a.id);
          break;
        }
      }
    }
  }
  for (const char* typ : kTypes) {
    const std::string key = std::string(typ) + "_token_id";
    if (config.contains(key)) set_id(typ, config[key]);
  }
  // Always, even empty (a byte-level vocabulary without merges, as the shipped model's): llama.cpp refuses a
  // BPE tokenizer without the key ("cannot find tokenizer merges in model file").
  kv.emplace_back("tokenizer.ggml.merges", gguf_string_array(std::move(merges)));
  static const std::map<std::string, std::string> kIdKeys = {
      {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"}};
  for (const auto& [typ, id] : ids) {
    auto it = kIdKeys.find(typ);
    if (it == kIdKeys.end()) continue;  // cls: gguf-py has no key for it
    if (id > int64_t(UINT32_MAX))
      throw Error(ErrorKind::Format, s.where + ": " + typ + " token id out of range");
    kv.emplace_back(it->second, gguf_u32(uint32_t(id)));
  }
  for (const auto& [typ, value] : add) {
    if (typ == "bos" || typ == "eos" || typ == "sep")
      kv.emplace_back("tokenizer.ggml.add_" + typ + "_token", gguf_bool(value));
  }
  // gguf-py's SpecialVocab: tokenizer_config.json's chat_template, else chat_template.jinja (what
  // transformers
  // >= 4.43 saves), else chat_template.json's; a list of {name, template} gives the one named "default" as
  // tokenizer.chat_template and the others as tokenizer.chat_template.NAME (GGUFWriter.add_chat_template).
  json tmpl;
  if (tc.is_object() && tc.contains("chat_template")) {
    tmpl = tc["chat_template"];
  } else if (std::error_code ec; fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    tmpl = read_regular_file(dir / "chat_template.jinja", kMaxConfigBytes, "chat template");
  } else if (fs::is_regular_file(dir / "chat_template.json", ec)) {
    const json j = read_json_file(dir / "chat_template.json", kMaxConfigBytes, "chat template");
    if (j.is_object() && j.contains("chat_template")) tmpl = j["chat_template"];
  }
  if (tmpl.is_string()) {
    kv.emplace_back("tokenizer.chat_template", gguf_string(tmpl.get<std::string>()));
  } else if (tmpl.is_array()) {
    std::vector<std::string> names;
    std::optional<std::string> def;
    for (const json& e : tmpl) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) continue;
      std::string name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      if (name.empty()) continue;
      if (name == "default") {
        def = e["template"].get<std::string>();
      } else {
        kv.emplace_back("tokenizer.chat_template." + name, gguf_string(e["template"].get<std::string>()));
        names.push_back(name);
      }
    }
    if (!names.empty()) kv.emplace_back("tokenizer.chat_templates", gguf_string_array(std::move(names)));
    if (def) kv.emplace_back("tokenizer.chat_template", gguf_string(*def));
  }
}

}  // namespace minigpt::convert
