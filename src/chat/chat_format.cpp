// minigpt/chat.h over the chat templates (chat/chat_template.h).
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "minigpt/chat.h"
#include "minigpt/error.h"

namespace minigpt {

ChatFormat::ChatFormat(std::shared_ptr<const ChatTemplate> t) : template_(std::move(t)) {}

std::optional<ChatFormat> ChatFormat::load(const ModelSource& model, const Tokenizer& tokenizer) {
  std::optional<ChatTemplate> t = load_chat_template(model, tokenizer);
  if (!t) return std::nullopt;
  return ChatFormat(std::make_shared<const ChatTemplate>(std::move(*t)));
}

std::string ChatFormat::render(std::string_view messages_json, bool add_generation_prompt) const {
  // Ordered: a template may iterate over a message's fields in the order they were given.
  nlohmann::ordered_json messages;
  try {
    messages = nlohmann::ordered_json::parse(messages_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Argument, std::string("messages: not JSON: ") + e.what());
  }
  if (!messages.is_array())
    throw Error(ErrorKind::Argument, "messages: an array of message objects is needed");
  return template_->render(messages, add_generation_prompt);
}

std::vector<int64_t> ChatFormat::stop_ids(const Config& config, const std::vector<int64_t>& eos) const {
  return chat_stop_ids(config, eos, *template_);
}

}  // namespace minigpt
