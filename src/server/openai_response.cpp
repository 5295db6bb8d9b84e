// The OpenAI response shapes of /v1/completions and /v1/chat/completions: the choices go to the Scheduler,
// their events come back as one JSON response or as server-sent events, chunk by chunk.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "minigpt/error.h"
#include "server/client_connection.h"
#include "server/server_impl.h"

namespace minigpt::server {

namespace {

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

// --verbose: what the request asked for, as the access line's key=value pairs (its seed as used, so that a
// sampled answer can be asked for again).
std::string request_settings(const CompletionRequest& cr, uint64_t seed) {
  const SamplingParams& p = cr.gen.sampling;
  char b[400];
  std::snprintf(b, sizeof b,
                " n=%lld max_tokens=%lld stream=%s temperature=%g top_k=%lld top_p=%g min_p=%g "
                "repetition_penalty=%g repeat_last_n=%lld presence_penalty=%g frequency_penalty=%g "
                "logit_bias=%zu stop=%zu seed=%llu",
                (long long)cr.n, (long long)cr.max_tokens, cr.stream ? "true" : "false",
                double(p.temperature), (long long)p.top_k, double(p.top_p), double(p.min_p),
                double(p.repetition_penalty), (long long)p.repeat_last_n, double(p.presence_penalty),
                double(p.frequency_penalty), p.logit_bias.size(), cr.gen.stop.size(),
                (unsigned long long)seed);
  const json model = cr.model.empty() ? json(nullptr) : json(cr.model.substr(0, 200));
  return "model=" + dump(model) + b;
}

// A chat reply's message: its text, or with tools the content and calls read from it (finish_reason
// "tool_calls" when there are calls). `call_id` makes each call's id.
template <typename MakeId>
json reply_message(const std::optional<ToolCalling>& tools, const std::string& text, std::string& reason,
                   MakeId call_id) {
  json m = {{"role", "assistant"}, {"content", text}};
  if (!tools) return m;
  const ToolReply r = parse_tool_reply(*tools, text);
  m["content"] = r.content ? json(*r.content) : json(nullptr);
  if (r.calls.empty()) return m;
  json calls = json::array();
  for (const ToolCall& c : r.calls) {
    calls.push_back({{"id", call_id()},
                     {"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  m["tool_calls"] = std::move(calls);
  if (reason == "stop") reason = "tool_calls";
  return m;
}

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

std::string Server::Impl::token_piece(int32_t id) const {
  return id < 0 || id >= tok.n_vocab() ? "" : tok.decode(std::span<const int32_t>(&id, 1));
}

std::string Server::Impl::token_text(int32_t id) const { return utf8_sanitize(token_piece(id)); }

std::string Server::Impl::legacy_token_text(int32_t id) const { return legacy_token_string(token_piece(id)); }

json Server::Impl::top_json(const std::vector<std::pair<int32_t, double>>& top) const {
  json d = json::object();
  for (const auto& [id, lp] : top) {
    const std::string k = legacy_token_text(id);
    if (!d.contains(k)) d[k] = lp;  // tokens with the same text: the likelier one (listed first)
  }
  return d;
}

json Server::Impl::chat_logprob(int32_t id, double logprob) const {
  json bytes = json::array();
  if (id >= 0 && id < tok.n_vocab()) {
    for (unsigned char ch : tok.token_bytes(id)) bytes.push_back(int(ch));
  }
  return {{"token", token_text(id)}, {"logprob", logprob}, {"bytes", bytes}};
}

std::string Server::Impl::new_id(const char* prefix) {
  std::lock_guard<std::mutex> l(id_m);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", (unsigned long long)rng(),
                (unsigned long long)(rng() >> 32));
  return std::string(prefix) + buf;
}

uint64_t Server::Impl::random_seed() {
  std::lock_guard<std::mutex> l(id_m);
  return rng();
}

// /v1/completions and /v1/chat/completions: the choices go to the scheduler; their events come back as the
// legacy completion shape (text, logprobs with tokens / token_logprobs / top_logprobs / text_offset) or the
// chat shape (message / delta, logprobs.content).
std::shared_ptr<const Grammar> Server::Impl::compile_constraint(const CompletionRequest::Constraint& k) {
  std::call_once(grammars_once,
                 [&] { grammars = std::make_unique<GrammarCompiler>(tok, model->config().n_vocab); });
  using Kind = CompletionRequest::Constraint::Kind;
  try {
    switch (k.kind) {
      case Kind::JsonObject:
        return grammars->json_object();
      case Kind::JsonSchema:
        return grammars->json_schema(k.text);
      case Kind::Gbnf:
        return grammars->gbnf(k.text);
      case Kind::StructuralTag:
        return grammars->structural_tag(k.text);
    }
  } catch (const Error& e) {
    // The engine's message begins "json_schema: " or "grammar: "; the field named is the request's.
    std::string m = e.what();
    for (const std::string_view prefix :
         {"json_schema: ", "grammar: ", "json_object: ", "structural_tag: "}) {
      if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
    }
    const char* what = k.kind == Kind::Gbnf            ? "the grammar"
                       : k.kind == Kind::StructuralTag ? "a tool's parameters schema"
                                                       : "the JSON schema";
    throw ApiError(400, k.param + ": " + what + " is not one minigpt can follow: " + m, k.param);
  }
  throw ApiError(500, "unknown constraint kind");
}

void Server::Impl::completions(const httplib::Request& req, httplib::Response& res, CompletionRequest cr) {
  const Config& c = model->config();
  // Compiled before any choice starts: a schema or grammar the engine refuses is the request's 400.
  if (cr.constraint) cr.gen.grammar = compile_constraint(*cr.constraint);
  const bool chat = cr.chat;
  const uint64_t seed = cr.seed ? *cr.seed : random_seed();
  std::vector<ChoiceSpec> specs;
  std::vector<EchoPrompt> echoes;
  int64_t prompt_tokens = 0;
  for (auto& p : cr.prompts) {
    const std::vector<int32_t> prepared = [&] {
      try {
        return prepare_prompt(p, cr.gen, c, &tok, sched->n_ctx());
      } catch (const Error& e) {
        throw ApiError(400, e.what(), chat ? "messages" : "prompt");
      }
    }();
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
  // The access line's counts (a request that got this far ran a completion, or was refused at submit).
  auto rl = request_log(req);
  if (!rl) rl = std::make_shared<RequestLog>();
  rl->prompt_tokens = prompt_tokens;
  if (o.verbose) rl->settings = request_settings(cr, seed);
  auto task = std::make_shared<Task>(std::move(specs));
  // A stream counts in streams_writing from before its task is submitted (so that stop() cannot find the
  // scheduler idle and no stream counted while its last events are unwritten) until httplib has written
  // its response and destroys the provider holding this.
  struct Counted {
    std::atomic<int>& n;
    explicit Counted(std::atomic<int>& c) : n(c) { ++n; }
    ~Counted() { --n; }
  };
  const auto writing = cr.stream ? std::make_shared<Counted>(streams_writing) : nullptr;
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
          res.set_content(ApiError(499, "the client closed the connection before the answer").body(),
                          "application/json");
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
          rl->completion_tokens = completion_tokens;
          ++finished;
          continue;
        }
        if (e.kind == Event::Kind::Prompt && e.choice % n == 0) rl->cached_tokens = cached += e.cached;
        pieces[size_t(e.choice)].append(piece_of(e, chars));
      }
    }
    json choices = json::array();
    for (size_t i = 0; i < n_choices; ++i) {
      if (chat) {
        json message =
            reply_message(cr.tools, pieces[i].text, reasons[i], [this] { return new_id("call_"); });
        choices.push_back({{"index", i},
                           {"message", std::move(message)},
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
    bool started = false;           // chat: the role chunks went out
    std::vector<std::string> held;  // with tools: each choice's text so far
    Clock::time_point last_write = Clock::now();
  };
  auto st = std::make_shared<StreamState>();
  st->chars.assign(n_choices, 0);
  // With tools, a choice's text is held until it ends and then read: its content and calls go out then, each
  // call as OpenAI streams one (its id, type and name with empty arguments, then the arguments).
  const std::optional<ToolCalling> tools = cr.tools;
  st->held.assign(tools ? n_choices : 0, "");
  const bool include_usage = cr.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=, this](size_t, httplib::DataSink& sink) mutable {
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
            std::string reason = finish_reason(e.reason);
            if (tools) {
              std::string& text = st->held[size_t(e.choice)];
              text += e.token.text;
              const json m = reply_message(tools, text, reason, [this] { return new_id("call_"); });
              const auto delta = [&](json d) {
                out += chunk(json::array({{{"index", e.choice},
                                           {"delta", std::move(d)},
                                           {"logprobs", nullptr},
                                           {"finish_reason", nullptr}}}),
                             nullptr);
              };
              if (m["content"].is_string() && !m["content"].get<std::string>().empty())
                delta({{"content", m["content"]}});
              if (m.contains("tool_calls")) {
                for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
                  const json& c = m["tool_calls"][k];
                  delta({{"tool_calls",
                          json::array(
                              {{{"index", k},
                                {"id", c["id"]},
                                {"type", "function"},
                                {"function", {{"name", c["function"]["name"]}, {"arguments", ""}}}}})}});
                  delta({{"tool_calls",
                          json::array(
                              {{{"index", k}, {"function", {{"arguments", c["function"]["arguments"]}}}}})}});
                }
              }
              ch["delta"] = json::object();
            } else if (chat) {
              ch["delta"] = e.token.text.empty() ? json::object() : json{{"content", e.token.text}};
            } else {
              ch["text"] = e.token.text;
            }
            ch["finish_reason"] = reason;
            st->completion_tokens += e.generated;
            rl->completion_tokens = st->completion_tokens;
            ++st->finished;
          } else {
            if (e.kind == Event::Kind::Prompt && e.choice % n == 0)
              rl->cached_tokens = st->cached += e.cached;
            const Piece p = piece_of(e, st->chars);
            if (p.empty()) continue;  // a token inside a character: it goes out with the next one
            if (tools) {
              st->held[size_t(e.choice)] += p.text;
              continue;
            }
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
      [task, writing](bool) {
        (void)writing;  // held until the response is written
        task->cancel();
      });
}

}  // namespace minigpt::server
