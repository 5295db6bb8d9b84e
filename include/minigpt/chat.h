// A model's chat format for a program that embeds minigpt (the Python package's Model.chat()): a conversation
// rendered by the model's own chat template as `minigpt chat` and `serve` render it (transformers'
// apply_chat_template, src/chat/chat_template.h), and the ids that end the assistant's reply.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/config.h"
#include "minigpt/model_source.h"
#include "minigpt/tokenizer.h"

namespace minigpt {

class ChatTemplate;

class ChatFormat {
 public:
  // The model's chat template (chat_template.jinja, tokenizer_config.json's chat_template, a GGUF file's
  // tokenizer.chat_template); nullopt when it has none. Error(Format) naming the file for a malformed one.
  static std::optional<ChatFormat> load(const ModelSource& model, const Tokenizer& tokenizer);

  // The prompt text of `messages_json`, a JSON array of message objects ({"role", "content"}, as the OpenAI
  // API's chat messages), with the assistant's turn opened when `add_generation_prompt`. Error(Argument) for
  // text that is not such an array, or a conversation the template refuses (its raise_exception).
  std::string render(std::string_view messages_json, bool add_generation_prompt = true) const;

  // The ids that end a reply: `eos` (generation_config.json's, GenerateOptions::eos_token_ids after
  // apply_generation_defaults()) or else the model's, and the template's end-of-turn ids (<|im_end|>,
  // <|eot_id|>), each once.
  std::vector<int64_t> stop_ids(const Config& config, const std::vector<int64_t>& eos) const;

 private:
  explicit ChatFormat(std::shared_ptr<const ChatTemplate> t);
  std::shared_ptr<const ChatTemplate> template_;
};

}  // namespace minigpt
