// The server in this process for the server's tests: a fixture that runs it on a free loopback port, the
// models it serves (the shipped character model, a chat model with its template and transformers'
// reference), and helpers that post JSON and read server-sent events.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "minigpt/model.h"
#include "minigpt/tokenizer.h"
#include "server/server.h"
#include "test_util.h"

namespace minigpt::server_test {

using json = nlohmann::json;

inline std::filesystem::path shipped() { return test::source_dir() / "models" / "shakespeare-char"; }

struct Shipped {
  std::shared_ptr<const Model> model = Model::load(shipped(), LoadOptions::threads(2));
  Tokenizer tok = Tokenizer::load(shipped());
};
inline Shipped& shipped_model() {
  static Shipped s;
  return s;
}

class ServerFixture {
 public:
  // The shipped model, or another model and its tokenizer.
  explicit ServerFixture(server::ServerOptions o)
      : ServerFixture(shipped_model().model, shipped_model().tok, o) {}
  ServerFixture(std::shared_ptr<const Model> model, const Tokenizer& tok, server::ServerOptions o) {
    o.port = 0;
    if (o.model_id.empty()) o.model_id = "shakespeare-char";
    // The access lines go to a test's sink, or nowhere (the CLI's tests read them on stderr).
    if (!o.log) o.log = [](const std::string&) {};
    srv_ = std::make_unique<server::Server>(std::move(model), tok, o);
    port_ = srv_->bind();
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~ServerFixture() {
    srv_->stop(true);
    thread_.join();
  }
  // The read timeout is a hang's bound, not a speed claim: under ASan + UBSan on a 2-vCPU Xeon, with another
  // test on the other core, the 4000-token requests of the scheduler's tests took over 60 s (53.6 s alone).
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300, 0);
    return c;
  }
  int port() const { return port_; }
  server::Server& server() { return *srv_; }

 private:
  std::unique_ptr<server::Server> srv_;
  int port_ = 0;
  std::thread thread_;
};

inline server::ServerOptions default_options() {
  server::ServerOptions o;
  o.n_parallel = 4;
  o.system_fingerprint = "minigpt-test-fp";
  return o;
}

inline ServerFixture& shared_server() {
  static ServerFixture f(default_options());
  return f;
}

inline json post_json(const ServerFixture& f, const std::string& path, const json& body,
                      int want_status = 200) {
  auto c = f.client();
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << "no response to " << path;
  if (!res) return {};
  EXPECT_EQ(res->status, want_status) << res->body;
  return json::parse(res->body, nullptr, false);
}

// The data lines of a server-sent event stream, parsed; [DONE] must be the last.
inline std::vector<json> sse_events(const std::string& body, bool* done = nullptr) {
  std::vector<json> out;
  bool saw_done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;  // a comment (": ping")
    EXPECT_FALSE(saw_done) << "an event after [DONE]";
    if (ev == "data: [DONE]") {
      saw_done = true;
      continue;
    }
    out.push_back(json::parse(ev.substr(6)));
  }
  if (done) *done = saw_done;
  return out;
}

struct ChatModel {
  std::shared_ptr<const Model> model;
  Tokenizer tok;
  ChatTemplate tmpl;
  json ref;
};
inline ChatModel& chat_model() {
  static ChatModel m = [] {
    const auto dir = test::fixture_dir("chatml-tiny");
    Tokenizer tok = Tokenizer::load(dir);
    auto tmpl = load_chat_template(dir, tok);
    std::ifstream in(dir / "reference.json");
    return ChatModel{Model::load(dir, LoadOptions::threads(2)), std::move(tok), *tmpl, json::parse(in)};
  }();
  return m;
}
inline server::ServerOptions chat_options() {
  server::ServerOptions o = default_options();
  o.model_id = "chatml-tiny";
  o.chat_template = chat_model().tmpl;
  return o;
}

// A random model writes whitespace as often as anything else, and a JSON constraint allows up to 20
// characters of it between tokens: a logit bias of -100 on chatml-tiny's whitespace tokens (the bias applies
// under a constraint, as llama.cpp's and OpenAI's do) leaves JSON short enough to end inside its 128
// positions.
inline json whitespace_bias() {
  const Tokenizer& tok = chat_model().tok;
  json bias = json::object();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_special(id)) continue;
    const std::string b = tok.token_bytes(id);
    if (!b.empty() && b.find_first_not_of(" \t\r\n") == std::string::npos) bias[std::to_string(id)] = -100;
  }
  return bias;
}

}  // namespace minigpt::server_test
