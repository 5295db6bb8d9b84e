// Chat templates: the Jinja program a chat model's tokenizer config carries, which turns a conversation
// (OpenAI-style messages) into the model's prompt text.
//
// Rendered as transformers' apply_chat_template renders them (its jinja2 environment: trim_blocks,
// lstrip_blocks, no trailing newline kept; the variables messages, add_generation_prompt, tools and
// documents (null unless given), the tokenizer's special tokens (bos_token, eos_token, ...), and the
// functions raise_exception and strftime_now), on minja, Google's C++ Jinja engine for chat templates (MIT;
// scripts/fetch_minja.sh). Checked against transformers on real models' templates:
// tests/fixtures/chat/templates.json, made by tools/reference/make_chat_reference.py.
//
// A template comes from a model file (untrusted): its source is capped in size and nesting before minja
// parses it (tests/fuzz/fuzz_chat_template.cpp), and every failure is one line: Error(Format) for a template
// that does not parse, Error(Argument) for a conversation the template refuses (its raise_exception) or
// cannot render.
#pragma once

#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "minigpt/config.h"
#include "minigpt/model_source.h"

namespace minigpt {

class Tokenizer;

class ChatTemplate {
 public:
  // Parses `source`. `special_tokens`: an object of strings (bos_token, eos_token, ...) the template sees.
  // `origin` names where the template came from in error messages.
  ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens,
               const std::string& origin = "");

  // The prompt for `messages` (an array of message objects, as the OpenAI API's chat messages). `extra`: more
  // variables (an object; a request's chat_template_kwargs); they override the special tokens but not
  // messages / add_generation_prompt. `now`: the time strftime_now formats (default: the current local time).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                     const std::tm* now = nullptr) const;

  const std::string& source() const;
  const nlohmann::ordered_json& special_tokens() const;

  // The tokens that end a turn of this template's model besides its eos ids: the id of eos_token
  // (tokenizer_config.json's, e.g. <|im_end|>, <|eot_id|>, <|end|>, which a base model's config.json may not
  // name) and a GGUF file's tokenizer.ggml.eot_token_id and eom_token_id, llama.cpp's end-of-turn tokens.
  // Set by load_chat_template(); empty for a template made from a string.
  const std::vector<int32_t>& end_of_turn_ids() const { return end_of_turn_; }
  void set_end_of_turn_ids(std::vector<int32_t> ids) { end_of_turn_ = std::move(ids); }

  // Where the template came from, as a user looks for it: "chat_template.jinja", "tokenizer_config.json",
  // "GGUF tokenizer.chat_template", or the file --chat-template named. Set by load_chat_template() and
  // load_chat_template_file(); empty for a template made from a string.
  const std::string& from() const { return from_; }
  void set_from(std::string from) { from_ = std::move(from); }

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  std::vector<int32_t> end_of_turn_;
  std::string from_;
};

// The ids that end a chat reply: `eos` (generation_config.json's eos_token_id when it has one) or else the
// model's (Config::eos_token_ids, eos_token_id), and the template's end_of_turn_ids(); each once, in order.
std::vector<int64_t> chat_stop_ids(const Config& config, const std::vector<int64_t>& eos,
                                   const ChatTemplate& t);

// The chat template of a model, if it has one:
// - a directory: chat_template.jinja (what transformers >= 4.43 saves), else tokenizer_config.json's
//   "chat_template": a string, or a list of {"name", "template"} (the one named "default"); special tokens
//   from tokenizer_config.json's bos_token, eos_token, unk_token, pad_token, sep_token, cls_token,
//   mask_token (strings, or {"content": ...} objects), then special_tokens_map.json;
// - a GGUF file (by its bytes, whatever its name): tokenizer.chat_template; special tokens from
//   tokenizer.ggml.{bos,eos,unknown,padding,seperator}_token_id through `tokenizer`.
// Its end_of_turn_ids() are set.
// Throws Error(Format) when the template is malformed (or not a string), naming the file.
std::optional<ChatTemplate> load_chat_template(const std::filesystem::path& model,
                                               const Tokenizer& tokenizer);
std::optional<ChatTemplate> load_chat_template(const ModelSource& model, const Tokenizer& tokenizer);

// The template of `file` (a Jinja file, as a model directory's chat_template.jinja or one of llama.cpp's
// models/templates) with `model`'s special tokens, as load_chat_template() finds them: for a model without a
// template of its own, or to replace it. Error(Io) naming the file when it cannot be read, Error(Format) when
// it does not parse.
ChatTemplate load_chat_template_file(const std::filesystem::path& file, const ModelSource& model,
                                     const Tokenizer& tokenizer);

}  // namespace minigpt
