// `minigpt serve`: an OpenAI-compatible HTTP server (cpp-httplib) over one model, with continuous batching.
//
// - parse_completion_request(): a /v1/completions body (JSON, the OpenAI legacy schema plus minigpt's
//   sampling extensions) checked and tokenized, or an ApiError with the HTTP status and an OpenAI-style
//   message. Untrusted input: the fuzz target tests/fuzz/fuzz_server_request.cpp drives it.
// - Scheduler (src/server/scheduler.h): one thread owns the Session; up to n_parallel sequences decode
//   together in one forward step, a new one joins at the next step, prompts are prefilled in chunks.
// - Server: the routes, streaming (server-sent events), metrics, the API key, shutdown.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "minigpt/generate.h"
#include "minigpt/generation_config.h"
#include "minigpt/model.h"
#include "minigpt/tokenizer.h"
#include "server/tool_calls.h"

namespace minigpt::server {

// An error the client caused (4xx) or the server met (5xx), in the OpenAI shape:
// {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = {}, std::string type = {},
           std::string code = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }
  // The JSON body.
  std::string body() const;

 private:
  int status_;
  std::string param_, type_, code_;
};

struct RequestLimits {
  int64_t n_ctx = 0;         // positions per sequence
  int64_t max_choices = 64;  // prompts x n
  int64_t max_stop = 16;     // stop strings
  int64_t max_top_logprobs = 5;
  // The model's generation defaults (read_generation_defaults): the sampling settings a request leaves out,
  // as llama-server takes a GGUF file's general.sampling.*, and the ids that end generation.
  GenerationDefaults model_defaults;
  // The names a request's "model" may give: the served model's id and its aliases. A request without one is
  // served; another name is a 404 model_not_found. Empty: any name.
  std::vector<std::string> model_names;
  // The server's speculative decoding (--prompt-lookup, --draft-model): every request's unless it says
  // otherwise (prompt_lookup, speculative.n_max, speculative.n_min).
  SpeculativeOptions speculative;
};

// One /v1/completions request, checked.
struct CompletionRequest {
  std::string model;                          // as sent ("" if not)
  std::vector<std::vector<int32_t>> prompts;  // one per prompt, tokenized; an empty one starts from BOS
  int64_t n = 1;                              // choices per prompt
  int64_t max_tokens = 16;  // the legacy completions API's default; may be 0 (echo + logprobs scoring)
  // max_tokens (max_completion_tokens, n_predict >= 0) was given; a chat request without it runs until the
  // context is full (max_tokens = the context)
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  std::optional<int64_t> logprobs;  // null: none; else this many alternatives (0..5) with each token's own
  bool echo = false;                // the prompt before the completion (with its logprobs, if asked)
  std::optional<uint64_t> seed;     // choice j of each prompt samples with seed + j
  GenerateOptions gen;  // sampling (OpenAI's defaults: temperature 1, top_p 1, no top-k), stop, ignore_eos
  bool chat = false;    // a /v1/chat/completions request (logprobs: top_logprobs, 0..20)
  std::string rendered_prompt;  // chat: the template's output
  // llama-server's cache_prompt: a prompt may start from what a free slot's cache holds of it (the keys and
  // values an earlier request left). Off: every prompt token is evaluated.
  bool cache_prompt = true;
  // Structured output the request asks for: OpenAI's response_format (json_object, json_schema), or
  // llama-server's json_schema or grammar (GBNF). The server compiles it (GrammarCompiler) once the request
  // has parsed; a schema or grammar it refuses is a 400 naming `param`.
  struct Constraint {
    enum class Kind { JsonObject, JsonSchema, Gbnf, StructuralTag } kind;
    std::string text;   // the schema (JSON text), the grammar or the structural tag; empty for JsonObject
    std::string param;  // the field it came from: response_format, json_schema, grammar or tools
  };
  std::optional<Constraint> constraint;
  // Tool calls (chat): the reply is read back into message.tool_calls (tool_calls.h).
  std::optional<ToolCalling> tools;
};

// Parses and checks `body`; the prompts are tokenized with `tokenizer` (special tokens recognised, as
// llama-server and the OpenAI API do) and checked against the model's vocabulary and the context.
// Throws ApiError (400) naming the field, or (404, model_not_found) for a model not in limits.model_names.
CompletionRequest parse_completion_request(std::string_view body, const Tokenizer& tokenizer,
                                           const Config& config, const RequestLimits& limits);

// Parses and checks a /v1/chat/completions body (the OpenAI chat schema plus minigpt's sampling extensions,
// chat_template_kwargs and add_generation_prompt), renders its messages with `chat_template` and tokenizes
// the result as apply_chat_template(tokenize=True) does (no special tokens added; those in the text
// recognised). Throws ApiError (400): code model_not_chat when `chat_template` is null, chat_template_error
// when the template refuses the conversation.
CompletionRequest parse_chat_request(std::string_view body, const Tokenizer& tokenizer, const Config& config,
                                     const RequestLimits& limits, const ChatTemplate* chat_template);

// Throws ApiError (404, model_not_found, the OpenAI API's answer) unless `name` is one of limits.model_names
// (or that list is empty): a client that asks for "gpt-4o" learns that it would not get it.
void check_model_name(const std::string& name, const RequestLimits& limits);

// Why `origin` is not a value --allowed-origins takes (empty when it is): "*", "null", or an origin as a
// browser sends it, scheme://host[:port], no path.
std::string origin_problem(std::string_view origin);

// A token's text as the OpenAI completions API's logprobs show it (they have no bytes field): the text when
// it is UTF-8, else "bytes:" and each byte as \xNN (a part of a character: "bytes:\xe2\x80"), so that
// two such tokens stay apart in top_logprobs.
std::string legacy_token_string(std::string_view text);

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;           // 0: any free port (bind() returns it)
  int64_t n_parallel = 4;    // sequences decoded together (-np)
  int64_t n_ctx = 0;         // positions per sequence; 0: the model's
  int64_t batch_size = 256;  // tokens per forward step in all (prompt chunks share it; decode comes first)
  int64_t max_queue = 64;    // choices waiting for a slot; more: 503
  // The host prompt cache (--cache-ram): prompt prefixes' keys and values beyond the slots, at most this many
  // bytes, in blocks of cache_block tokens; 0: none (the slots keep their own prefixes still).
  size_t cache_ram = 0;
  int64_t cache_block = 64;
  size_t max_body = 1 << 20;  // request bytes; more: 413
  std::string api_key;        // non-empty: every endpoint but /health needs "Authorization: Bearer KEY"
  std::string model_id;       // what /v1/models and responses call the model
  // More names a request's "model" may give (--alias); any other name but model_id is a 404.
  std::vector<std::string> model_aliases;
  // The responses' system_fingerprint (OpenAI: the configuration a seed's results depend on); empty: null.
  std::string system_fingerprint;
  // CORS: the origins ("https://app.example:8443", "null" for a file:// page, or "*" for any) whose web pages
  // may call the API from a browser; empty (the default): none, the browser's same-origin policy applies.
  std::vector<std::string> allowed_origins;
  std::optional<ChatTemplate> chat_template;  // the model's (load_chat_template()), if any
  GenerationDefaults generation_defaults;     // the model's (read_generation_defaults()), if any
  int http_threads = 0;                       // 0: n_parallel + max_queue + 8
  // Where the log goes, a line at a time (without its newline): one access line per answered request,
  // refusals included (method, path, status, tokens, time). Null: stderr, prefixed "minigpt: ".
  std::function<void(const std::string&)> log;
  bool verbose = false;  // the access line also gives the request's model, sampling settings and length
  // Speculative decoding for every request (a request may turn it off or change k): prompt lookup, or a draft
  // model of the same vocabulary. It runs while at most one sequence decodes (with more, the batch already
  // reads each weight once for several tokens).
  SpeculativeOptions speculative;
};

class Server {
 public:
  Server(std::shared_ptr<const Model> model, Tokenizer tokenizer, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws Error(Io) when it cannot.
  int bind();
  // Serves until stop(); returns when every connection has ended.
  void run();
  // From any thread (a signal watcher): stops accepting requests (new ones get 503) and ends run() once
  // the running and queued requests have finished, each stream with its last chunk and [DONE]; with
  // `cancel`, those end at the next step instead, with finish_reason "abort" (as vLLM says it).
  void stop(bool cancel);
  // The host prompt cache's limit in bytes: ServerOptions::cache_ram, or 0 when it is off (asked off, or this
  // model's keys and values cannot be exported: Session::exports_kv).
  size_t prompt_cache_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minigpt::server
