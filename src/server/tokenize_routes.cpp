// POST /tokenize, POST /detokenize and GET /tokenizer_info: the model's tokenizer over HTTP, in
// llama-server's and vLLM's shapes (lm-eval's remote tokenizer reads vLLM's).
#include <string>
#include <vector>

#include "io/json_parse.h"
#include "minigpt/error.h"
#include "server/server_impl.h"

namespace minigpt::server {

namespace {

// A request body that must be a JSON object; a 400 when it is not.
json parse_object(const std::string& body) {
  json j;
  try {
    j = parse_json_bounded(true, body);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  return j;
}

}  // namespace

// Two shapes of each: llama-server's {"content": TEXT, "add_special": false} and vLLM's {"model", "prompt":
// TEXT, "add_special_tokens": true} (each with its own default), both answered {"tokens", "count",
// "max_model_len"}; detokenize answers the text as "content" (llama-server) and "prompt" (vLLM), so that
// lm-eval's remote tokenizer, which sends and reads vLLM's, works as llama-server's clients do.
void Server::Impl::tokenize(const httplib::Request& req, httplib::Response& res) {
  const json j = parse_object(req.body);
  for (const auto& [k, v] : j.items()) {
    if (k != "content" && k != "add_special" && k != "prompt" && k != "add_special_tokens" && k != "model")
      throw ApiError(400, "unknown field: " + k, k);
  }
  if (j.contains("model") && !j["model"].is_string())
    throw ApiError(400, "model: expected a string", "model");
  const bool vllm = j.contains("prompt");
  if (vllm && j.contains("content"))
    throw ApiError(400, "content: not with prompt (one text: llama-server's content or vLLM's prompt)",
                   "content");
  const char* text_field = vllm ? "prompt" : "content";
  if (!j.contains(text_field) || !j[text_field].is_string()) {
    throw ApiError(400, "content (or prompt): required, a string", text_field);
  }
  if (j.contains("add_special") && j.contains("add_special_tokens"))
    throw ApiError(400, "add_special: not with add_special_tokens (the same switch)", "add_special");
  // llama-server adds no special tokens unless asked; vLLM adds them unless asked not to.
  bool add_special = vllm;
  for (const char* k : {"add_special", "add_special_tokens"}) {
    if (!j.contains(k)) continue;
    if (!j[k].is_boolean()) throw ApiError(400, std::string(k) + ": expected a boolean", k);
    add_special = j[k].get<bool>();
  }
  const std::string text = j[text_field].get<std::string>();
  std::vector<int32_t> ids;
  try {
    ids = add_special ? tok.encode_with_specials(text, true) : tok.encode(text, true);
  } catch (const Error& e) {
    throw ApiError(400, std::string(text_field) + ": " + e.what(), text_field);
  }
  const int64_t count = int64_t(ids.size());
  res.set_content(dump({{"tokens", ids}, {"count", count}, {"max_model_len", sched->n_ctx()}}),
                  "application/json");
}

void Server::Impl::detokenize(const httplib::Request& req, httplib::Response& res) {
  const json j = parse_object(req.body);
  for (const auto& [k, v] : j.items()) {
    if (k != "tokens" && k != "model") throw ApiError(400, "unknown field: " + k, k);
  }
  if (j.contains("model") && !j["model"].is_string())
    throw ApiError(400, "model: expected a string", "model");
  if (!j.contains("tokens") || !j["tokens"].is_array()) {
    throw ApiError(400, "tokens: required, an array of token ids", "tokens");
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j["tokens"].size(); ++i) {
    const json& v = j["tokens"][i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.n_vocab()) {
      throw ApiError(
          400,
          "tokens[" + std::to_string(i) + "]: not a token id in [0, " + std::to_string(tok.n_vocab()) + ")",
          "tokens");
    }
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  const std::string text = utf8_sanitize(tok.decode(ids));
  res.set_content(dump({{"content", text}, {"prompt", text}}), "application/json");
}

// vLLM's GET /tokenizer_info, which lm-eval's remote tokenizer reads: the special tokens as text (it
// encodes eos_token and takes the first id), the context as model_max_length, and the chat template.
json Server::Impl::tokenizer_info() const {
  const Config& c = model->config();
  // The ids minigpt uses: BOS starts an empty prompt (generate()'s choice: config.json's, else the
  // tokenizer's); EOS is the first id that ends generation (generation_config.json's, config.json's, else the
  // tokenizer's). Each as the text that encodes to it; null when there is none.
  const auto text_of = [&](int64_t id) -> json {
    if (id < 0 || id >= tok.n_vocab() || id >= c.n_vocab) return nullptr;
    return token_text(int32_t(id));
  };
  int64_t bos = c.bos_token_id;
  if ((bos < 0 || bos >= c.n_vocab) && tok.bos_id()) bos = *tok.bos_id();
  std::vector<int64_t> eos = limits.model_defaults.eos_token_ids;
  if (eos.empty()) eos = c.eos_token_ids;
  if (eos.empty() && c.eos_token_id >= 0) eos.push_back(c.eos_token_id);
  // ids past the vocabulary never come (GPT2Config's default 50256 in a small model's config): as none
  std::erase_if(eos, [&](int64_t id) { return id < 0 || id >= c.n_vocab; });
  if (eos.empty() && tok.eos_id()) eos.push_back(*tok.eos_id());
  json info = {{"tokenizer_class", "PreTrainedTokenizerFast"},
               {"bos_token", text_of(bos)},
               {"eos_token", eos.empty() ? json(nullptr) : text_of(eos.front())},
               {"pad_token", nullptr},
               {"unk_token", nullptr},
               {"model_max_length", sched->n_ctx()}};
  if (o.chat_template) {
    // the template's own names for the tokens it writes (pad_token, unk_token, ...) where it has them
    for (const auto& [k, v] : o.chat_template->special_tokens().items()) {
      if (v.is_string() && (!info.contains(k) || info[k].is_null())) info[k] = v.get<std::string>();
    }
    info["chat_template"] = o.chat_template->source();
  }
  return info;
}

}  // namespace minigpt::server
