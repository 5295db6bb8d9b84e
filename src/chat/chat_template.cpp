// Chat templates on minja (see src/chat/chat_template.h): the variables and functions transformers'
// apply_chat_template gives a template, and one-line errors.
#include "chat/chat_template.h"

#include <minja/minja.hpp>
#if !defined(MINIGPT_MINJA_MAX_MACRO_DEPTH) || !defined(MINIGPT_MINJA_MAX_RANGE) || \
    !defined(MINIGPT_MINJA_MAX_STEPS)
#error "third_party/minja lacks minigpt's patch (scripts/minja_limits.patch): run scripts/fetch_minja.sh"
#endif
#include <algorithm>
#include <sstream>

#include "formats/gguf.h"
#include "io/io.h"
#include "io/json_parse.h"
#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

namespace minigpt {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// Templates of real models are at most tens of KiB; nothing legitimate comes near these.
constexpr size_t kMaxSource = 1 << 20;
constexpr int kMaxDepth = 100;  // brackets and blocks open at once, inside tags

// minja's messages span lines (the template's source with a caret): one line, at most ~300 bytes.
std::string one_line(std::string s) {
  for (char& ch : s) {
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  }
  std::string out;
  for (char ch : s) {
    if (ch == ' ' && !out.empty() && out.back() == ' ') continue;
    out += ch;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > 300) {
    size_t cut = 297;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    out = out.substr(0, cut) + "...";
  }
  return out;
}

// minja parses by recursive descent: a template nesting brackets or blocks thousands deep would exhaust the
// stack. This counts, inside {{ }} and {% %} tags only (text between tags is output, never parsed), the
// brackets open and the block statements open, and refuses a template deeper than kMaxDepth. It is a bound,
// not a parser: strings are skipped so that a quoted bracket does not count.
void check_depth(const std::string& s, const std::string& origin) {
  int depth = 0, blocks = 0;
  size_t i = 0;
  const size_t n = s.size();
  auto fail = [&](size_t at) {
    throw Error(ErrorKind::Format, origin + "chat template nests deeper than " + std::to_string(kMaxDepth) +
                                       " levels (byte " + std::to_string(at) + ")");
  };
  while (i + 1 < n) {
    if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%')) {
      const char close = s[i + 1] == '{' ? '}' : '%';
      const bool statement = s[i + 1] == '%';
      i += 2;
      if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
      while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
      if (statement) {
        size_t w = i;
        while (w < n && (std::isalpha(static_cast<unsigned char>(s[w])) || s[w] == '_')) ++w;
        const std::string word = s.substr(i, w - i);
        if (word == "if" || word == "for" || word == "macro" || word == "call" || word == "filter" ||
            word == "generation") {
          if (++blocks > kMaxDepth) fail(i);
        } else if (word.rfind("end", 0) == 0 && blocks > 0) {
          --blocks;
        }
      }
      while (i < n) {
        const char ch = s[i];
        if (ch == '\'' || ch == '"') {
          ++i;
          while (i < n && s[i] != ch) i += s[i] == '\\' ? 2 : 1;
          ++i;
          continue;
        }
        if (depth == 0 && ch == close && i + 1 < n && s[i + 1] == '}') {
          i += 2;
          break;
        }
        if (ch == '(' || ch == '[' || ch == '{') {
          if (++depth > kMaxDepth) fail(i);
        } else if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) {
          --depth;
        }
        ++i;
      }
      depth = 0;
      continue;
    }
    ++i;
  }
}

std::string token_string(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

// The file's JSON, or null where there is no such file. Read as every config file is (a regular file of at
// most kMaxConfigBytes: a FIFO or a device in its place is refused, not waited on).
ojson read_json(const fs::path& p, const char* what) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p, ec))) return ojson();
  const std::string text = read_regular_file(p, kMaxConfigBytes, what);
  ojson j;
  try {
    j = parse_json_bounded<ojson>(false, text);
  } catch (const JsonTooDeep& e) {
    throw Error(ErrorKind::Format, p.string() + ": not valid JSON: " + e.what());
  }
  if (j.is_discarded()) throw Error(ErrorKind::Format, p.string() + ": not valid JSON");
  return j;
}

const char* const kTokenNames[] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                   "sep_token", "cls_token", "mask_token"};

}  // namespace

struct ChatTemplate::Impl {
  std::string source;
  std::string origin;
  ojson tokens;
  std::shared_ptr<minja::TemplateNode> root;
};

ChatTemplate::ChatTemplate(const std::string& source, ojson special_tokens, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  impl->origin = origin.empty() ? "" : origin + ": ";
  impl->tokens = special_tokens.is_object() ? std::move(special_tokens) : ojson::object();
  if (source.size() > kMaxSource) {
    throw Error(ErrorKind::Format, impl->origin + "chat template of " + std::to_string(source.size()) +
                                       " bytes is larger than " + std::to_string(kMaxSource));
  }
  check_depth(source, impl->origin);
  try {
    // transformers' environment: trim_blocks, lstrip_blocks, keep_trailing_newline false.
    impl->root = minja::Parser::parse(source, {/*trim_blocks=*/true, /*lstrip_blocks=*/true,
                                               /*keep_trailing_newline=*/false});
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Format, impl->origin + "chat template does not parse: " + one_line(e.what()));
  }
  impl_ = std::move(impl);
}

const std::string& ChatTemplate::source() const { return impl_->source; }
const ojson& ChatTemplate::special_tokens() const { return impl_->tokens; }

std::string ChatTemplate::render(const ojson& messages, bool add_generation_prompt, const ojson& extra,
                                 const std::tm* now) const {
  if (!messages.is_array()) throw Error(ErrorKind::Argument, "chat template: messages must be an array");
  ojson vars = ojson::object();
  for (const auto& [k, v] : impl_->tokens.items()) vars[k] = v;
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) vars[k] = v;
  }
  vars["messages"] = messages;
  vars["add_generation_prompt"] = add_generation_prompt;
  if (!vars.contains("tools")) vars["tools"] = nullptr;
  if (!vars.contains("documents")) vars["documents"] = nullptr;
  std::tm when{};
  if (now != nullptr) {
    when = *now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &when);
  }
  try {
    auto ctx = minja::Context::make(minja::Value(vars));
    ctx->set("strftime_now", minja::Value::callable(
                                 [when](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
                                   args.expectArgs("strftime_now", {1, 1}, {0, 0});
                                   const std::string format = args.args[0].get<std::string>();
                                   std::ostringstream ss;
                                   ss << std::put_time(&when, format.c_str());
                                   return minja::Value(ss.str());
                                 }));
    minja::minigpt_steps = 0;  // the patch's budget of loop iterations and macro calls, per render
    return impl_->root->render(ctx);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Argument, "chat template: " + one_line(e.what()));
  }
}

std::vector<int64_t> chat_stop_ids(const Config& c, const std::vector<int64_t>& eos, const ChatTemplate& t) {
  std::vector<int64_t> out;
  auto add = [&](int64_t id) {
    if (id >= 0 && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  if (!eos.empty()) {
    for (const int64_t id : eos) add(id);
  } else if (!c.eos_token_ids.empty()) {
    for (const int64_t id : c.eos_token_ids) add(id);
  } else {
    add(c.eos_token_id);
  }
  for (const int32_t id : t.end_of_turn_ids()) add(id);
  return out;
}

namespace {

// The special tokens a template of this model sees (see load_chat_template()).
ojson special_tokens_of(const ModelSource& model_source, const Tokenizer& tok) {
  const fs::path& model = model_source.path();
  std::error_code ec;
  ojson tokens = ojson::object();
  if (model_source.format() == ModelFormat::Directory && fs::is_directory(model, ec)) {
    const ojson config = read_json(model / "tokenizer_config.json", "tokenizer config");
    const ojson map = read_json(model / "special_tokens_map.json", "special tokens map");
    for (const char* name : kTokenNames) {
      std::string s;
      if (config.is_object() && config.contains(name)) s = token_string(config[name]);
      if (s.empty() && map.is_object() && map.contains(name)) s = token_string(map[name]);
      if (!s.empty()) tokens[name] = s;
    }
  } else if (model_source.format() == ModelFormat::Gguf) {
    const std::pair<const char*, const char*> keys[] = {{"bos_token", "tokenizer.ggml.bos_token_id"},
                                                        {"eos_token", "tokenizer.ggml.eos_token_id"},
                                                        {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                                        {"pad_token", "tokenizer.ggml.padding_token_id"},
                                                        {"sep_token", "tokenizer.ggml.seperator_token_id"}};
    for (const auto& [name, key] : keys) {
      const auto id = model_source.gguf().get_int(key);
      if (id && *id >= 0 && *id < tok.n_vocab()) tokens[name] = tok.token_bytes(int32_t(*id));
    }
  }
  return tokens;
}

// The model's template, with its tokens; nullopt when it has none.
std::optional<ChatTemplate> model_template(const ModelSource& model_source, const ojson& tokens) {
  const fs::path& model = model_source.path();
  std::error_code ec;
  if (model_source.format() == ModelFormat::Directory && fs::is_directory(model, ec)) {
    const fs::path jinja = model / "chat_template.jinja";
    if (fs::exists(fs::symlink_status(jinja, ec))) {
      ChatTemplate t(read_regular_file(jinja, kMaxConfigBytes, "chat template"), tokens, jinja.string());
      t.set_from("chat_template.jinja");
      return t;
    }
    const ojson config = read_json(model / "tokenizer_config.json", "tokenizer config");
    if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) {
      return std::nullopt;
    }
    const std::string origin = (model / "tokenizer_config.json").string();
    const auto from_file = [](ChatTemplate t) {
      t.set_from("tokenizer_config.json");
      return t;
    };
    const ojson& t = config["chat_template"];
    if (t.is_string()) return from_file(ChatTemplate(t.get<std::string>(), tokens, origin));
    if (t.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
      for (const auto& e : t) {
        if (e.is_object() && e.value("name", ojson()) == "default" && e.contains("template") &&
            e["template"].is_string()) {
          return from_file(ChatTemplate(e["template"].get<std::string>(), tokens, origin));
        }
      }
      throw Error(ErrorKind::Format,
                  origin + ": chat_template is a list without a template named \"default\"");
    }
    throw Error(ErrorKind::Format, origin + ": chat_template must be a string or a list of named templates");
  }
  if (model_source.format() != ModelFormat::Gguf) return std::nullopt;
  const auto source = model_source.gguf().get_string("tokenizer.chat_template");
  if (!source) return std::nullopt;
  ChatTemplate t(*source, tokens, model.string());
  t.set_from("GGUF tokenizer.chat_template");
  return t;
}

// The ids of eos_token and of a GGUF file's end-of-turn tokens (ChatTemplate::end_of_turn_ids()).
void set_end_of_turn(ChatTemplate& t, const ModelSource& model_source, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  const std::string eos = t.special_tokens().value("eos_token", std::string());
  if (!eos.empty()) {
    if (const auto id = tok.special_id(eos)) ids.push_back(*id);
  }
  if (model_source.format() == ModelFormat::Gguf) {
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
      const auto id = model_source.gguf().get_int(key);
      if (id && *id >= 0 && *id < tok.n_vocab() &&
          std::find(ids.begin(), ids.end(), int32_t(*id)) == ids.end())
        ids.push_back(int32_t(*id));
    }
  }
  t.set_end_of_turn_ids(std::move(ids));
}

}  // namespace

std::optional<ChatTemplate> load_chat_template(const fs::path& model, const Tokenizer& tok) {
  return load_chat_template(ModelSource::open(model), tok);
}

std::optional<ChatTemplate> load_chat_template(const ModelSource& model_source, const Tokenizer& tok) {
  std::optional<ChatTemplate> t = model_template(model_source, special_tokens_of(model_source, tok));
  if (t) set_end_of_turn(*t, model_source, tok);
  return t;
}

ChatTemplate load_chat_template_file(const fs::path& file, const ModelSource& model_source,
                                     const Tokenizer& tok) {
  ChatTemplate t(read_regular_file(file, kMaxConfigBytes, "chat template"),
                 special_tokens_of(model_source, tok), file.string());
  t.set_from(file.string());
  set_end_of_turn(t, model_source, tok);
  return t;
}

}  // namespace minigpt
