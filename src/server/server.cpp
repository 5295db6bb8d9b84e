// The HTTP side of `minigpt serve`: cpp-httplib (what llama-server is built on; Debian's libcpp-httplib-dev)
// serves the routes; every request body is checked before anything runs; completions go to the Scheduler
// and come back as events, turned here into the OpenAI response shapes (one JSON, or server-sent events).
#include "server/server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "io/json_parse.h"
#include "minigpt/error.h"
#include "server/scheduler.h"

namespace minigpt::server {

using json = nlohmann::json;

namespace {

// Connections the kernel completes before the server accepts them (more than the HTTP threads: a burst
// of clients, each kept until a thread is free or the queue's 503).
constexpr int kListenBacklog = 1024;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t code_points(std::string_view s) {
  int64_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

const char* finish_reason(StopReason r) {
  switch (r) {
    case StopReason::Eos:
    case StopReason::Stop:
      return "stop";
    case StopReason::Length:
    case StopReason::Context:
      return "length";
    case StopReason::Cancelled:
      return "abort";
  }
  return "stop";
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.status() == 503) res.set_header("Retry-After", "1");
  res.set_content(e.body(), "application/json");
}

// One choice's text and logprobs as they grow (the whole response, or one streamed chunk's delta).
struct Piece {
  std::string text;
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  json content = json::array();  // chat: the logprobs' "content" entries
  bool empty() const { return text.empty() && tokens.empty() && content.empty(); }
  void append(const Piece& p) {
    text += p.text;
    for (const auto& x : p.content) content.push_back(x);
    for (const auto& x : p.tokens) tokens.push_back(x);
    for (const auto& x : p.token_logprobs) token_logprobs.push_back(x);
    for (const auto& x : p.top_logprobs) top_logprobs.push_back(x);
    for (const auto& x : p.text_offset) text_offset.push_back(x);
  }
  json logprobs_json() const {
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top_logprobs},
            {"text_offset", text_offset}};
  }
};

}  // namespace

std::string legacy_token_string(std::string_view text) {
  if (utf8_sanitize(text) == text) return std::string(text);
  std::string out = "bytes:";
  for (const unsigned char ch : text) {
    static const char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[ch >> 4];
    out += kHex[ch & 15];
  }
  return out;
}

std::string origin_problem(std::string_view origin) {
  const std::string q = "'" + std::string(origin) + "'";
  if (origin == "*" || origin == "null") return "";
  const size_t sep = origin.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return q + " is not an origin (scheme://host[:port], e.g. http://localhost:3000; \"null\" or \"*\")";
  }
  for (size_t i = 0; i < sep; ++i) {
    const char ch = origin[i];
    if (!(std::isalpha(static_cast<unsigned char>(ch)) ||
          (i > 0 && (std::isdigit(static_cast<unsigned char>(ch)) || ch == '+' || ch == '-' || ch == '.')))) {
      return q + ": the scheme '" + std::string(origin.substr(0, sep)) + "' is not a URL scheme";
    }
  }
  const std::string_view rest = origin.substr(sep + 3);
  if (rest.empty()) return q + ": no host after the scheme";
  for (const char ch : rest) {
    if (ch == '/' || ch == '?' || ch == '#') {
      return q + ": an origin has no path, query or fragment (a browser sends '" +
             std::string(origin.substr(0, sep + 3 + rest.find_first_of("/?#"))) + "')";
    }
    if (static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f || ch == ',') {
      return q + ": a space, a comma or a control character cannot be in an origin";
    }
  }
  return "";
}

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
  std::thread stopper;
  std::mutex id_m;
  std::mt19937_64 rng{std::random_device{}()};
  std::mutex metrics_m;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (path, status) -> count

  Impl(std::shared_ptr<const Model> m, Tokenizer t, ServerOptions opt)
      : model(std::move(m)), tok(std::move(t)), o(std::move(opt)) {}

  // The model as /v1/models lists it (OpenAI's fields, llama-server's "meta").
  json model_object() const {
    const Config& c = model->config();
    return {{"id", o.model_id},
            {"object", "model"},
            {"created", started},
            {"owned_by", "minigpt"},
            {"meta",
             {{"n_ctx", sched->n_ctx()},
              {"n_ctx_train", c.n_ctx},
              {"n_vocab", c.n_vocab},
              {"n_embd", c.n_embd},
              {"n_layer", c.n_layer},
              {"n_parallel", o.n_parallel}}}};
  }

  // --allowed-origins, lower-cased once (scheme and host compare without case, as browsers lower-case them
  // anyway); any_origin: "*" was given.
  std::vector<std::string> origins_lower;
  bool any_origin = false;
  static std::string lower(std::string_view v) {
    std::string r(v);
    for (char& ch : r) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return r;
  }
  // An Origin header against --allowed-origins.
  bool origin_allowed(std::string_view origin) const {
    if (any_origin) return true;
    const std::string got = lower(origin);
    return std::find(origins_lower.begin(), origins_lower.end(), got) != origins_lower.end();
  }

  // A token's decoded bytes ("" for an id past the tokenizer's vocabulary).
  std::string token_piece(int32_t id) const {
    return id < 0 || id >= tok.n_vocab() ? "" : tok.decode(std::span<const int32_t>(&id, 1));
  }
  // A chat token's text (its "bytes" field carries what U+FFFD stands for).
  std::string token_text(int32_t id) const { return utf8_sanitize(token_piece(id)); }
  // A completions token's text, where there is no bytes field: "bytes:\\xNN..." for a part of a character.
  std::string legacy_token_text(int32_t id) const { return legacy_token_string(token_piece(id)); }
  json top_json(const std::vector<std::pair<int32_t, double>>& top) const {
    json d = json::object();
    for (const auto& [id, lp] : top) {
      const std::string k = legacy_token_text(id);
      if (!d.contains(k)) d[k] = lp;  // tokens with the same text: the likelier one (listed first)
    }
    return d;
  }
  std::string new_id(const char* prefix) {
    std::lock_guard<std::mutex> l(id_m);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%016llx%08llx", (unsigned long long)rng(),
                  (unsigned long long)(rng() >> 32));
    return std::string(prefix) + buf;
  }
  uint64_t random_seed() {
    std::lock_guard<std::mutex> l(id_m);
    return rng();
  }

  // A chat logprobs entry: the token's text, its logprob, its bytes, and the alternatives alike.
  json chat_logprob(int32_t id, double logprob) const {
    json bytes = json::array();
    if (id >= 0 && id < tok.n_vocab()) {
      for (unsigned char ch : tok.token_bytes(id)) bytes.push_back(int(ch));
    }
    return {{"token", token_text(id)}, {"logprob", logprob}, {"bytes", bytes}};
  }

  void setup_routes();
  void completions(const httplib::Request& req, httplib::Response& res, CompletionRequest cr);
  std::string metrics_text();
  json tokenizer_info() const;
};

namespace {

// The usage object; cached: prompt tokens a slot's cache held (the first choice of each prompt), as the
// OpenAI API's prompt_tokens_details.cached_tokens.
json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// The prompt as echo shows it: the stream decoder's pieces, each token's text and offset.
struct EchoPrompt {
  std::string text;
  std::vector<std::string> token_texts;
  std::vector<int64_t> offsets;  // code points
};

EchoPrompt echo_prompt(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  EchoPrompt e;
  StreamDecoder dec(tok);
  int64_t chars = 0;
  for (int32_t id : ids) {
    e.offsets.push_back(chars);
    e.token_texts.push_back(
        id < tok.n_vocab() ? legacy_token_string(tok.decode(std::span<const int32_t>(&id, 1))) : "");
    const std::string piece = id < tok.n_vocab() ? dec.push(id) : "";
    chars += code_points(piece);
    e.text += piece;
  }
  e.text += dec.flush();
  return e;
}

// The socket a request came on, found by its two addresses among this process's descriptors (httplib 0.11
// gives a handler no socket; later versions have Request::is_connection_closed for this); -1 when none
// matches. The descriptor stays open while the handler runs: httplib closes it after the response.
std::string numeric_host(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return "";
  }
  return host;
}
int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}
int connection_socket(const httplib::Request& req) {
  if (req.local_port <= 0 || req.remote_port <= 0) return -1;  // not from a TCP connection (a test's Request)
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = e.path().filename().string();
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0' || fd < 0 || fd > INT32_MAX) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;  // not a socket
    if (port_of(local) != req.local_port) continue;
    if (::getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;  // the listener
    if (port_of(peer) != req.remote_port || numeric_host(peer, pl) != req.remote_addr) continue;
    return int(fd);
  }
  return -1;
}
// Whether the client closed (or reset) the connection: a peek that reads end-of-file or fails. Bytes waiting
// (a next request on a kept-alive connection) mean it is still there.
bool client_gone(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace

// /v1/completions and /v1/chat/completions: the choices go to the scheduler; their events come back as the
// legacy completion shape (text, logprobs with tokens / token_logprobs / top_logprobs / text_offset) or the
// chat shape (message / delta, logprobs.content).
void Server::Impl::completions(const httplib::Request& req, httplib::Response& res, CompletionRequest cr) {
  const Config& c = model->config();
  const bool chat = cr.chat;
  const uint64_t seed = cr.seed ? *cr.seed : random_seed();
  std::vector<ChoiceSpec> specs;
  std::vector<EchoPrompt> echoes;
  int64_t prompt_tokens = 0;
  for (auto& p : cr.prompts) {
    std::vector<int32_t> prepared;
    try {
      prepared = prepare_prompt(p, cr.gen, c, &tok, sched->n_ctx());
    } catch (const Error& e) {
      throw ApiError(400, e.what(), chat ? "messages" : "prompt");
    }
    prompt_tokens += int64_t(prepared.size());
    if (cr.echo) echoes.push_back(echo_prompt(tok, prepared));
    for (int64_t j = 0; j < cr.n; ++j) {
      ChoiceSpec s;
      s.prompt = prepared;
      s.options = cr.gen;
      s.options.sampling.seed = seed + uint64_t(j);
      s.max_tokens = cr.max_tokens;
      s.prompt_logprobs = cr.echo && cr.logprobs.has_value();
      s.cache_prompt = cr.cache_prompt;
      specs.push_back(std::move(s));
    }
  }
  const size_t n_choices = specs.size();
  auto task = std::make_shared<Task>(std::move(specs));
  if (draining) throw ApiError(503, "the server is shutting down");
  if (!sched->submit(task)) {
    throw ApiError(503, "the server is busy: every slot is taken and the queue is full; retry later");
  }

  const std::string id = new_id(chat ? "chatcmpl-" : "cmpl-");
  const char* object = chat ? "chat.completion" : "text_completion";
  const char* chunk_object = chat ? "chat.completion.chunk" : "text_completion";
  const int64_t created = int64_t(std::time(nullptr));
  const std::string model_id = o.model_id;
  const json fingerprint = o.system_fingerprint.empty() ? json(nullptr) : json(o.system_fingerprint);
  const bool logprobs = cr.logprobs.has_value();
  const int64_t n = cr.n;

  // Turns one event into its choice's piece; `chars` counts each choice's code points so far.
  auto piece_of = [this, logprobs, echoes, n, chat](const Event& e, std::vector<int64_t>& chars) {
    Piece p;
    const size_t ci = size_t(e.choice);
    if (e.kind == Event::Kind::Prompt) {
      if (echoes.empty()) return p;
      const EchoPrompt& ep = echoes[ci / size_t(n)];
      p.text = ep.text;
      if (logprobs) {
        for (size_t i = 0; i < ep.token_texts.size(); ++i) {
          p.tokens.push_back(ep.token_texts[i]);
          p.text_offset.push_back(chars[ci] + ep.offsets[i]);
          // The first token has no logprob: nothing precedes it (null, as the OpenAI API gives it).
          p.token_logprobs.push_back(i == 0 ? json(nullptr) : json(e.prompt_logprobs[i - 1]));
          p.top_logprobs.push_back(i == 0 ? json(nullptr) : top_json(e.prompt_top[i - 1]));
        }
      }
    } else if (e.kind == Event::Kind::Token) {
      p.text = e.token.text;
      if (logprobs && chat) {
        json entry = chat_logprob(e.token.id, e.token.logprob);
        entry["top_logprobs"] = json::array();
        for (const auto& [tid, lp] : e.token.top) entry["top_logprobs"].push_back(chat_logprob(tid, lp));
        p.content.push_back(std::move(entry));
      } else if (logprobs) {
        p.tokens.push_back(legacy_token_text(e.token.id));
        p.token_logprobs.push_back(e.token.logprob);
        p.top_logprobs.push_back(top_json(e.token.top));
        p.text_offset.push_back(chars[ci]);
      }
    }
    chars[ci] += code_points(p.text);
    return p;
  };

  if (!cr.stream) {
    std::vector<Piece> pieces(n_choices);
    std::vector<int64_t> chars(n_choices, 0);
    std::vector<std::string> reasons(n_choices);
    int64_t completion_tokens = 0, cached = 0;
    size_t finished = 0;
    // A client that goes away before the answer (a timeout, Ctrl-C) cancels it, as a stream's does: its slot
    // frees at the next step instead of running to max_tokens.
    const int conn = connection_socket(req);
    auto checked = Clock::now();
    while (finished < n_choices) {
      std::vector<Event> evs;
      task->wait(evs, std::chrono::milliseconds(250));
      if (Clock::now() - checked >= std::chrono::milliseconds(250)) {
        checked = Clock::now();
        if (client_gone(conn)) {
          task->cancel();
          res.status = 499;  // nginx's "client closed request": no one reads it; the log and metrics do
          return;
        }
      }
      for (const Event& e : evs) {
        if (e.kind == Event::Kind::Failed) {
          task->cancel();
          throw ApiError(500, "generation failed: " + e.error);
        }
        if (e.kind == Event::Kind::Finished) {
          pieces[size_t(e.choice)].text += e.token.text;
          reasons[size_t(e.choice)] = finish_reason(e.reason);
          completion_tokens += e.generated;
          ++finished;
          continue;
        }
        if (e.kind == Event::Kind::Prompt && e.choice % n == 0) cached += e.cached;
        pieces[size_t(e.choice)].append(piece_of(e, chars));
      }
    }
    json choices = json::array();
    for (size_t i = 0; i < n_choices; ++i) {
      if (chat) {
        choices.push_back({{"index", i},
                           {"message", {{"role", "assistant"}, {"content", pieces[i].text}}},
                           {"logprobs", logprobs ? json{{"content", pieces[i].content}} : json(nullptr)},
                           {"finish_reason", reasons[i]}});
        continue;
      }
      choices.push_back({{"text", pieces[i].text},
                         {"index", i},
                         {"logprobs", logprobs ? pieces[i].logprobs_json() : json(nullptr)},
                         {"finish_reason", reasons[i]}});
    }
    json out = {{"id", id},
                {"object", object},
                {"created", created},
                {"model", model_id},
                {"system_fingerprint", fingerprint},
                {"choices", choices},
                {"usage", usage_json(prompt_tokens, completion_tokens, cached)}};
    res.set_content(dump(out), "application/json");
    return;
  }

  struct StreamState {
    std::vector<int64_t> chars;
    size_t finished = 0;
    int64_t completion_tokens = 0;
    int64_t cached = 0;  // prompt tokens a slot's cache held (the first choice of each prompt)
    bool done = false;
    bool started = false;  // chat: the role chunks went out
    Clock::time_point last_write = Clock::now();
  };
  auto st = std::make_shared<StreamState>();
  st->chars.assign(n_choices, 0);
  const bool include_usage = cr.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) mutable {
        auto chunk = [&](const json& choices, const json& usage) {
          json j = {{"id", id},
                    {"object", chunk_object},
                    {"created", created},
                    {"model", model_id},
                    {"system_fingerprint", fingerprint},
                    {"choices", choices}};
          if (include_usage) j["usage"] = usage;
          return "data: " + dump(j) + "\n\n";
        };
        if (chat && !st->started) {
          // As the OpenAI API streams a chat: first each choice's role, with empty content.
          st->started = true;
          std::string first;
          for (size_t i = 0; i < n_choices; ++i) {
            first += chunk(json::array({{{"index", i},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}}),
                           nullptr);
          }
          st->last_write = Clock::now();
          if (!sink.write(first.data(), first.size())) {
            task->cancel();
            return false;
          }
        }
        std::vector<Event> evs;
        if (!task->wait(evs, std::chrono::milliseconds(250))) {
          // Nothing yet (queued, or a long prompt): an SSE comment now and then finds a client that left.
          if (Clock::now() - st->last_write > std::chrono::seconds(2)) {
            st->last_write = Clock::now();
            static const char kPing[] = ": ping\n\n";
            if (!sink.write(kPing, sizeof kPing - 1)) {
              task->cancel();
              return false;
            }
          }
          return true;
        }
        std::string out;
        for (const Event& e : evs) {
          if (e.kind == Event::Kind::Failed) {
            out += "data: " + ApiError(500, "generation failed: " + e.error).body() + "\n\n";
            st->done = true;
            task->cancel();
            break;
          }
          json ch = {{"index", e.choice}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
          if (e.kind == Event::Kind::Finished) {
            // The text no token carried goes with the last chunk.
            if (chat) {
              ch["delta"] = e.token.text.empty() ? json::object() : json{{"content", e.token.text}};
            } else {
              ch["text"] = e.token.text;
            }
            ch["finish_reason"] = finish_reason(e.reason);
            st->completion_tokens += e.generated;
            ++st->finished;
          } else {
            if (e.kind == Event::Kind::Prompt && e.choice % n == 0) st->cached += e.cached;
            const Piece p = piece_of(e, st->chars);
            if (p.empty()) continue;  // a token inside a character: it goes out with the next one
            if (chat) {
              ch["delta"] = {{"content", p.text}};
              if (logprobs) ch["logprobs"] = {{"content", p.content}};
            } else {
              ch["text"] = p.text;
              if (logprobs) ch["logprobs"] = p.logprobs_json();
            }
          }
          out += chunk(json::array({ch}), nullptr);
        }
        if (!st->done && st->finished == n_choices) {
          if (include_usage) {
            json j = {{"id", id},
                      {"object", chunk_object},
                      {"created", created},
                      {"model", model_id},
                      {"system_fingerprint", fingerprint},
                      {"choices", json::array()},
                      {"usage", usage_json(prompt_tokens, st->completion_tokens, st->cached)}};
            out += "data: " + dump(j) + "\n\n";
          }
          st->done = true;
        }
        if (st->done) out += "data: [DONE]\n\n";
        if (!out.empty()) {
          st->last_write = Clock::now();
          if (!sink.write(out.data(), out.size())) {
            task->cancel();  // the client went away: its slot frees at the next step
            return false;
          }
        }
        if (st->done) sink.done();
        return true;
      },
      [task](bool) { task->cancel(); });
}

std::string Server::Impl::metrics_text() {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  // The shortest text that reads back as the same double (0.025, not %.17g's 0.025000000000000001), as
  // Prometheus' own clients print bucket bounds and sums.
  auto num = [](double x) {
    char b[64];
    const auto r = std::to_chars(b, b + sizeof b, x);
    return std::string(b, r.ptr);
  };
  line("# HELP minigpt_requests_total HTTP requests answered, by path and status.");
  line("# TYPE minigpt_requests_total counter");
  {
    std::lock_guard<std::mutex> l(metrics_m);
    for (const auto& [k, v] : requests) {
      line("minigpt_requests_total{path=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(v));
    }
  }
  SchedulerStats& s = sched->stats();
  line("# HELP minigpt_prompt_tokens_total Prompt tokens evaluated.");
  line("# TYPE minigpt_prompt_tokens_total counter");
  line("minigpt_prompt_tokens_total " + std::to_string(s.prompt_tokens.load()));
  line("# HELP minigpt_prompt_tokens_cached_total Prompt tokens not evaluated: a slot's cache held them.");
  line("# TYPE minigpt_prompt_tokens_cached_total counter");
  line("minigpt_prompt_tokens_cached_total " + std::to_string(s.prompt_tokens_cached.load()));
  line(
      "# HELP minigpt_prompt_tokens_shared_total Prompt tokens not evaluated: another choice of the request "
      "evaluated the same prompt (n > 1).");
  line("# TYPE minigpt_prompt_tokens_shared_total counter");
  line("minigpt_prompt_tokens_shared_total " + std::to_string(s.prompt_tokens_shared.load()));
  line("# HELP minigpt_generated_tokens_total Tokens generated.");
  line("# TYPE minigpt_generated_tokens_total counter");
  line("minigpt_generated_tokens_total " + std::to_string(s.generated_tokens.load()));
  line("# HELP minigpt_steps_total Forward steps run (each batches every running sequence).");
  line("# TYPE minigpt_steps_total counter");
  line("minigpt_steps_total " + std::to_string(s.steps.load()));
  line("# HELP minigpt_queue_depth Choices waiting for a slot.");
  line("# TYPE minigpt_queue_depth gauge");
  line("minigpt_queue_depth " + std::to_string(s.queued.load()));
  line("# HELP minigpt_slots_busy Slots generating.");
  line("# TYPE minigpt_slots_busy gauge");
  line("minigpt_slots_busy " + std::to_string(s.busy.load()));
  line("# HELP minigpt_slots_total Slots (-np).");
  line("# TYPE minigpt_slots_total gauge");
  line("minigpt_slots_total " + std::to_string(o.n_parallel));
  std::lock_guard<std::mutex> l(s.m);
  for (const auto& [name, help, h] :
       {std::tuple<const char*, const char*, const Histogram*>{
            "minigpt_time_to_first_token_seconds", "From a request's arrival to its first token.", &s.ttft},
        {"minigpt_inter_token_latency_seconds", "Between two tokens of one choice.", &s.itl}}) {
    line(std::string("# HELP ") + name + " " + help);
    line(std::string("# TYPE ") + name + " histogram");
    for (size_t i = 0; i < h->bounds.size(); ++i) {
      line(std::string(name) + "_bucket{le=\"" + num(h->bounds[i]) + "\"} " + std::to_string(h->counts[i]));
    }
    line(std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(h->count));
    line(std::string(name) + "_sum " + num(h->sum));
    line(std::string(name) + "_count " + std::to_string(h->count));
  }
  return out;
}

namespace {
// A 400 for a Content-Length header that is not a byte count a 64-bit size holds (httplib read "abc" as 0 and
// "-5" as a huge length), or nothing.
std::optional<ApiError> bad_content_length(const httplib::Request& req) {
  if (!req.has_header("Content-Length")) return std::nullopt;
  const std::string length = req.get_header_value("Content-Length");
  if (!length.empty() && length.size() <= 19 && length.find_first_not_of("0123456789") == std::string::npos)
    return std::nullopt;
  return ApiError(400, "the Content-Length header '" + length.substr(0, 40) + "' is not a number of bytes");
}
// The methods a route of this server takes ("" for a path it does not serve), for the Allow header. Every
// endpoint is also served without /v1 (as llama-server does); httplib answers HEAD with the GET handler.
std::string allowed_methods(const std::string& path) {
  const std::string_view p =
      std::string_view(path).starts_with("/v1/") ? std::string_view(path).substr(3) : std::string_view(path);
  if (p == "/completions" || p == "/chat/completions") return "POST, OPTIONS";
  if (p == "/models" || (p.starts_with("/models/") && p.size() > 8)) return "GET, HEAD, OPTIONS";
  if (path == "/tokenize" || path == "/detokenize") return "POST, OPTIONS";
  if (path == "/health" || path == "/metrics" || path == "/tokenizer_info") return "GET, HEAD, OPTIONS";
  return "";
}
}  // namespace

void Server::Impl::setup_routes() {
  // Every handler answers errors in the OpenAI shape; nothing a client sends escapes as an exception.
  auto guarded = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, ApiError(e.kind() == ErrorKind::Argument ? 400 : 500, e.what()));
      } catch (const std::bad_alloc&) {
        send_error(res, ApiError(500, "out of memory"));
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
      }
    };
  };
  auto parse_object = [](const std::string& body) {
    json j;
    try {
      j = parse_json_bounded(true, body);
    } catch (const json::exception& e) {  // a syntax error, or a number out of range
      throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
    return j;
  };

  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // CORS (--allowed-origins): a page of an allowed origin may read every response, errors included, and
    // its preflight (OPTIONS, before a POST with a JSON body or an Authorization header) is answered here,
    // ahead of the key check: a browser sends no credentials with it.
    const std::string origin = req.get_header_value("Origin");
    if (!origin.empty() && origin_allowed(origin)) {
      res.set_header("Access-Control-Allow-Origin", any_origin ? "*" : origin);
      if (!any_origin) res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS" && req.has_header("Access-Control-Request-Method")) {
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        // Whatever headers the page's client asks for (OpenAI's SDKs add their own x-stainless-* ones).
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        res.set_header("Access-Control-Max-Age", "600");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // httplib reads a Content-Length it cannot parse ("abc") as 0: the body would be parsed as empty.
    if (const auto bad = bad_content_length(req)) {
      send_error(res, *bad);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (o.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth != "Bearer " + o.api_key) {
      send_error(res, ApiError(401,
                               auth.empty() ? "no API key given (Authorization: Bearer KEY)"
                                            : "incorrect API key provided",
                               "", "authentication_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // httplib's refusals come here with its status alone: say which part of the request it was.
    const std::string length = req.get_header_value("Content-Length");
    const bool has_length = req.has_header("Content-Length");
    if (const auto bad = bad_content_length(req)) {
      send_error(res, *bad);
    } else if (res.status == 413 && has_length && std::stoull(length) <= o.max_body &&
               req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded")) {
      // httplib reads a form-encoded body (curl -d's default type) into memory to parse it, and refuses one
      // over 8192 bytes (CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH, fixed in Debian's library).
      send_error(res,
                 ApiError(413, "the body is " + length +
                                   " bytes sent as application/x-www-form-urlencoded (curl -d's default), "
                                   "which the HTTP library takes only up to 8192 bytes: send it with "
                                   "Content-Type: application/json"));
    } else if (res.status == 413) {
      send_error(res,
                 ApiError(413, "the request body is larger than " + std::to_string(o.max_body) + " bytes"));
    } else if (res.status == 400 && req.method == "POST" && !has_length &&
               !req.has_header("Transfer-Encoding")) {
      send_error(res, ApiError(400, "a POST needs a Content-Length header (or Transfer-Encoding: chunked)"));
    } else if (const std::string allow = res.status == 404 ? allowed_methods(req.path) : ""; !allow.empty()) {
      // A route that exists, asked with another method: 405 with the methods it takes (RFC 9110 15.5.6),
      // as the OpenAI API answers a GET /v1/completions. OPTIONS (not a CORS preflight, answered above)
      // says them too.
      res.set_header("Allow", allow);
      if (req.method == "OPTIONS") {
        res.status = 204;
        return;
      }
      send_error(res, ApiError(405, "method " + req.method + " is not allowed for " + req.path +
                                        " (it takes " + allow + ")"));
    } else if (res.status == 404) {
      send_error(res, ApiError(404, "no such endpoint: " + req.method + " " + req.path));
    } else {
      send_error(res,
                 ApiError(res.status, "bad request (HTTP " + std::to_string(res.status) + ")" +
                                          (res.status == 400 ? std::string(": not a well-formed HTTP/1.1 "
                                                                           "request (its request line, "
                                                                           "headers or chunked body)")
                                                             : std::string())));
    }
  });
  // Counted before the response is written (httplib's post-routing handler; its logger runs after the write,
  // so a client could read /metrics before its own request was counted).
  svr.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    static const char* kKnown[] = {
        "/v1/completions", "/v1/chat/completions", "/v1/models",     "/health", "/metrics",
        "/tokenize",       "/detokenize",          "/tokenizer_info"};
    std::string path = "other";
    for (const char* k : kKnown) {
      // the endpoints without /v1 count as theirs; /v1/models/ID as /v1/models
      const std::string_view v1(k);
      if (req.path == k || (v1.starts_with("/v1/") && req.path == v1.substr(3)) ||
          (v1 == "/v1/models" && (req.path.starts_with("/v1/models/") || req.path.starts_with("/models/"))))
        path = k;
    }
    std::lock_guard<std::mutex> l(metrics_m);
    ++requests[{path, res.status}];
  });

  // Each endpoint also without the /v1 prefix, as llama-server serves them (a client whose base URL
  // lacks /v1).
  for (const std::string prefix : {"/v1", ""}) {
    svr.Post(prefix + "/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
               completions(req, res, parse_completion_request(req.body, tok, model->config(), limits));
             }));
    svr.Post(prefix + "/chat/completions",
             guarded([this](const httplib::Request& req, httplib::Response& res) {
               completions(req, res,
                           parse_chat_request(req.body, tok, model->config(), limits,
                                              o.chat_template ? &*o.chat_template : nullptr));
             }));
    svr.Get(prefix + "/models", guarded([this](const httplib::Request&, httplib::Response& res) {
              res.set_content(dump({{"object", "list"}, {"data", json::array({model_object()})}}),
                              "application/json");
            }));
    // The OpenAI API's GET /v1/models/{model} (client.models.retrieve).
    svr.Get(prefix + "/models/(.+)", guarded([this](const httplib::Request& req, httplib::Response& res) {
              const std::string id = req.matches[1].str();
              if (id != o.model_id) {
                throw ApiError(404,
                               "The model '" + id + "' does not exist (this server has '" + o.model_id + "')",
                               "model", "invalid_request_error", "model_not_found");
              }
              res.set_content(dump(model_object()), "application/json");
            }));
  }
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining) {
      res.status = 503;
      res.set_content(R"({"status":"shutting down"})", "application/json");
    } else {
      res.set_content(R"({"status":"ok"})", "application/json");
    }
  });
  svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics_text(), "text/plain; version=0.0.4");
          }));
  // Two shapes of each: llama-server's {"content": TEXT, "add_special": false} and vLLM's {"model", "prompt":
  // TEXT, "add_special_tokens": true} (each with its own default), both answered {"tokens", "count",
  // "max_model_len"}; detokenize answers the text as "content" (llama-server) and "prompt" (vLLM), so that
  // lm-eval's remote tokenizer, which sends and reads vLLM's, works as llama-server's clients do.
  svr.Post(
      "/tokenize", guarded([this, parse_object](const httplib::Request& req, httplib::Response& res) {
        const json j = parse_object(req.body);
        for (const auto& [k, v] : j.items()) {
          if (k != "content" && k != "add_special" && k != "prompt" && k != "add_special_tokens" &&
              k != "model")
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
      }));
  svr.Post("/detokenize", guarded([this, parse_object](const httplib::Request& req, httplib::Response& res) {
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
                 throw ApiError(400,
                                "tokens[" + std::to_string(i) + "]: not a token id in [0, " +
                                    std::to_string(tok.n_vocab()) + ")",
                                "tokens");
               }
               ids.push_back(int32_t(v.get<int64_t>()));
             }
             const std::string text = utf8_sanitize(tok.decode(ids));
             res.set_content(dump({{"content", text}, {"prompt", text}}), "application/json");
           }));
  // vLLM's GET /tokenizer_info, which lm-eval's remote tokenizer reads: the special tokens as text (it
  // encodes eos_token and takes the first id), the context as model_max_length, and the chat template.
  svr.Get("/tokenizer_info", guarded([this](const httplib::Request&, httplib::Response& res) {
            res.set_content(dump(tokenizer_info()), "application/json");
          }));
}

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

Server::Server(std::shared_ptr<const Model> model, Tokenizer tokenizer, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(tokenizer), std::move(options))) {
  Impl& d = *impl_;
  if (d.o.n_parallel < 1 || d.o.n_parallel > 256) {
    throw Error(ErrorKind::Argument, "-np: must be in [1, 256], got " + std::to_string(d.o.n_parallel));
  }
  if (d.o.batch_size < 1 || d.o.batch_size > 8192) {
    throw Error(ErrorKind::Argument,
                "--batch-size: must be in [1, 8192], got " + std::to_string(d.o.batch_size));
  }
  if (d.o.max_queue < 1 || d.o.max_queue > 100000) {
    throw Error(ErrorKind::Argument,
                "--max-queue: must be in [1, 100000], got " + std::to_string(d.o.max_queue));
  }
  for (const std::string& a : d.o.allowed_origins) {
    if (const std::string why = origin_problem(a); !why.empty()) {
      throw Error(ErrorKind::Argument, "--allowed-origins: " + why);
    }
    d.any_origin = d.any_origin || a == "*";
    d.origins_lower.push_back(Impl::lower(a));
  }
  if (d.o.model_id.empty()) d.o.model_id = "minigpt";
  SchedulerOptions so;
  so.n_parallel = d.o.n_parallel;
  so.n_ctx = d.o.n_ctx;
  so.batch_size = d.o.batch_size;
  so.max_queue = d.o.max_queue;
  d.sched = std::make_unique<Scheduler>(d.model, &d.tok, so);
  d.limits.n_ctx = d.sched->n_ctx();
  d.limits.model_defaults = d.o.generation_defaults;
  d.limits.max_choices = std::min<int64_t>(64, d.o.max_queue);
  d.started = int64_t(std::time(nullptr));
  const int threads = d.o.http_threads > 0 ? d.o.http_threads
                                           : int(std::min<int64_t>(d.o.n_parallel + d.o.max_queue + 8, 512));
  d.svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  d.svr.set_payload_max_length(d.o.max_body);
  // Idle keep-alive connections close after 10 s: longer than clients keep them (the openai client's httpx
  // pool expires them after 5 s), so a client never reuses one the server is closing at that moment (with
  // both at 5 s, scripts/loadtest.py saw "Server disconnected without sending a response" now and then, on
  // llama-server too).
  d.svr.set_keep_alive_timeout(10);
  // The listening socket, kept to widen its backlog in bind(). SO_REUSEADDR only, so that a restarted server
  // binds while the old one's connections linger in TIME_WAIT. Not httplib's default_socket_options: it sets
  // SO_REUSEPORT, with which a second `minigpt serve` on a port in use started without a word and the kernel
  // shared the connections between the two servers (maybe two different models); now it is "Address
  // already in use", as llama-server says.
  d.svr.set_socket_options([&d](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    d.listen_fd = int(sock);
  });
  d.setup_routes();
}

Server::~Server() {
  stop(true);
  if (impl_->stopper.joinable()) impl_->stopper.join();
}

int Server::bind() {
  Impl& d = *impl_;
  errno = 0;
  if (d.o.port < 0 || d.o.port > 65535) {
    throw Error(ErrorKind::Argument, "--port: must be in [0, 65535], got " + std::to_string(d.o.port));
  }
  if (d.o.port == 0) {
    d.port = d.svr.bind_to_any_port(d.o.host);
  } else {
    d.port = d.svr.bind_to_port(d.o.host, d.o.port) ? d.o.port : -1;
  }
  if (d.port <= 0) {
    const int err = errno;
    std::string why = err ? std::string(": ") + std::strerror(err) : std::string();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int gai = ::getaddrinfo(d.o.host.c_str(), nullptr, &hints, &found); gai != 0) {
      why = ": the host does not resolve (" + std::string(::gai_strerror(gai)) + ")";
    } else {
      ::freeaddrinfo(found);
    }
    throw Error(ErrorKind::Io, "cannot listen on " + d.o.host + ":" + std::to_string(d.o.port) + why);
  }
  // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed in Debian's compiled library):
  // when more clients connect at once than the accept loop takes in (32 load-test clients while both cores
  // decode), the kernel drops the handshakes past it and clients saw "ReadError" at 1 s. listen() again on
  // the listening socket only sets its backlog; the kernel caps it at net.core.somaxconn.
  if (d.listen_fd >= 0 && ::listen(d.listen_fd, kListenBacklog) != 0) {
    throw Error(ErrorKind::Io,
                "cannot listen on " + d.o.host + ":" + std::to_string(d.port) + ": " + std::strerror(errno));
  }
  return d.port;
}

void Server::run() {
  Impl& d = *impl_;
  std::signal(SIGPIPE, SIG_IGN);  // a client that closed its socket: a failed write, not a dead server
  d.run_called = true;
  if (!d.stopping) d.svr.listen_after_bind();
  d.run_done = true;
}

void Server::stop(bool cancel) {
  Impl& d = *impl_;
  d.draining = true;
  d.sched->stop(cancel);
  if (d.stopping.exchange(true)) return;
  d.stopper = std::thread([&d] {
    d.sched->wait();
    // listen() may not have started yet: wait for it (or for run() never to be called).
    while (d.run_called && !d.run_done && !d.svr.is_running())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    d.svr.stop();
  });
}

}  // namespace minigpt::server
