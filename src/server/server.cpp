// The HTTP side of `minigpt serve`: cpp-httplib (what llama-server is built on; Debian's libcpp-httplib-dev)
// serves the routes, checks every request's headers and API key before anything runs, and owns the
// listening socket and shutdown. The routes' work lives beside it (openai_response.cpp, metrics.cpp, ...).
#include "server/server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <optional>

#include "minigpt/error.h"
#include "server/server_impl.h"

namespace minigpt::server {

namespace {

// Connections the kernel completes before the server accepts them (more than the HTTP threads: a burst
// of clients, each kept until a thread is free or the queue's 503).
constexpr int kListenBacklog = 1024;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.status() == 503) res.set_header("Retry-After", "1");
  res.set_content(e.body(), "application/json");
}

}  // namespace

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

std::string Server::Impl::lower(std::string_view v) {
  std::string r(v);
  for (char& ch : r) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

bool Server::Impl::origin_allowed(std::string_view origin) const {
  if (any_origin) return true;
  const std::string got = lower(origin);
  return std::find(origins_lower.begin(), origins_lower.end(), got) != origins_lower.end();
}

// The model as /v1/models lists it (OpenAI's fields, llama-server's "meta").
json Server::Impl::model_object() const {
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
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    begin_request(req);  // its access line's time counts from here, before the body is read
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
  svr.set_post_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { count_request(req.path, res.status); });
  // The access line, once the response is written: a stream's tokens and time are known only then.
  svr.set_logger(
      [this](const httplib::Request& req, const httplib::Response& res) { log_request(req, res); });

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
              // The names a request's "model" may give, checked as a request's is.
              (void)check_model_name(req.matches[1].str(), limits);
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
  // llama-server's and vLLM's tokenizer endpoints (tokenize_routes.cpp).
  svr.Post("/tokenize",
           guarded([this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); }));
  svr.Post("/detokenize",
           guarded([this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); }));
  svr.Get("/tokenizer_info", guarded([this](const httplib::Request&, httplib::Response& res) {
            res.set_content(dump(tokenizer_info()), "application/json");
          }));
}

Server::Server(std::shared_ptr<const Model> model, Tokenizer tokenizer, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(tokenizer), std::move(options))) {
  Impl& d = *impl_;
  if (d.o.n_parallel < 1 || d.o.n_parallel > 256) {
    throw Error(ErrorKind::Argument,
                "n_parallel: must be in [1, 256], got " + std::to_string(d.o.n_parallel));
  }
  if (d.o.batch_size < 1 || d.o.batch_size > 8192) {
    throw Error(ErrorKind::Argument,
                "batch_size: must be in [1, 8192], got " + std::to_string(d.o.batch_size));
  }
  if (d.o.max_queue < 1 || d.o.max_queue > 100000) {
    throw Error(ErrorKind::Argument,
                "max_queue: must be in [1, 100000], got " + std::to_string(d.o.max_queue));
  }
  for (const std::string& a : d.o.allowed_origins) {
    if (const std::string why = origin_problem(a); !why.empty()) {
      throw Error(ErrorKind::Argument, "allowed_origins: " + why);
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
  so.speculative = d.o.speculative;
  so.cache_ram = d.o.cache_ram;
  so.cache_block = d.o.cache_block;
  d.sched = std::make_unique<Scheduler>(d.model, &d.tok, so);
  d.limits.n_ctx = d.sched->n_ctx();
  d.limits.model_defaults = d.o.generation_defaults;
  d.limits.speculative = d.o.speculative;
  d.limits.max_choices = std::min<int64_t>(64, d.o.max_queue);
  d.limits.model_names = {d.o.model_id};
  for (const std::string& a : d.o.model_aliases) {
    if (a.empty()) throw Error(ErrorKind::Argument, "model_aliases: an alias is empty");
    if (std::find(d.limits.model_names.begin(), d.limits.model_names.end(), a) == d.limits.model_names.end())
      d.limits.model_names.push_back(a);
  }
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
  // SO_REUSEPORT, with which a second `minigpt serve` on a port in use starts without a word and the kernel
  // shares the connections between the two servers (maybe two different models); without it the second
  // one is refused with "Address already in use", as llama-server is.
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

size_t Server::prompt_cache_bytes() const {
  return size_t(impl_->sched->stats().host_cache_max_bytes.load());
}

int Server::bind() {
  Impl& d = *impl_;
  errno = 0;
  if (d.o.port < 0 || d.o.port > 65535) {
    throw Error(ErrorKind::Argument, "port: must be in [0, 65535], got " + std::to_string(d.o.port));
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
    // The scheduler is done; the streams' last chunks may still be on their way out.
    while (d.streams_writing.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // listen() may not have started yet: wait for it (or for run() never to be called).
    while (d.run_called && !d.run_done && !d.svr.is_running())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    d.svr.stop();
  });
}

}  // namespace minigpt::server
