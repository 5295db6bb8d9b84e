// Server's private state, shared by the files that each serve one part of it: server.cpp (the routes),
// openai_response.cpp (the completions' responses), metrics.cpp (/metrics), access_log.cpp (the log),
// tokenize_routes.cpp.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "minigpt/constraint.h"
#include "server/scheduler.h"
#include "server/server.h"

namespace minigpt::server {

using json = nlohmann::json;

// A JSON body as the server sends it: invalid UTF-8 in a string becomes U+FFFD rather than an exception.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// What one request's access line reports beyond its method, path and status: filled by the route that
// serves it (a stream's tokens as they are generated), read once the response is written.
struct RequestLog {
  Clock::time_point start = Clock::now();
  int64_t prompt_tokens = -1;  // -1: no completion ran (another route, or a refusal)
  int64_t cached_tokens = 0, completion_tokens = 0;
  std::string settings;  // --verbose: the request's model, length and sampling settings
};

struct Server::Impl {
  std::shared_ptr<const Model> model;
  Tokenizer tok;
  ServerOptions o;
  std::unique_ptr<Scheduler> sched;
  httplib::Server svr;
  RequestLimits limits;
  int port = -1;
  int listen_fd = -1;   // the listening socket, as httplib made it (set_socket_options)
  int64_t started = 0;  // unix time
  std::atomic<bool> draining{false}, stopping{false}, run_called{false}, run_done{false};
  // Streamed responses not yet written to their end: stop() closes the listener only once there are none,
  // since httplib ends a chunked response at shutdown where it is, without its last chunks and [DONE].
  std::atomic<int> streams_writing{0};
  std::thread stopper;
  std::mutex id_m;
  std::mt19937_64 rng{std::random_device{}()};
  std::mutex metrics_m;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (path, status) -> count
  // The requests being answered, by their httplib::Request (one object from routing to the log line, on one
  // HTTP thread); log_m also keeps the sink's lines whole.
  std::mutex log_m;
  std::unordered_map<const httplib::Request*, std::shared_ptr<RequestLog>> in_flight;
  // Structured output: the compiler for this model's vocabulary, made at the first request that asks for a
  // constraint (its tables take a moment on a large vocabulary); it caches the grammars it compiles.
  std::once_flag grammars_once;
  std::unique_ptr<GrammarCompiler> grammars;
  // A request's constraint compiled (ApiError 400 naming its field for one the engine refuses).
  std::shared_ptr<const Grammar> compile_constraint(const CompletionRequest::Constraint& c);

  Impl(std::shared_ptr<const Model> m, Tokenizer t, ServerOptions opt)
      : model(std::move(m)), tok(std::move(t)), o(std::move(opt)) {}

  // --allowed-origins, lower-cased once (scheme and host compare without case, as browsers lower-case them
  // anyway); any_origin: "*" was given.
  std::vector<std::string> origins_lower;
  bool any_origin = false;
  static std::string lower(std::string_view v);
  // An Origin header against --allowed-origins.
  bool origin_allowed(std::string_view origin) const;

  // server.cpp: the routes, and the model as /v1/models lists it.
  void setup_routes();
  json model_object() const;

  // openai_response.cpp: /v1/completions and /v1/chat/completions, and the token texts their logprobs show.
  void completions(const httplib::Request& req, httplib::Response& res, CompletionRequest cr);
  // A token's decoded bytes ("" for an id past the tokenizer's vocabulary).
  std::string token_piece(int32_t id) const;
  // A chat token's text (its "bytes" field carries what U+FFFD stands for).
  std::string token_text(int32_t id) const;
  // A completions token's text, where there is no bytes field: "bytes:\\xNN..." for a part of a character.
  std::string legacy_token_text(int32_t id) const;
  json top_json(const std::vector<std::pair<int32_t, double>>& top) const;
  // A chat logprobs entry: the token's text, its logprob, its bytes, and the alternatives alike.
  json chat_logprob(int32_t id, double logprob) const;
  std::string new_id(const char* prefix);
  uint64_t random_seed();

  // metrics.cpp: each answered request counted by its route, and the Prometheus text of /metrics.
  void count_request(const std::string& path, int status);
  std::string metrics_text();

  // access_log.cpp: a request's record from routing on, and its access line once the response is written.
  void begin_request(const httplib::Request& req);
  std::shared_ptr<RequestLog> request_log(const httplib::Request& req);
  void log_request(const httplib::Request& req, const httplib::Response& res);
  void log(const std::string& line);

  // tokenize_routes.cpp: POST /tokenize, POST /detokenize, GET /tokenizer_info.
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  json tokenizer_info() const;
};

}  // namespace minigpt::server
