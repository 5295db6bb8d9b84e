// The server's log: one access line per answered request, as llama-server and common HTTP servers write them
// (client, method and path, status, the completion's tokens, time; a refusal's message), on stderr or the
// sink ServerOptions::log names.
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

#include "server/server_impl.h"

namespace minigpt::server {

namespace {

// Client-given text (a path, an error message quoting a field) as one printable line: a control character
// or a quote becomes \xNN, so that no request can write a line of its own into the log; at most `max` bytes.
std::string printable(std::string_view s, size_t max = 300) {
  std::string out;
  for (const unsigned char ch : s.substr(0, max)) {
    if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", ch);
      out += b;
    } else {
      out += char(ch);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace

void Server::Impl::begin_request(const httplib::Request& req) {
  std::lock_guard<std::mutex> l(log_m);
  in_flight[&req] = std::make_shared<RequestLog>();
}

std::shared_ptr<RequestLog> Server::Impl::request_log(const httplib::Request& req) {
  std::lock_guard<std::mutex> l(log_m);
  const auto it = in_flight.find(&req);
  return it == in_flight.end() ? nullptr : it->second;
}

void Server::Impl::log(const std::string& line) {
  std::lock_guard<std::mutex> l(log_m);
  if (o.log) {
    o.log(line);
  } else {
    std::fprintf(stderr, "minigpt: %s\n", line.c_str());
  }
}

// httplib's logger: after the response is written (a stream's last chunk included), for every request it
// answered, its own refusals (a malformed request line, a body over --max-body) too.
void Server::Impl::log_request(const httplib::Request& req, const httplib::Response& res) {
  std::shared_ptr<RequestLog> r;
  {
    std::lock_guard<std::mutex> l(log_m);
    if (const auto it = in_flight.find(&req); it != in_flight.end()) {
      r = std::move(it->second);
      in_flight.erase(it);
    }
  }
  // Health checks and metrics scrapes come every few seconds from a monitor: only with --verbose, unless
  // refused (as llama-server leaves /health out of its log).
  if (!o.verbose && res.status < 400 && (req.path == "/health" || req.path == "/metrics")) return;
  std::string line = (req.remote_addr.empty() ? std::string("-") : req.remote_addr) + " \"" +
                     printable(req.method, 16) + " " + printable(req.path) + "\" " +
                     std::to_string(res.status);
  if (r && r->prompt_tokens >= 0) {
    line += " prompt_tokens=" + std::to_string(r->prompt_tokens) +
            " cached_tokens=" + std::to_string(r->cached_tokens) +
            " completion_tokens=" + std::to_string(r->completion_tokens);
  }
  if (r) {
    char t[32];
    std::snprintf(t, sizeof t, " time=%.3fs", std::chrono::duration<double>(Clock::now() - r->start).count());
    line += t;
  }
  if (res.status >= 400) {
    const json body = json::parse(res.body, nullptr, false);
    if (body.is_object() && body.contains("error") && body["error"].is_object() &&
        body["error"].contains("message") && body["error"]["message"].is_string()) {
      line += " error=\"" + printable(body["error"]["message"].get<std::string>(), 1000) + "\"";
    }
  }
  if (r && o.verbose && !r->settings.empty()) line += " " + r->settings;
  log(line);
}

}  // namespace minigpt::server
