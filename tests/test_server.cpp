// minigpt serve: the request parser, and the server in this process (cpp-httplib's client on loopback)
// against the library's own generate() on the shipped model; the CLI's signal handling in a child.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cpu/cpu.h"
#include "minigpt/generate.h"
#include "minigpt/sampler.h"
#include "model/random_weights.h"
#include "server/server.h"
#include "server_test_util.h"
#include "test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
using server::ApiError;
using server::CompletionRequest;
using namespace server_test;  // NOLINT(google-build-using-namespace): the fixture is these tests' own

// --- the request parser -----------------------------------------------------------------------

CompletionRequest parse(const std::string& body) {
  server::RequestLimits lim;
  lim.n_ctx = 128;
  return server::parse_completion_request(body, shipped_model().tok, shipped_model().model->config(), lim);
}

TEST(ServerRequest, DefaultsAreOpenAIs) {
  const CompletionRequest r = parse(R"({"model":"x","prompt":"ROMEO:"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], shipped_model().tok.encode("ROMEO:"));
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs.has_value());
  EXPECT_EQ(r.gen.sampling.temperature, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_p, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);  // OpenAI's API has no top-k
  const CompletionRequest ids =
      parse(R"({"prompt":[[1,2,3],[4]],"n":2,"stop":"\n","logprobs":3,"echo":true})");
  EXPECT_EQ(ids.prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}, {4}}));
  EXPECT_EQ(ids.gen.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(ids.gen.top_logprobs, 3);
  EXPECT_TRUE(ids.echo);
  EXPECT_TRUE(r.cache_prompt);  // llama-server's default
  EXPECT_FALSE(parse(R"({"prompt":"a","cache_prompt":false})").cache_prompt);
}

// Values at the edges that mean something: a top_p below any float's reach keeps the top token alone (not
// rounded to 0 and refused as "--top-p: ... got 0", a CLI flag the request never had); seed -1 asks for a
// random seed, as llama.cpp's server reads it (not 2^64 - 1).
TEST(ServerRequest, EdgeValuesAreTakenAsMeant) {
  const CompletionRequest tiny = parse(R"({"prompt":"a","top_p":1e-300})");
  EXPECT_GT(tiny.gen.sampling.top_p, 0.0f);
  EXPECT_LE(tiny.gen.sampling.top_p, std::numeric_limits<float>::min());
  EXPECT_FALSE(parse(R"({"prompt":"a","seed":-1})").seed.has_value());
  EXPECT_EQ(parse(R"({"prompt":"a","seed":18446744073709551615})").seed,
            std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(parse(R"({"prompt":"a","seed":0})").seed, 0u);
  // a logit_bias that bans every token leaves nothing to sample: a 400 (it ended the server, a sampler's
  // error in the scheduler's thread); one token left, or one given back by a later pair, is a request
  json all = json::array();
  for (int i = 0; i < 256; ++i) all.push_back({i, false});
  try {
    parse(json{{"prompt", "a"}, {"logit_bias", all}}.dump());
    ADD_FAILURE() << "accepted a bias that bans every token";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("logit_bias: bans all 256 tokens of the vocabulary"),
              std::string::npos)
        << e.what();
  }
  all.push_back({7, 0});
  EXPECT_EQ(parse(json{{"prompt", "a"}, {"logit_bias", all}}.dump()).gen.sampling.logit_bias.size(), 257u);
  all.erase(all.end() - 2, all.end());
  EXPECT_EQ(parse(json{{"prompt", "a"}, {"logit_bias", all}}.dump()).gen.sampling.logit_bias.size(), 255u);
}

TEST(ServerRequest, BadBodiesAre400NamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not valid JSON"},
      {"{", "not valid JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"prompt":"a","bogus":1})", "Unrecognized request argument supplied: bogus"},
      {R"({"max_tokens":3})", "prompt: required"},
      {R"({"prompt":5})", "prompt: expected"},
      {R"({"prompt":[]})", "prompt: must not be an empty array"},
      {R"({"prompt":[1,"a"]})", "prompt[1]: expected a token id"},
      {R"({"prompt":[1,99999]})", "prompt[1]: token id 99999 is outside the vocabulary"},
      {R"({"prompt":[1,-1]})", "outside the vocabulary"},
      {R"({"prompt":[[1],[]]})", "prompt[1]: must not be an empty array"},
      {R"({"prompt":"a","max_tokens":"5"})", "max_tokens: expected an integer, got string"},
      {R"({"prompt":"a","max_tokens":-1})", "max_tokens: must be in [0, 128]"},
      {R"({"prompt":"a","max_tokens":1e3})", "max_tokens: expected an integer, got number"},
      {R"({"prompt":"a","temperature":"hot"})", "temperature: expected a number"},
      {R"({"prompt":"a","temperature":3})", "temperature: must be in [0, 2]"},
      {R"({"prompt":"a","top_p":0})", "top_p: must be in (0, 1]"},
      {R"({"prompt":"a","top_k":-2})", "top_k: must be in"},
      {R"({"prompt":"a","min_p":1.5})", "min_p: must be in [0, 1]"},
      {R"({"prompt":"a","repetition_penalty":0})", "repetition_penalty: must be in (0, 100]"},
      {R"({"prompt":"a","n":0})", "n: must be in [1,"},
      {R"({"prompt":"a","n":1000})", "n: must be in"},
      {R"({"prompt":"a","logprobs":6})", "logprobs: must be in [0, 5]"},
      {R"({"prompt":"a","logprobs":true})", "logprobs: expected an integer, got boolean"},
      {R"({"prompt":"a","echo":1})", "echo: expected a boolean"},
      {R"({"prompt":"a","stream":"yes"})", "stream: expected a boolean"},
      {R"({"prompt":"a","cache_prompt":"yes"})", "cache_prompt: expected a boolean"},
      {R"({"prompt":"a","stream_options":{"include_usage":true}})", "only allowed when stream is true"},
      {R"({"prompt":"a","stream":true,"stream_options":{"x":1}})", "unknown option x"},
      {R"({"prompt":"a","stop":""})", "stop: a stop string must not be empty"},
      {R"({"prompt":"a","stop":[1]})", "stop[0]: expected a string"},
      {R"({"prompt":"a","stop":{"a":1}})", "stop: expected a string or an array"},
      {R"({"prompt":"a","seed":"1"})", "seed: expected an integer"},
      {R"({"prompt":"a","seed":-2})", "seed: must be >= 0 (or -1: a random seed), got -2"},
      {R"({"prompt":"a","repetition_penalty":1e-300})",
       "repetition_penalty: 1e-300 is below the smallest normal 32-bit float"},
      {R"({"prompt":"a","presence_penalty":"x"})", "presence_penalty: expected a number"},
      {R"({"prompt":"a","frequency_penalty":-3})", "frequency_penalty: must be in [-2, 2]"},
      {R"({"prompt":"a","logit_bias":5})",
       "logit_bias: expected an object of token ids to biases, got integer"},
      {R"({"prompt":"a","logit_bias":{"a":5}})", R"(logit_bias["a"]: the key must be a token id)"},
      {R"({"prompt":"a","logit_bias":{"01":5}})", R"(logit_bias["01"]: the key must be a token id)"},
      {R"({"prompt":"a","logit_bias":{"-1":5}})", R"(logit_bias["-1"]: the key must be a token id)"},
      {R"({"prompt":"a","logit_bias":{"1":500}})",
       R"(logit_bias["1"]: the bias must be in [-100, 100], got 500)"},
      {R"({"prompt":"a","logit_bias":{"1":"x"}})", R"(logit_bias["1"]: expected a number in [-100, 100])"},
      {R"({"prompt":"a","logit_bias":{"1":true}})", R"(logit_bias["1"]: expected a number in [-100, 100])"},
      {R"({"prompt":"a","logit_bias":{"9999999999":1}})",
       "token id 9999999999 is outside the vocabulary [0, "},
      {R"({"prompt":"a","logit_bias":[[1]]})", "logit_bias[0]: expected a [token id, bias] pair"},
      {R"({"prompt":"a","logit_bias":[[-1,1]]})", "logit_bias[0][0]: must be in [0, "},
      {R"({"prompt":"a","best_of":3})", "best_of: not supported"},
      {R"({"prompt":"a","suffix":"b"})", "suffix: not supported"},
      {R"({"prompt":"a","model":3})", "model: expected a string"},
      {"{\"prompt\":\"\xff\xfe\"}", "not valid JSON"},  // invalid UTF-8 inside a JSON string
      {R"({"prompt":"a","max_tokens":18446744073709551615})", "max_tokens: must be in"},
  };
  for (const auto& [body, needle] : cases) {
    try {
      parse(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << body << " -> " << e.what();
      const json err = json::parse(e.body());
      EXPECT_EQ(err["error"]["type"], "invalid_request_error") << body;
      EXPECT_EQ(err["error"]["message"], utf8_sanitize(e.what()));
    }
  }
  // A prompt longer than the context: the OpenAI API's words.
  std::string long_prompt(200, 'a');
  try {
    parse(json{{"prompt", long_prompt}}.dump());
    ADD_FAILURE() << "a 200-token prompt in a context of 128 was accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("maximum context length is 128 tokens"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.code(), "context_length_exceeded");
  }
}

// --- the server in this process ----------------------------------------------------------------

// What the library's generate() gives for the same prompt and options, alone in its own session.
GenerateResult reference(const std::vector<int32_t>& prompt, GenerateOptions o, uint64_t seed,
                         int64_t max_tokens) {
  Shipped& s = shipped_model();
  o.sampling.seed = seed;
  o.max_new_tokens = max_tokens;
  o.logprobs = true;
  SessionOptions so;
  so.n_ctx = 128;
  Session session(s.model, so);
  return generate(session, &s.tok, prompt, o);
}

int64_t metric(const ServerFixture& f, const std::string& name) {
  auto r = f.client().Get("/metrics");
  if (!r) return -1;
  const auto at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stoll(r->body.substr(at + name.size() + 2));
}

// Polls `done` until it holds (true) or `seconds` pass (false): a wait on the server's state, whose deadline
// only turns a hang into a failure.
template <typename Pred>
bool wait_until(Pred done, double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Whether a /metrics answer (of the server at `port`) has this sample line, e.g. "minigpt_slots_busy 1".
bool metrics_line(int port, const std::string& line) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Get("/metrics");
  return r && r->body.find("\n" + line + "\n") != std::string::npos;
}

TEST(Server, HealthModelsAndMetrics) {
  auto& f = shared_server();
  auto c = f.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "shakespeare-char");
  EXPECT_EQ(models["data"][0]["meta"]["n_ctx"], 128);
  post_json(f, "/v1/completions", {{"prompt", "ROMEO:"}, {"max_tokens", 4}, {"seed", 1}});
  auto x = c.Get("/metrics");
  ASSERT_TRUE(x);
  for (const char* needle :
       {"minigpt_requests_total{path=\"/v1/completions\",status=\"200\"}", "minigpt_generated_tokens_total ",
        "minigpt_prompt_tokens_total ", "minigpt_queue_depth ",
        "minigpt_time_to_first_token_seconds_bucket{le=", "minigpt_inter_token_latency_seconds_count ",
        "# TYPE minigpt_time_to_first_token_seconds histogram"}) {
    EXPECT_NE(x->body.find(needle), std::string::npos) << needle << "\n" << x->body;
  }
  EXPECT_GE(metric(f, "minigpt_generated_tokens_total"), 4);
  // Bucket bounds in their shortest form, as Prometheus' clients print them (not 0.025000000000000001).
  for (const char* needle : {"minigpt_time_to_first_token_seconds_bucket{le=\"0.025\"} ",
                             "minigpt_time_to_first_token_seconds_bucket{le=\"0.1\"} ",
                             "minigpt_inter_token_latency_seconds_bucket{le=\"0.0025\"} ",
                             "minigpt_inter_token_latency_seconds_bucket{le=\"1\"} "}) {
    EXPECT_NE(x->body.find(needle), std::string::npos) << needle << "\n" << x->body;
  }
  for (size_t at = x->body.find("le=\""); at != std::string::npos; at = x->body.find("le=\"", at + 1)) {
    const std::string le = x->body.substr(at + 4, x->body.find('"', at + 4) - at - 4);
    EXPECT_LE(le.size(), 6u) << le;
  }
}

// Text and logprobs equal generate()'s for the same seed and options, sampled and greedy, and the stream
// carries the same text and tokens as the whole response.
// The OpenAI penalties, logit_bias and llama-server's repeat_last_n reach the sampler: the shipped model's
// greedy tokens with them, as transformers' generate() gives them (tests/fixtures/generate/penalties.json,
// tools/reference/make_penalty_reference.py), with the bias as the OpenAI API's object and as llama-server's
// array of pairs (false: never).
TEST(Server, PenaltiesAndLogitBiasEqualTransformers) {
  auto& f = shared_server();
  const json ref = json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "generate" / "penalties.json"))["greedy"];
  ASSERT_EQ(ref.size(), 7u);
  for (const json& c : ref) {
    const auto want = c["generated"].get<std::vector<int32_t>>();
    json object = json::object(), pairs = json::array();
    for (const json& b : c["logit_bias"]) {
      const json v = b[1].is_null() ? json(false) : b[1];
      object[std::to_string(b[0].get<int>())] = v;
      pairs.push_back({b[0], v});
    }
    for (const json& bias : {object, pairs}) {
      json body = {{"prompt", c["prompt"]},
                   {"repeat_last_n", c["repeat_last_n"]},
                   {"max_tokens", want.size()},
                   {"temperature", 0},
                   {"presence_penalty", c["presence_penalty"]},
                   {"frequency_penalty", c["frequency_penalty"]},
                   {"repetition_penalty", c["repetition_penalty"]},
                   {"logit_bias", bias},
                   {"logprobs", 0}};
      const json got = post_json(f, "/v1/completions", body);
      std::string text(want.begin(), want.end());  // the byte-level vocabulary: id = byte
      EXPECT_EQ(got["choices"][0]["text"], text) << bias.dump();
      EXPECT_EQ(got["choices"][0]["logprobs"]["tokens"].size(), want.size());
    }
  }
  // a bias that bans every token is refused, and the server goes on
  json all = json::object();
  for (int i = 0; i < 256; ++i) all[std::to_string(i)] = false;
  const json refused = post_json(f, "/v1/completions", {{"prompt", "a"}, {"logit_bias", all}}, 400);
  EXPECT_NE(refused.dump().find("bans all 256 tokens"), std::string::npos) << refused.dump();
  EXPECT_EQ(post_json(f, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}})["choices"].size(), 1u);
}

TEST(Server, CompletionsEqualGenerateStreamingOrNot) {
  auto& f = shared_server();
  Shipped& s = shipped_model();
  struct Case {
    std::string prompt;
    json extra;
    GenerateOptions o;
  };
  std::vector<Case> cases(3);
  cases[0] = {"ROMEO:", {{"temperature", 0}}, {}};
  cases[0].o.sampling.temperature = 0;
  cases[0].o.sampling.top_k = 0;
  cases[1] = {"JULIET:\nO", {{"temperature", 0.9}, {"top_k", 20}, {"top_p", 0.95}}, {}};
  cases[1].o.sampling.temperature = 0.9f;
  cases[1].o.sampling.top_k = 20;
  cases[1].o.sampling.top_p = 0.95f;
  cases[2] = {"First Citizen:", {{"temperature", 1.2}, {"min_p", 0.05}, {"repetition_penalty", 1.3}}, {}};
  cases[2].o.sampling.temperature = 1.2f;
  cases[2].o.sampling.top_k = 0;
  cases[2].o.sampling.min_p = 0.05f;
  cases[2].o.sampling.repetition_penalty = 1.3f;
  cases.push_back({"KING RICHARD:",
                   {{"temperature", 1.0},
                    {"presence_penalty", 0.5},
                    {"frequency_penalty", 0.4},
                    {"logit_bias", {{"32", -2}, {"101", false}}}},
                   {}});
  cases[3].o.sampling.top_k = 0;
  cases[3].o.sampling.presence_penalty = 0.5f;
  cases[3].o.sampling.frequency_penalty = 0.4f;
  cases[3].o.sampling.logit_bias = {{32, -2.0f}, {101, -std::numeric_limits<float>::infinity()}};
  for (const Case& k : cases) {
    json body = {{"prompt", k.prompt}, {"max_tokens", 40}, {"seed", 1234}, {"logprobs", 2}};
    body.update(k.extra);
    const json got = post_json(f, "/v1/completions", body);
    GenerateOptions o = k.o;
    o.top_logprobs = 2;
    const GenerateResult want = reference(s.tok.encode(k.prompt), o, 1234, 40);
    ASSERT_EQ(got["choices"].size(), 1u);
    const json& ch = got["choices"][0];
    EXPECT_EQ(ch["text"], want.text) << k.prompt;
    EXPECT_EQ(ch["finish_reason"], "length");
    ASSERT_EQ(ch["logprobs"]["tokens"].size(), want.tokens.size());
    Session sess(s.model, {});
    // The chosen tokens' logprobs: log_softmax of the model's logits (as --json reports them).
    std::vector<int32_t> seq = s.tok.encode(k.prompt);
    auto logits = sess.eval(seq);
    for (size_t i = 0; i < want.tokens.size(); ++i) {
      const double lp = log_prob(logits, want.tokens[i]);
      // 1e-4: the same F32 logits, summed in the same order here; the bound is for JSON's decimal round trip.
      EXPECT_NEAR(ch["logprobs"]["token_logprobs"][i].get<double>(), lp, 1e-4) << k.prompt << " token " << i;
      EXPECT_EQ(ch["logprobs"]["top_logprobs"][i].size(), 2u);
      EXPECT_EQ(ch["logprobs"]["tokens"][i], s.tok.decode(std::span<const int32_t>(&want.tokens[i], 1)));
      logits = sess.eval(std::span<const int32_t>(&want.tokens[i], 1));
    }
    EXPECT_EQ(got["usage"]["completion_tokens"], 40);
    EXPECT_EQ(got["usage"]["prompt_tokens"], seq.size());
    EXPECT_EQ(got["system_fingerprint"], "minigpt-test-fp");

    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto c = f.client();
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
    bool done = false;
    const auto evs = sse_events(res->body, &done);
    EXPECT_TRUE(done);
    std::string text;
    json tokens = json::array();
    std::string finish;
    for (const json& e : evs) EXPECT_EQ(e["system_fingerprint"], "minigpt-test-fp");
    for (size_t i = 0; i + 1 < evs.size(); ++i) {
      ASSERT_EQ(evs[i]["choices"].size(), 1u);
      const json& d = evs[i]["choices"][0];
      text += d["text"].get<std::string>();
      if (!d["logprobs"].is_null()) {
        for (const auto& t : d["logprobs"]["tokens"]) tokens.push_back(t);
      }
      if (!d["finish_reason"].is_null()) finish = d["finish_reason"];
    }
    EXPECT_EQ(text, want.text);
    EXPECT_EQ(tokens, ch["logprobs"]["tokens"]);
    EXPECT_EQ(finish, "length");
    ASSERT_FALSE(evs.empty());
    EXPECT_TRUE(evs.back()["choices"].empty());  // include_usage: the last chunk, usage only
    EXPECT_EQ(evs.back()["usage"]["completion_tokens"], 40);
  }
}

// n > 1: choice j is what the request with seed + j and n = 1 gives; token-id prompts equal text prompts.
TEST(Server, ChoicesAndTokenIdPrompts) {
  auto& f = shared_server();
  const json got =
      post_json(f, "/v1/completions",
                {{"prompt", "KING:"}, {"n", 3}, {"max_tokens", 12}, {"seed", 77}, {"temperature", 1.0}});
  ASSERT_EQ(got["choices"].size(), 3u);
  std::set<std::string> distinct;
  const std::vector<int32_t> ids = shipped_model().tok.encode("KING:");
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(got["choices"][j]["index"], j);
    const json one = post_json(f, "/v1/completions",
                               {{"prompt", ids}, {"max_tokens", 12}, {"seed", 77 + j}, {"temperature", 1.0}});
    EXPECT_EQ(got["choices"][j]["text"], one["choices"][0]["text"]) << "choice " << j;
    distinct.insert(got["choices"][j]["text"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u) << "three choices, one text: the seeds were not used";
  EXPECT_EQ(got["usage"]["completion_tokens"], 36);
  EXPECT_EQ(got["usage"]["prompt_tokens"], ids.size());
  // Several prompts: choices in prompt order, n per prompt.
  const json two = post_json(f, "/v1/completions",
                             {{"prompt", {"A", "B"}}, {"n", 2}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_EQ(two["choices"].size(), 4u);
  EXPECT_EQ(two["choices"][0]["text"], two["choices"][1]["text"]);
  EXPECT_EQ(two["choices"][2]["text"], two["choices"][3]["text"]);
}

// The context rule the check applies is the one its message states: a prompt may fill the context (its last
// position gives the first token, sampled and never evaluated), and the completion stops at a full context,
// at n_ctx + 1 - prompt tokens. 128 + 1 is served; 129 + 1 is refused naming 129 and the rule (it said
// "you requested 130", as if 129 were within a limit of 128).
TEST(Server, PromptMayFillTheContextAsTheMessageSays) {
  auto& f = shared_server();
  const std::vector<int32_t> full(128, int32_t('a'));
  const json one = post_json(f, "/v1/completions", {{"prompt", full}, {"max_tokens", 1}, {"temperature", 0}});
  EXPECT_EQ(one["usage"]["completion_tokens"], 1) << one.dump();
  const std::vector<int32_t> almost(126, int32_t('a'));
  const json three =
      post_json(f, "/v1/completions", {{"prompt", almost}, {"max_tokens", 16}, {"temperature", 0}});
  EXPECT_EQ(three["usage"]["completion_tokens"], 3) << three.dump();
  EXPECT_EQ(three["choices"][0]["finish_reason"], "length");
  const std::vector<int32_t> over(129, int32_t('a'));
  const json refused = post_json(f, "/v1/completions", {{"prompt", over}, {"max_tokens", 1}}, 400);
  const std::string msg = refused["error"]["message"].get<std::string>();
  EXPECT_EQ(refused["error"]["code"], "context_length_exceeded");
  EXPECT_NE(msg.find("maximum context length is 128 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("prompt resulted in 129 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("A prompt may fill the context (128 tokens)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("130"), std::string::npos) << msg;
}

// A prompt past the context names whose limit it is: the server's (-c), and where the model was trained for
// more, that number and the option that raises the server's (it said "This model's maximum context length
// is 64 tokens" of a model of 128).
TEST(Server, ContextErrorNamesTheServersLimitAndHowToRaiseIt) {
  server::ServerOptions o = default_options();
  o.n_ctx = 64;
  ServerFixture f(o);
  const int64_t trained = shipped_model().model->config().n_ctx;
  ASSERT_GT(trained, 64);
  const std::vector<int32_t> over(65, int32_t('a'));
  {
    const json e = post_json(f, "/v1/completions", {{"prompt", over}, {"max_tokens", 1}}, 400);
    const std::string msg = e["error"]["message"].get<std::string>();
    EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
    EXPECT_NE(msg.find("This server's maximum context length is 64 tokens (the model's is " +
                       std::to_string(trained) + "; start the server with -c " + std::to_string(trained) +
                       " (--ctx-size) to raise it)"),
              std::string::npos)
        << msg;
  }
  // a length past it, the same
  const json l = post_json(f, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 100}}, 400);
  EXPECT_EQ(l["error"]["message"], "max_tokens: must be in [0, 64], the server's context (the model's is " +
                                       std::to_string(trained) + "; start the server with -c " +
                                       std::to_string(trained) + " (--ctx-size) to raise it), got 100");
  // the model's whole context: nothing to raise
  const json e =
      post_json(shared_server(), "/v1/completions",
                {{"prompt", std::vector<int32_t>(trained + 1, int32_t('a'))}, {"max_tokens", 1}}, 400);
  const std::string msg = e["error"]["message"].get<std::string>();
  EXPECT_NE(msg.find("This server's maximum context length is " + std::to_string(trained) +
                     " tokens (the model's whole context)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("-c "), std::string::npos) << msg;
}

// n > 1 choices of one prompt evaluate it once: the other choices wait and take a copy of its keys and values
// and its last logits, then each samples with its own seed, as n = 1 requests with those seeds do. Not with
// echo + logprobs (every choice reports the prompt's logprobs, so each evaluates it).
TEST(Server, ChoicesOfOnePromptEvaluateItOnce) {
  ServerFixture f(default_options());  // its own metrics
  Shipped& s = shipped_model();
  const std::string p = "ROMEO:\nIs the day so young?\nBENVOLIO:\nBut new struck nine.\nROMEO:\nAy me!";
  const int64_t n = int64_t(s.tok.encode(p).size());
  const json got = post_json(f, "/v1/completions",
                             {{"prompt", p},
                              {"n", 3},
                              {"max_tokens", 10},
                              {"seed", 11},
                              {"temperature", 0.9},
                              {"logprobs", 1},
                              {"cache_prompt", false}});
  ASSERT_EQ(got["choices"].size(), 3u);
  EXPECT_EQ(got["usage"]["prompt_tokens"], n);
  EXPECT_EQ(metric(f, "minigpt_prompt_tokens_total"), n);
  EXPECT_EQ(metric(f, "minigpt_prompt_tokens_shared_total"), 2 * n);
  std::set<std::string> distinct;
  for (int j = 0; j < 3; ++j) {
    const json one = post_json(f, "/v1/completions",
                               {{"prompt", p},
                                {"max_tokens", 10},
                                {"seed", 11 + j},
                                {"temperature", 0.9},
                                {"logprobs", 1},
                                {"cache_prompt", false}});
    EXPECT_EQ(got["choices"][j]["text"], one["choices"][0]["text"]) << "choice " << j;
    const json& la = got["choices"][j]["logprobs"]["token_logprobs"];
    const json& lb = one["choices"][0]["logprobs"]["token_logprobs"];
    ASSERT_EQ(la.size(), lb.size()) << "choice " << j;
    for (size_t i = 0; i < la.size(); ++i) {
      // the chunked-prefill test's bound: the same sums, possibly grouped otherwise
      EXPECT_NEAR(la[i].get<double>(), lb[i].get<double>(), 1e-4) << "choice " << j << " token " << i;
    }
    distinct.insert(got["choices"][j]["text"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u) << "three choices, one text: the seeds were not used";
  EXPECT_EQ(metric(f, "minigpt_prompt_tokens_total"), 4 * n);  // each n = 1 request evaluated it
  // echo + logprobs: each choice scores the prompt itself.
  const json e = post_json(f, "/v1/completions",
                           {{"prompt", p}, {"n", 2}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
  ASSERT_EQ(e["choices"].size(), 2u);
  EXPECT_EQ(e["choices"][0]["logprobs"]["token_logprobs"], e["choices"][1]["logprobs"]["token_logprobs"]);
  EXPECT_EQ(metric(f, "minigpt_prompt_tokens_total"), 6 * n);
  EXPECT_EQ(metric(f, "minigpt_prompt_tokens_shared_total"), 2 * n);
}

// echo + logprobs + max_tokens 0, as lm-evaluation-harness scores text: the prompt back, its first token's
// logprob null, every other one log p(token | the tokens before it).
TEST(Server, EchoLogprobsScoresThePrompt) {
  auto& f = shared_server();
  Shipped& s = shipped_model();
  const std::string text = "To be, or not to be";
  const json got =
      post_json(f, "/v1/completions",
                {{"prompt", text}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}, {"temperature", 0}});
  const json& ch = got["choices"][0];
  EXPECT_EQ(ch["text"], text);
  const json& lp = ch["logprobs"];
  const std::vector<int32_t> ids = s.tok.encode(text);
  ASSERT_EQ(lp["tokens"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  Session sess(s.model, {});
  const auto all = sess.eval_all(ids);
  const size_t V = size_t(s.model->config().n_vocab);
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), log_prob(all.subspan((i - 1) * V, V), ids[i]), 1e-4)
        << "token " << i;
    EXPECT_EQ(lp["text_offset"][i], i);  // one character per token in this model
    EXPECT_EQ(lp["top_logprobs"][i].size(), 1u);
  }
  EXPECT_EQ(got["usage"]["completion_tokens"], 0);
  // echo with generation: the prompt, then the completion; its offsets go on from the prompt's.
  const json more =
      post_json(f, "/v1/completions",
                {{"prompt", text}, {"max_tokens", 5}, {"echo", true}, {"logprobs", 0}, {"temperature", 0}});
  const json& m = more["choices"][0];
  const GenerateResult want = reference(
      ids,
      [] {
        GenerateOptions o;
        o.sampling.temperature = 0;
        return o;
      }(),
      0, 5);
  EXPECT_EQ(m["text"], text + want.text);
  ASSERT_EQ(m["logprobs"]["tokens"].size(), ids.size() + 5);
  EXPECT_EQ(m["logprobs"]["text_offset"][ids.size()], text.size());
}

// A prompt longer than the step's budget is prefilled in chunks, while other streams keep decoding: the
// same text and the same echo logprobs (rows that cross chunk boundaries included) as in one piece.
TEST(Server, ChunkedPrefillGivesWhatOnePieceGives) {
  server::ServerOptions o = default_options();
  o.n_parallel = 2;
  o.batch_size = 7;
  ServerFixture small(o);
  const std::string text = "ROMEO:\nIs the day so young?\nBENVOLIO:\nBut new struck nine.";
  const json body = {{"prompt", text}, {"max_tokens", 20}, {"echo", true}, {"logprobs", 2}, {"seed", 5}};
  auto other = std::async(std::launch::async, [&] {
    return post_json(small, "/v1/completions", {{"prompt", "A"}, {"max_tokens", 60}, {"ignore_eos", true}});
  });
  const json chunked = post_json(small, "/v1/completions", body);
  const json whole = post_json(shared_server(), "/v1/completions", body);
  EXPECT_EQ(chunked["choices"][0]["text"], whole["choices"][0]["text"]);
  const json& a = chunked["choices"][0]["logprobs"];
  const json& b = whole["choices"][0]["logprobs"];
  ASSERT_EQ(a["token_logprobs"].size(), b["token_logprobs"].size());
  EXPECT_TRUE(a["token_logprobs"][0].is_null());
  for (size_t i = 1; i < a["token_logprobs"].size(); ++i) {
    // 1e-4: prefill rows in chunks of 7 against one chunk, F32 sums grouped differently.
    EXPECT_NEAR(a["token_logprobs"][i].get<double>(), b["token_logprobs"][i].get<double>(), 1e-4) << i;
  }
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(other.get()["usage"]["completion_tokens"], 60);
}

// cache_prompt (on unless asked otherwise): a prompt starts from the longest prefix of it that a free slot
// holds, reported as usage.prompt_tokens_details.cached_tokens; a slot is taken from the least recently used
// when none holds any of the prompt (so another conversation's cache lives on); the text and logprobs are
// those of the same request with the cache off; echo + logprobs evaluates every prompt token.
TEST(Server, PromptCacheStartsFromTheLongestCachedPrefix) {
  server::ServerOptions o = default_options();
  o.n_parallel = 2;
  ServerFixture f(o);
  Shipped& s = shipped_model();
  const std::string p1 = "ROMEO:\nIs the day so young?\nBENVOLIO:\nBut new struck nine.\n";
  const std::string p2 = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n";
  const int64_t n1 = int64_t(s.tok.encode(p1).size()), n2 = int64_t(s.tok.encode(p2).size());
  auto complete = [&](const std::string& prompt, bool cache) {
    return post_json(f, "/v1/completions",
                     {{"prompt", prompt},
                      {"max_tokens", 12},
                      {"temperature", 0.8},
                      {"seed", 3},
                      {"logprobs", 1},
                      {"cache_prompt", cache}});
  };
  auto cached = [](const json& r) {
    return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  auto same = [](const json& a, const json& b, const std::string& what) {
    EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]) << what;
    const json& la = a["choices"][0]["logprobs"]["token_logprobs"];
    const json& lb = b["choices"][0]["logprobs"]["token_logprobs"];
    ASSERT_EQ(la.size(), lb.size()) << what;
    for (size_t i = 0; i < la.size(); ++i) {
      // 1e-4: the cached keys and values came from another step (other rows beside them), F32 sums grouped
      // differently; the bound is the chunked-prefill test's.
      EXPECT_NEAR(la[i].get<double>(), lb[i].get<double>(), 1e-4) << what << " token " << i;
    }
  };
  const json a1 = complete(p1, true);
  EXPECT_EQ(cached(a1), 0);
  const json a2 = complete(p2, true);  // takes the other slot: slot 0 keeps p1
  EXPECT_EQ(cached(a2), 0);
  const json b1 = complete(p1, true);
  EXPECT_EQ(cached(b1), n1 - 1);  // the last prompt token is evaluated again: its logits pick the first token
  same(a1, b1, "p1 again");
  const json b2 = complete(p2, true);
  EXPECT_EQ(cached(b2), n2 - 1);
  same(a2, b2, "p2 again");
  // Streamed, with usage (p2 is still in its slot).
  auto res = f.client().Post(
      "/v1/completions",
      json{{"prompt", p2}, {"max_tokens", 3}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}
          .dump(),
      "application/json");
  ASSERT_TRUE(res);
  const auto evs = sse_events(res->body);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back()["usage"]["prompt_tokens_details"]["cached_tokens"], n2 - 1);

  // A conversation going on: the prompt is the last one, its completion and more; the completion's tokens
  // were evaluated too (all but the last sampled).
  const std::string p3 = p1 + b1["choices"][0]["text"].get<std::string>() + "\nROMEO:\n";
  const json c3 = complete(p3, true);
  EXPECT_EQ(cached(c3), n1 + 11);
  const json d3 = complete(p3, false);
  EXPECT_EQ(cached(d3), 0);
  same(c3, d3, "a conversation going on");
  // echo + logprobs needs the logits of every prompt token: nothing is taken from the cache.
  const json e =
      post_json(f, "/v1/completions", {{"prompt", p1}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
  EXPECT_EQ(cached(e), 0);
  EXPECT_EQ(metric(f, "minigpt_prompt_tokens_cached_total"), cached(b1) + cached(b2) + cached(c3) + (n2 - 1));
}

// A prompt that shares only a little with the most recent slot's cache goes to the least recently used slot,
// so the recent conversation keeps its cache (llama-server's slot similarity: under half is not worth it).
TEST(Server, PromptCacheKeepsARecentConversationForAFewSharedTokens) {
  server::ServerOptions o = default_options();
  o.n_parallel = 2;
  ServerFixture f(o);
  const std::string a = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
  const std::string b = "MENENIUS:\nWhy, masters, my good friends, mine honest neighbours,\n";
  const std::string c = b.substr(0, 4) + " and then something else entirely, a long way from Rome.\n";
  const int64_t nb = int64_t(shipped_model().tok.encode(b).size());
  auto cached = [&](const std::string& prompt) {
    const json r =
        post_json(f, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}});
    return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  EXPECT_EQ(cached(a), 0);       // slot 0
  EXPECT_EQ(cached(b), 0);       // slot 1, the least recently used
  EXPECT_EQ(cached(c), 0);       // 4 tokens in common with b's slot: slot 0 (a's) is taken instead
  EXPECT_EQ(cached(b), nb - 1);  // b's cache lived on
}

// A stop string that spans tokens: never in the text, streamed or not, and the stream never shows a piece
// of it.
TEST(Server, StopStringsSpanningTokensNeverLeak) {
  auto& f = shared_server();
  const json plain =
      post_json(f, "/v1/completions", {{"prompt", "ROMEO:"}, {"max_tokens", 30}, {"temperature", 0}});
  const std::string full = plain["choices"][0]["text"];
  ASSERT_GE(full.size(), 12u);
  const std::string stop = full.substr(6, 3);  // three tokens of this byte-level model
  const std::string want = full.substr(0, full.find(stop));
  const json got =
      post_json(f, "/v1/completions",
                {{"prompt", "ROMEO:"}, {"max_tokens", 30}, {"temperature", 0}, {"stop", {stop, "zzz"}}});
  EXPECT_EQ(got["choices"][0]["text"], want);
  EXPECT_EQ(got["choices"][0]["finish_reason"], "stop");
  auto c = f.client();
  auto res = c.Post(
      "/v1/completions",
      json{{"prompt", "ROMEO:"}, {"max_tokens", 30}, {"temperature", 0}, {"stop", stop}, {"stream", true}}
          .dump(),
      "application/json");
  ASSERT_TRUE(res);
  std::string text;
  for (const json& e : sse_events(res->body)) {
    if (e["choices"].empty()) continue;
    text += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text.find(stop.substr(0, 1), want.size()), std::string::npos)
        << "a piece of the stop string leaked";
  }
  EXPECT_EQ(text, want);
}

// A random model of tiny_config's shape over GPT-2's vocabulary and tokenizer, with a context of n_ctx.
std::shared_ptr<const Model> random_gpt2_vocab_model(int64_t n_ctx) {
  Config c = test::tiny_config();
  c.n_vocab = 50257;
  c.n_ctx = n_ctx;
  c.bos_token_id = c.eos_token_id = 50256;
  return Model::random(c, LoadOptions::threads(2));
}
const Tokenizer& gpt2_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(test::source_dir() / "tests" / "fixtures" / "gpt2-tokenizer");
  return tok;
}

// No UTF-8 character is split across two streamed chunks: a random model over GPT-2's vocabulary emits
// many tokens that are parts of characters (byte-level BPE); the stream's text, chunk by chunk, must be
// what the whole response says, where a split character would show as U+FFFD twice.
TEST(Server, NoCharacterIsSplitAcrossStreamedChunks) {
  server::ServerOptions o = default_options();
  o.model_id = "random";
  ServerFixture f(random_gpt2_vocab_model(256), gpt2_tokenizer(), o);
  auto cl = f.client();
  int merged = 0, multibyte = 0;
  for (int seed = 0; seed < 4; ++seed) {
    json body = {{"prompt", "Caf\u00e9 \u4e2d\u6587"},
                 {"max_tokens", 200},
                 {"seed", seed},
                 {"temperature", 1.0},
                 {"ignore_eos", true}};
    auto whole = cl.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(whole);
    const std::string want = json::parse(whole->body)["choices"][0]["text"];
    body["stream"] = true;
    body["logprobs"] = 0;
    auto res = cl.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    std::string text;
    for (const json& e : sse_events(res->body)) {
      if (e["choices"].empty()) continue;
      const std::string piece = e["choices"][0]["text"];
      text += piece;
      const json& lp = e["choices"][0]["logprobs"];
      if (!lp.is_null() && piece.empty()) ++merged;  // a part of a character, sent with no text
      for (unsigned char ch : piece) multibyte += ch >= 0xC0;
    }
    EXPECT_EQ(text, want) << "seed " << seed;
  }
  EXPECT_GT(merged, 0) << "no token was part of a character: the case was not exercised";
  EXPECT_GT(multibyte, 0);
}

// The bytes a completions token string stands for: "bytes:" and \xNN escapes (read as lm-evaluation-harness
// reads OpenAI's: the escapes, then latin-1), or the text itself.
std::string token_string_bytes(const std::string& t) {
  if (!t.starts_with("bytes:")) return t;
  std::string out;
  for (size_t i = 6; i < t.size(); i += 4) {
    EXPECT_TRUE(i + 4 <= t.size() && t[i] == '\\' && t[i + 1] == 'x') << t;
    if (i + 4 > t.size()) break;
    out += char(std::stoi(t.substr(i + 2, 2), nullptr, 16));
  }
  return out;
}

TEST(ServerLogprobs, TokenStringsArePartsOfCharactersAsBytes) {
  EXPECT_EQ(server::legacy_token_string("abc"), "abc");
  EXPECT_EQ(server::legacy_token_string(""), "");
  EXPECT_EQ(server::legacy_token_string("caf\xc3\xa9"), "caf\xc3\xa9");  // whole characters: the text
  EXPECT_EQ(server::legacy_token_string("\xe2\x80"), "bytes:\\xe2\\x80");
  EXPECT_EQ(server::legacy_token_string(" \xf0\x9f"), "bytes:\\x20\\xf0\\x9f");
  EXPECT_EQ(server::legacy_token_string("\xff"), "bytes:\\xff");
}

// Over a byte-level vocabulary half the tokens are parts of characters: in the completions API's logprobs
// (no bytes field) each shows as "bytes:\xNN", so the top_logprobs of a position keep every alternative
// apart (as U+FFFD they merged into one key) and the tokens' bytes make up the text.
TEST(Server, CompletionsLogprobsShowPartsOfCharactersAsBytes) {
  Config c = test::tiny_config();
  c.n_vocab = 256;
  c.n_ctx = 128;
  c.bos_token_id = 10;
  c.eos_token_id = -1;
  server::ServerOptions o = default_options();
  o.model_id = "random";
  ServerFixture f(Model::random(c, LoadOptions::threads(2)), shipped_model().tok, o);
  const std::string prompt = "Caf\u00e9 \U0001F600!";
  const json got = post_json(f, "/v1/completions",
                             {{"prompt", prompt},
                              {"max_tokens", 40},
                              {"echo", true},
                              {"logprobs", 5},
                              {"seed", 7},
                              {"temperature", 1.0},
                              {"ignore_eos", true}});
  const json& ch = got["choices"][0];
  const json& lp = ch["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size() + 40);  // one byte per token
  std::string bytes;
  int partial = 0;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    const std::string t = lp["tokens"][i];
    const std::string b = token_string_bytes(t);
    ASSERT_EQ(b.size(), 1u) << t;
    EXPECT_EQ(t.starts_with("bytes:"), (unsigned char)b[0] >= 0x80) << t;
    partial += t.starts_with("bytes:");
    bytes += b;
    if (i == 0) continue;
    ASSERT_EQ(lp["top_logprobs"][i].size(), 5u) << "position " << i << ": " << lp["top_logprobs"][i].dump();
  }
  EXPECT_EQ(bytes.substr(0, prompt.size()), prompt);
  EXPECT_EQ(utf8_sanitize(bytes), ch["text"].get<std::string>());
  EXPECT_GE(partial, 6);  // the prompt's é and emoji at least
  int partial_alternatives = 0;
  for (size_t i = 1; i < lp["top_logprobs"].size(); ++i) {
    for (const auto& [k, v] : lp["top_logprobs"][i].items()) {
      EXPECT_EQ(token_string_bytes(k).size(), 1u) << k;
      partial_alternatives += k.starts_with("bytes:");
    }
  }
  EXPECT_GT(partial_alternatives, 20);
}

// Four concurrent streams with different prompts and seeds each give exactly the tokens they give alone,
// whichever slot and batch they share.
TEST(Server, ConcurrentStreamsGiveWhatTheyGiveAlone) {
  auto& f = shared_server();
  const std::vector<std::string> prompts = {"ROMEO:", "JULIET:", "HAMLET:\nTo", "KING HENRY:"};
  auto body = [&](size_t i) {
    return json{{"prompt", prompts[i]}, {"max_tokens", 48}, {"seed", 1000 + i},  {"temperature", 0.8},
                {"logprobs", 0},        {"stream", true},   {"ignore_eos", true}};
  };
  auto tokens_of = [](const std::string& sse) {
    std::vector<std::string> t;
    for (const json& e : sse_events(sse)) {
      if (!e["choices"].empty() && !e["choices"][0]["logprobs"].is_null()) {
        for (const auto& x : e["choices"][0]["logprobs"]["tokens"]) t.push_back(x);
      }
    }
    return t;
  };
  std::vector<std::vector<std::string>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto c = f.client();
    auto res = c.Post("/v1/completions", body(i).dump(), "application/json");
    ASSERT_TRUE(res);
    alone.push_back(tokens_of(res->body));
    ASSERT_EQ(alone.back().size(), 48u);
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<std::string>> runs;
    for (size_t k = 0; k < prompts.size(); ++k) {
      const size_t i = round == 0 ? k : prompts.size() - 1 - k;  // other slots the second time
      runs.push_back(std::async(std::launch::async, [&, i] {
        auto c = f.client();
        auto res = c.Post("/v1/completions", body(i).dump(), "application/json");
        return res ? res->body : std::string();
      }));
    }
    for (size_t k = 0; k < prompts.size(); ++k) {
      const size_t i = round == 0 ? k : prompts.size() - 1 - k;
      EXPECT_EQ(tokens_of(runs[k].get()), alone[i]) << "prompt " << i << ", round " << round;
    }
  }
}

// Concurrent requests share decode steps (continuous batching, src/server/scheduler.cpp): four requests of
// 1000 tokens each, sent at once, take fewer forward steps (minigpt_steps_total) than their 4000 tokens
// together. A server that ran them one at a time would take at least one step per token of each (a prefill
// step gives a request's first token, one decode step each of the others), 4000 in all; the steps here come
// near 1000 when all four run side by side. Each still gets all its tokens.
TEST(Server, ConcurrentRequestsShareDecodeSteps) {
  server::ServerOptions o = default_options();  // 4 slots
  o.model_id = "random";
  ServerFixture f(random_gpt2_vocab_model(2048), gpt2_tokenizer(), o);  // its own metrics
  const int64_t n_requests = 4, max_tokens = 1000;
  const int64_t steps_before = metric(f, "minigpt_steps_total");
  const int64_t generated_before = metric(f, "minigpt_generated_tokens_total");
  std::vector<std::future<httplib::Result>> runs;
  for (int64_t i = 0; i < n_requests; ++i) {
    runs.push_back(std::async(std::launch::async, [&f, i, max_tokens] {
      const json body = {{"prompt", "Request " + std::to_string(i) + ":"},
                         {"max_tokens", max_tokens},
                         {"seed", i},
                         {"ignore_eos", true}};
      return f.client().Post("/v1/completions", body.dump(), "application/json");
    }));
  }
  int64_t tokens = 0;
  for (auto& r : runs) {
    auto res = r.get();
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const int64_t n = json::parse(res->body)["usage"]["completion_tokens"];
    EXPECT_EQ(n, max_tokens);
    tokens += n;
  }
  const int64_t steps = metric(f, "minigpt_steps_total") - steps_before;
  EXPECT_EQ(metric(f, "minigpt_generated_tokens_total") - generated_before, tokens);
  EXPECT_LT(steps, tokens) << "the requests did not share a step";
  std::printf(
      "ConcurrentRequestsShareDecodeSteps: %lld requests, %lld tokens in %lld steps (%.2f tokens a step)\n",
      (long long)n_requests, (long long)tokens, (long long)steps, double(tokens) / double(steps));
}

TEST(Server, BadRequestsGetTheirStatus) {
  auto& f = shared_server();
  auto c = f.client();
  auto expect = [&](httplib::Result res, int status, const std::string& needle) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << res->body;
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << res->body;
  };
  expect(c.Post("/v1/completions", "{nope", "application/json"), 400, "not valid JSON");
  expect(c.Post("/v1/completions", R"({"prompt":"a","max_tokens":"x"})", "application/json"), 400,
         "max_tokens");
  expect(c.Post("/v1/completions", R"({"prompt":"a","foo":1})", "application/json"), 400, "Unrecognized");
  expect(c.Get("/v1/nothing"), 404, "no such endpoint: GET /v1/nothing");
  expect(c.Post("/v1/tokenize", "{}", "application/json"), 404, "no such endpoint: POST /v1/tokenize");
  // A route asked with a method it does not take: 405 and the methods it does (Allow).
  auto wrong_method = [&](httplib::Result res, const std::string& needle, const std::string& allow) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->get_header_value("Allow"), allow) << needle;
    expect(std::move(res), 405, needle);
  };
  wrong_method(c.Get("/v1/completions"), "method GET is not allowed for /v1/completions", "POST, OPTIONS");
  wrong_method(c.Get("/chat/completions"), "method GET is not allowed for /chat/completions",
               "POST, OPTIONS");
  wrong_method(c.Post("/v1/models", "{}", "application/json"), "method POST is not allowed for /v1/models",
               "GET, HEAD, OPTIONS");
  wrong_method(c.Delete("/v1/models/shakespeare-char"), "method DELETE is not allowed", "GET, HEAD, OPTIONS");
  wrong_method(c.Put("/health", "", "text/plain"), "method PUT is not allowed for /health",
               "GET, HEAD, OPTIONS");
  wrong_method(c.Get("/detokenize"), "method GET is not allowed for /detokenize", "POST, OPTIONS");
  expect(
      c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})", "application/json"),
      400, "no chat template");
  expect(c.Post("/v1/chat/completions", "{", "application/json"), 400, "not valid JSON");
  expect(c.Post("/tokenize", R"({"content":5})", "application/json"), 400, "content");
  expect(c.Post("/detokenize", R"({"tokens":[1,-5]})", "application/json"), 400, "tokens[1]");
  // 100,000 nested brackets (200 KB): copying such a value recursed once per level and overflowed the
  // stack (the server died); refused at parse time on every route that reads a body.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const char* route : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    expect(c.Post(route, R"({"prompt":)" + deep + "}", "application/json"), 400,
           "nesting deeper than 256 levels");
  }
  expect(c.Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"x":)" + deep + "}}",
                "application/json"),
         400, "nesting deeper than 256 levels");
  auto alive = c.Get("/health");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 200);
  const std::string big(2 << 20, ' ');
  expect(c.Post("/v1/completions", big, "application/json"), 413, "larger than 1048576 bytes");
  // curl -d's default type: httplib takes a form-encoded body only up to 8192 bytes; its 413 named our
  // limit (1 MiB) for a 9 KB body.
  const std::string padded = R"({"prompt":"a",)" + std::string(9000, ' ') + R"("max_tokens":1})";
  expect(
      c.Post("/v1/completions", padded, "application/x-www-form-urlencoded"), 413,
      "the body is 9029 bytes sent as application/x-www-form-urlencoded (curl -d's default), which the HTTP "
      "library takes only up to 8192 bytes: send it with Content-Type: application/json");
  auto fine = c.Post("/v1/completions", padded, "application/json");
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200) << fine->body;
  // A Content-Length httplib cannot read ("abc" was read as 0, and the body parsed as empty).
  httplib::Headers bad_length = {{"Content-Length", "abc"}};
  expect(c.Post("/v1/completions", bad_length, "", 0, "application/json"), 400,
         "the Content-Length header 'abc' is not a number of bytes");
  // tokenize and detokenize round trip
  const json t = post_json(f, "/tokenize", {{"content", "Hello"}});
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), shipped_model().tok.encode("Hello"));
  EXPECT_EQ(post_json(f, "/detokenize", {{"tokens", t["tokens"]}})["content"], "Hello");
}

TEST(Server, ApiKeyIsRequiredExceptForHealth) {
  server::ServerOptions o = default_options();
  o.n_parallel = 1;
  o.api_key = "sekret";
  ServerFixture f(o);
  auto c = f.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  for (const httplib::Headers& hs :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}}}) {
    auto r = c.Get("/v1/models", hs);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
    auto p = c.Post("/v1/completions", hs, R"({"prompt":"a"})", "application/json");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->status, 401);
  }
  auto ok = c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// CORS, opt-in (--allowed-origins): without it no response names an origin and a preflight is not answered;
// with it a page of an allowed origin gets its preflight answered (before the key check: a browser sends no
// credentials there) and may read every response, errors and streams included; other origins get nothing.
TEST(Server, CorsHeadersOnlyForAllowedOrigins) {
  const httplib::Headers preflight = {
      {"Origin", "http://localhost:3000"},
      {"Access-Control-Request-Method", "POST"},
      {"Access-Control-Request-Headers", "authorization,content-type,x-stainless-os"}};
  {
    auto c = shared_server().client();
    auto pre = c.Options("/v1/completions", preflight);
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204);  // the methods the route takes, but no CORS header: the page may not call
    EXPECT_EQ(pre->get_header_value("Allow"), "POST, OPTIONS");
    EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
    EXPECT_FALSE(pre->has_header("Access-Control-Allow-Methods"));
    auto none = c.Options("/v1/nothing", preflight);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 404);
    auto r = c.Get("/v1/models", httplib::Headers{{"Origin", "http://localhost:3000"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  }
  server::ServerOptions o = default_options();
  o.n_parallel = 1;
  o.api_key = "sekret";
  o.allowed_origins = {"http://localhost:3000", "null"};
  ServerFixture f(o);
  auto c = f.client();
  auto pre = c.Options("/v1/completions", preflight);
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"),
            "authorization,content-type,x-stainless-os");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(pre->get_header_value("Vary"), "Origin");
  // Another origin: no preflight answer, no header (the key check answers: 401).
  httplib::Headers other = preflight;
  other.erase("Origin");
  other.emplace("Origin", "http://evil.example");
  auto bad = c.Options("/v1/completions", other);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);
  EXPECT_FALSE(bad->has_header("Access-Control-Allow-Origin"));
  const json body = {{"prompt", "ROMEO:"}, {"max_tokens", 2}, {"temperature", 0}};
  for (const bool stream : {false, true}) {
    json b = body;
    b["stream"] = stream;
    // The origin as a browser may spell it (case aside) is echoed; a 401 is readable by the page too.
    auto ok =
        c.Post("/v1/completions", {{"Origin", "http://LocalHost:3000"}, {"Authorization", "Bearer sekret"}},
               b.dump(), "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
    EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "http://LocalHost:3000")
        << "stream " << stream;
    auto denied = c.Post("/v1/completions", {{"Origin", "null"}}, b.dump(), "application/json");
    ASSERT_TRUE(denied);
    EXPECT_EQ(denied->status, 401);
    EXPECT_EQ(denied->get_header_value("Access-Control-Allow-Origin"), "null");
  }
  // "*": any origin, answered with "*" (no Vary).
  o.allowed_origins = {"*"};
  o.api_key.clear();
  ServerFixture any(o);
  auto r = any.client().Get("/v1/models", httplib::Headers{{"Origin", "https://app.example:8443"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_FALSE(r->has_header("Vary"));
}

TEST(Server, AllowedOriginsAreOriginsAsBrowsersSendThem) {
  for (const char* good :
       {"*", "null", "http://localhost:3000", "https://app.example", "chrome-extension://abc"})
    EXPECT_EQ(server::origin_problem(good), "") << good;
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"http://localhost:3000/",
            "an origin has no path, query or fragment (a browser sends 'http://localhost:3000')"},
           {"localhost:3000", "is not an origin"},
           {"", "is not an origin"},
           {"http://", "no host after the scheme"},
           {"1http://x", "is not a URL scheme"},
           {"http://a b", "a space, a comma or a control character"},
       }) {
    EXPECT_NE(server::origin_problem(bad).find(why), std::string::npos)
        << bad << ": " << server::origin_problem(bad);
  }
  server::ServerOptions o = default_options();
  o.allowed_origins = {"http://x/"};
  EXPECT_THROW(server::Server(shipped_model().model, shipped_model().tok, o), Error);
}

// One slot and a queue of one: of eight requests at once, those beyond the slot and the queue get 503 with
// Retry-After; the others finish.
TEST(Server, AFullQueueIs503WithRetryAfter) {
  // One slot and a queue of one, on a random model with a long context: the first request generates 4000
  // tokens while the second waits in the queue and six more arrive (in that order, each waited for in
  // /metrics, so that no timing decides the outcome): those six get 503, the first two 200.
  server::ServerOptions o = default_options();
  o.n_parallel = 1;
  o.max_queue = 1;
  o.model_id = "random";
  ServerFixture f(random_gpt2_vocab_model(4096), gpt2_tokenizer(), o);
  const std::string slow = R"({"prompt":"ROMEO:","max_tokens":4000,"ignore_eos":true})";
  auto post = [&] {
    return std::async(std::launch::async,
                      [&] { return f.client().Post("/v1/completions", slow, "application/json"); });
  };
  auto wait_for = [&](const std::string& line) {
    return wait_until([&] { return metrics_line(f.port(), line); });
  };
  auto first = post();
  ASSERT_TRUE(wait_for("minigpt_slots_busy 1"));
  auto second = post();
  ASSERT_TRUE(wait_for("minigpt_queue_depth 1"));
  std::vector<std::future<httplib::Result>> rest;
  for (int i = 0; i < 6; ++i) rest.push_back(post());
  for (auto& r : rest) {
    auto res = r.get();
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503) << res->body;
    EXPECT_EQ(res->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(res->body)["error"]["type"], "server_overloaded");
  }
  for (auto* r : {&first, &second}) {
    auto res = r->get();
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
}

// --- the log ----------------------------------------------------------------------------------

// The server's log lines (ServerOptions::log), as they come from its HTTP threads.
struct LogSink {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> l(m);
      lines.push_back(line);
      cv.notify_all();
    };
  }
  // The first line (from `from` on) that holds every needle, once one has come; "" if none comes before the
  // hang guard. `at` receives its index.
  std::string wait_for(const std::vector<std::string>& needles, size_t from = 0, size_t* at = nullptr) {
    std::unique_lock<std::mutex> l(m);
    std::string found;
    cv.wait_for(l, std::chrono::seconds(60), [&] {
      for (size_t i = from; i < lines.size(); ++i) {
        if (std::all_of(needles.begin(), needles.end(),
                        [&](const std::string& n) { return lines[i].find(n) != std::string::npos; })) {
          found = lines[i];
          if (at) *at = i;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  size_t size() {
    std::lock_guard<std::mutex> l(m);
    return lines.size();
  }
};

// One access line per request once its response is written, as llama-server and common HTTP servers log
// them: client, method and path, status, the completion's prompt, cached and generated tokens (a stream's
// too) and the time; a refusal with its message. /health and /metrics only with verbose (a monitor polls
// them). There was no line at all.
TEST(Server, EachRequestGetsAnAccessLine) {
  LogSink sink;
  server::ServerOptions o = default_options();
  o.log = sink.fn();
  ServerFixture f(o);
  auto c = f.client();
  c.set_keep_alive(true);  // one connection, one HTTP thread: each line is written before the next request
  const json r = post_json(f, "/v1/completions", {{"prompt", "ROMEO:"}, {"max_tokens", 4}, {"seed", 1}});
  const json& u = r["usage"];
  std::string line =
      sink.wait_for({"127.0.0.1 \"POST /v1/completions\" 200 prompt_tokens=" + u["prompt_tokens"].dump() +
                     " cached_tokens=" + u["prompt_tokens_details"]["cached_tokens"].dump() +
                     " completion_tokens=" + u["completion_tokens"].dump() + " time="});
  EXPECT_NE(line, "") << testing::PrintToString(sink.lines);
  EXPECT_TRUE(line.ends_with("s")) << line;
  EXPECT_EQ(line.find("temperature="), std::string::npos) << line;  // verbose only
  // a stream's line, with its tokens as streamed and the prompt cache's share
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = json{{"prompt", "ROMEO:"},
                  {"max_tokens", 5},
                  {"seed", 1},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}}}
                 .dump();
  auto res = c.send(req);
  ASSERT_TRUE(res);
  const json su = sse_events(res->body).back()["usage"];
  line = sink.wait_for({"\"POST /v1/completions\" 200 prompt_tokens=" + su["prompt_tokens"].dump() +
                        " cached_tokens=" + su["prompt_tokens_details"]["cached_tokens"].dump() +
                        " completion_tokens=5 time="});
  EXPECT_NE(line, "") << testing::PrintToString(sink.lines);
  EXPECT_GT(su["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << su.dump();
  // refusals, with their message
  res =
      c.Post("/v1/completions", json{{"prompt", std::vector<int32_t>(200, 'a')}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  line = sink.wait_for(
      {"\"POST /v1/completions\" 400 time=", "error=\"This server's maximum context length is 128 tokens"});
  EXPECT_NE(line, "") << testing::PrintToString(sink.lines);
  res = c.Get("/v1/completions");
  ASSERT_TRUE(res);
  EXPECT_NE(sink.wait_for({"\"GET /v1/completions\" 405 time=", "error=\"method GET is not allowed"}), "")
      << testing::PrintToString(sink.lines);
  // a path that would write a line of its own is one line still
  res = c.Get("/no%0Asuch%22path");
  ASSERT_TRUE(res);
  EXPECT_NE(sink.wait_for({"\"GET /no\\x0asuch\\x22path\" 404 time="}), "")
      << testing::PrintToString(sink.lines);
  // a health check and a scrape: no line (the next request's line comes after where theirs would be)
  const size_t before = sink.size();
  ASSERT_TRUE(c.Get("/health"));
  ASSERT_TRUE(c.Get("/metrics"));
  ASSERT_TRUE(c.Get("/v1/models"));
  size_t at = 0;
  EXPECT_NE(sink.wait_for({"\"GET /v1/models\" 200"}, before, &at), "");
  EXPECT_EQ(at, before) << testing::PrintToString(sink.lines);
}

// --verbose: the access line also gives the request's model, length and sampling settings with the seed as
// used (a sampled answer can be asked for again), and health checks are logged.
TEST(Server, VerboseAccessLinesGiveTheRequestsSettings) {
  LogSink sink;
  server::ServerOptions o = default_options();
  o.log = sink.fn();
  o.verbose = true;
  ServerFixture f(o);
  json body = {{"model", "shakespeare-char"}, {"prompt", "ROMEO:"}, {"max_tokens", 8},
               {"temperature", 0.9},          {"top_k", 7},         {"stop", {"xyz"}}};
  const json sampled = post_json(f, "/v1/completions", body);
  const std::string line = sink.wait_for(
      {"\"POST /v1/completions\" 200 prompt_tokens=", " model=\"shakespeare-char\" n=1 max_tokens=8",
       " stream=false temperature=0.9 top_k=7 top_p=1 ", " stop=1 seed="});
  ASSERT_NE(line, "") << testing::PrintToString(sink.lines);
  // the seed as used: the request again with it gives the same text
  body["seed"] = std::stoull(line.substr(line.find(" seed=") + 6));
  EXPECT_EQ(post_json(f, "/v1/completions", body)["choices"][0]["text"], sampled["choices"][0]["text"]);
  ASSERT_TRUE(f.client().Get("/health"));
  EXPECT_NE(sink.wait_for({"\"GET /health\" 200 time="}), "") << testing::PrintToString(sink.lines);
}

// --- /v1/chat/completions on chatml-tiny (tools/reference/make_chat_reference.py)
// --------------------------------

// lm-eval's tokenizer_backend=remote (lm_eval/utils.py, RemoteTokenizer) asks GET /tokenizer_info (and
// needs an "eos_token" key in it), POST /tokenize {"prompt", "add_special_tokens": false} reading "tokens",
// and POST /detokenize {"tokens"} reading "prompt"; its eos_token_id and bos_token_id are the first id of
// the token's text, tokenized. vLLM's /tokenize also answers "count" and "max_model_len", and takes
// "model". llama-server's shape ({"content"}, "add_special") stays.
TEST(Server, RemoteTokenizerShapesOfLmEvalAndVllm) {
  auto& f = shared_server();
  auto c = f.client();
  auto got = c.Get("/tokenizer_info");
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  const json info = json::parse(got->body);
  ASSERT_TRUE(info.contains("eos_token")) << info.dump();
  EXPECT_TRUE(info["eos_token"].is_null()) << info.dump();  // the shipped model never stops on a token
  EXPECT_EQ(info["bos_token"], "\n") << info.dump();        // config.json's bos_token_id 10
  EXPECT_EQ(info["model_max_length"], 128);
  EXPECT_FALSE(info.contains("chat_template"));
  const json t = post_json(f, "/tokenize", {{"prompt", "test"}, {"add_special_tokens", false}});
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), shipped_model().tok.encode("test"));
  EXPECT_EQ(t["count"], 4);
  EXPECT_EQ(t["max_model_len"], 128);
  EXPECT_EQ(post_json(f, "/tokenize", {{"model", "shakespeare-char"}, {"prompt", "\n"}})["tokens"],
            json({10}));
  const json d = post_json(f, "/detokenize", {{"model", "shakespeare-char"}, {"tokens", t["tokens"]}});
  EXPECT_EQ(d["prompt"], "test");
  EXPECT_EQ(d["content"], "test");
  // llama-server's shape answers the same
  EXPECT_EQ(post_json(f, "/tokenize", {{"content", "test"}, {"add_special", true}})["tokens"], t["tokens"]);
  // one text and one switch
  auto both = post_json(f, "/tokenize", {{"prompt", "a"}, {"content", "a"}}, 400);
  EXPECT_EQ(both["error"]["param"], "content") << both.dump();
  both =
      post_json(f, "/tokenize", {{"prompt", "a"}, {"add_special", true}, {"add_special_tokens", true}}, 400);
  EXPECT_EQ(both["error"]["param"], "add_special") << both.dump();
  EXPECT_EQ(post_json(f, "/tokenize", {{"prompt", 5}}, 400)["error"]["param"], "prompt");
  EXPECT_EQ(post_json(f, "/tokenize", {{"prompt", "a"}, {"add_special_tokens", 1}}, 400)["error"]["param"],
            "add_special_tokens");

  // A model with EOS and BOS tokens and a chat template: their texts tokenize to the ids minigpt uses
  // (config.json's bos_token_id 0 and eos_token_id 2), and the template is the one it renders with.
  ChatModel& m = chat_model();
  ServerFixture chat(m.model, m.tok, chat_options());
  auto ci = chat.client().Get("/tokenizer_info");
  ASSERT_TRUE(ci);
  const json cinfo = json::parse(ci->body);
  EXPECT_EQ(cinfo["chat_template"], m.tmpl.source());
  EXPECT_EQ(cinfo["eos_token"], "<|im_end|>");
  EXPECT_EQ(cinfo["bos_token"], "<|endoftext|>");
  EXPECT_EQ(cinfo["pad_token"], "<|endoftext|>");  // tokenizer_config.json's, as the template sees it
  for (const auto& [key, id] : {std::pair<const char*, int>{"eos_token", 2}, {"bos_token", 0}}) {
    const json ids =
        post_json(chat, "/tokenize", {{"prompt", cinfo[key]}, {"add_special_tokens", false}})["tokens"];
    ASSERT_FALSE(ids.empty()) << key;
    EXPECT_EQ(ids[0], id) << key;
  }

  // config.json's eos_token_id past the vocabulary (GPT2Config's 50256 in a smaller model) never comes:
  // generate() stops at the tokenizer's <|endoftext|>, and that is the EOS named.
  Config past = test::tiny_config();
  past.n_vocab = 50257;
  past.n_ctx = 64;
  past.eos_token_id = 60000;
  past.eos_token_ids = {60000};
  server::ServerOptions o = default_options();
  o.model_id = "random";
  ServerFixture g(Model::random(past, LoadOptions::threads(2)), gpt2_tokenizer(), o);
  auto gi = g.client().Get("/tokenizer_info");
  ASSERT_TRUE(gi);
  const json ginfo = json::parse(gi->body);
  EXPECT_EQ(ginfo["eos_token"], "<|endoftext|>") << ginfo.dump();
  EXPECT_EQ(ginfo["model_max_length"], 64);
}

// Greedy chat completions give the tokens transformers' generate() gives for the prompt its
// apply_chat_template makes; streamed, the same text and logprobs, after a first chunk with the role.
TEST(Server, ChatCompletionsGiveTransformersTokensStreamedOrNot) {
  ChatModel& m = chat_model();
  ServerFixture f(m.model, m.tok, chat_options());
  const int64_t max_new = m.ref["max_new_tokens"].get<int64_t>();
  for (const json& c : m.ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<int32_t> want = c["generated"].get<std::vector<int32_t>>();
    std::string finish = "length";
    if (!want.empty() && want.back() == m.model->config().eos_token_id) {
      want.pop_back();  // transformers keeps the EOS; the API's text ends before it
      finish = "stop";
    }
    const std::string want_bytes = m.tok.decode(want);
    // This random model emits byte tokens that are no UTF-8: the API's text has U+FFFD for each.
    const std::string want_text = utf8_sanitize(want_bytes);
    // cache_prompt off: the streamed request repeats this one, and its logprobs must equal these exactly
    // (from a cache, the last prompt token is evaluated alone, its logits equal to ~1e-6: see
    // PromptCache...).
    json body = {{"model", "chatml-tiny"}, {"messages", c["messages"]}, {"max_tokens", max_new},
                 {"temperature", 0},       {"logprobs", true},          {"top_logprobs", 3},
                 {"cache_prompt", false}};
    const json r = post_json(f, "/v1/chat/completions", body);
    EXPECT_EQ(r["object"], "chat.completion");
    EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
    const json& ch = r["choices"][0];
    EXPECT_EQ(ch["message"]["role"], "assistant");
    EXPECT_EQ(ch["message"]["content"], want_text);
    EXPECT_EQ(ch["finish_reason"], finish);
    EXPECT_EQ(r["usage"]["prompt_tokens"], c["ids"].size());
    EXPECT_EQ(r["usage"]["completion_tokens"], want.size() + (finish == "stop" ? 1 : 0));
    const json& lp = ch["logprobs"]["content"];
    ASSERT_EQ(lp.size(), want.size() + (finish == "stop" ? 1 : 0));
    std::string bytes;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(lp[i]["top_logprobs"].size(), 3u);
      // Greedy: the chosen token is the likeliest.
      EXPECT_NEAR(lp[i]["top_logprobs"][0]["logprob"].get<double>(), lp[i]["logprob"].get<double>(), 1e-9);
      for (const json& b : lp[i]["bytes"]) bytes += char(b.get<int>());
    }
    EXPECT_EQ(bytes, want_bytes);

    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto cl = f.client();
    auto res = cl.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    bool done = false;
    const auto events = sse_events(res->body, &done);
    EXPECT_TRUE(done);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
    EXPECT_EQ(events[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
    std::string text;
    json content = json::array();
    std::string reason;
    for (size_t i = 1; i < events.size(); ++i) {
      if (events[i]["choices"].empty()) {
        EXPECT_EQ(events[i]["usage"], r["usage"]);  // the last, with include_usage
        continue;
      }
      const json& d = events[i]["choices"][0];
      if (!d["finish_reason"].is_null()) {
        reason = d["finish_reason"];
        EXPECT_TRUE(d["delta"].empty());
        continue;
      }
      text += d["delta"]["content"].get<std::string>();
      for (const json& e : d["logprobs"]["content"]) content.push_back(e);
    }
    EXPECT_EQ(text, want_text);
    EXPECT_EQ(reason, finish);
    EXPECT_EQ(content, lp);
  }
}

// n > 1 with a seed: choice j samples with seed + j, as /v1/completions does for the same prompt ids.
TEST(Server, ChatChoicesEqualCompletionsOfTheRenderedPrompt) {
  ChatModel& m = chat_model();
  ServerFixture f(m.model, m.tok, chat_options());
  const json& c = m.ref["cases"][2];
  const json chat = post_json(f, "/v1/chat/completions",
                              {{"messages", c["messages"]}, {"max_tokens", 10}, {"seed", 5}, {"n", 3}});
  const json text =
      post_json(f, "/v1/completions", {{"prompt", c["ids"]}, {"max_tokens", 10}, {"seed", 5}, {"n", 3}});
  ASSERT_EQ(chat["choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(chat["choices"][i]["message"]["content"], text["choices"][i]["text"]);
    EXPECT_EQ(chat["choices"][i]["index"], i);
  }
}

// Bad chat requests: each a 400 naming the field, in the OpenAI error shape.
TEST(Server, BadChatRequestsAre400WithTheField) {
  ChatModel& m = chat_model();
  server::ServerOptions o = chat_options();
  ServerFixture f(m.model, m.tok, o);
  const json user = {{"role", "user"}, {"content", "hi"}};
  struct Case {
    json body;
    std::string param, says;
  };
  const std::vector<Case> cases = {
      {json::object(), "messages", "required"},
      {{{"messages", "hi"}}, "messages", "expected an array"},
      {{{"messages", json::array()}}, "messages", "must not be empty"},
      {{{"messages", {json{{"content", "x"}}}}}, "messages[0].role", "required"},
      {{{"messages", {json{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role", "must be one of"},
      {{{"messages", {json{{"role", "user"}, {"content", 5}}}}}, "messages[0].content", "expected a string"},
      {{{"messages", {json{{"role", "user"}}}}}, "messages[0].content", "required"},
      {{{"messages", {json{{"role", "user"}, {"content", "x"}, {"name", 5}}}}},
       "messages[0].name",
       "expected a string"},
      {{{"messages", {json{{"role", "user"}, {"content", "x"}, {"name", {1, 2}}}}}},
       "messages[0].name",
       "expected a string"},
      {{{"messages", {json{{"role", "user"}, {"content", {json{{"type", "image_url"}}}}}}}},
       "messages[0].content[0]",
       "only text content"},
      {{{"messages", {user}}, {"top_logprobs", 2}}, "top_logprobs", "logprobs must be true"},
      {{{"messages", {user}}, {"logprobs", true}, {"top_logprobs", 21}},
       "top_logprobs",
       "must be in [0, 20]"},
      {{{"messages", {user}}, {"tools", {json{{"type", "function"}}}}}, "tools[0].function", "required"},
      {{{"messages", {user}}, {"chat_template_kwargs", 3}}, "chat_template_kwargs", "expected an object"},
      {{{"messages", {user}}, {"chat_template_kwargs", {{"messages", 1}}}},
       "chat_template_kwargs",
       "must not set"},
      {{{"messages", {user}}, {"max_completion_tokens", -1}}, "max_completion_tokens", "must be in"},
      {{{"messages", {user}}, {"functions", {json{{"name", "f"}}}}}, "functions", "not supported"},
      {{{"messages", {user}}, {"function_call", "auto"}}, "function_call", "not supported"},
      {{{"messages", {user}}, {"audio", {{"voice", "alloy"}}}}, "audio", "not supported"},
      {{{"messages", {user}}, {"modalities", {"text", "audio"}}}, "modalities", "only [\"text\"]"},
      {{{"messages", {user}}, {"web_search_options", json::object()}}, "web_search_options", "not supported"},
      {{{"messages", {user}}, {"reasoning_effort", 3}}, "reasoning_effort", "expected a string"},
      {{{"messages", {user}}, {"repetition_penalty", 1.1}, {"repeat_penalty", 1.2}},
       "repeat_penalty",
       "not both"},
      {{{"messages", {user}}, {"n_predict", -2}}, "n_predict", "must be in [-1, 128]"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body.dump());
    const json r = post_json(f, "/v1/chat/completions", c.body, 400);
    EXPECT_EQ(r["error"]["param"], c.param);
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.says), std::string::npos) << r.dump();
  }
  // A conversation longer than the context (chatml-tiny: 128 positions).
  const json longer =
      post_json(f, "/v1/chat/completions",
                {{"messages", {json{{"role", "user"}, {"content", std::string(600, 'a')}}}}}, 400);
  EXPECT_EQ(longer["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(longer["error"]["param"], "messages");
}

// What chat clients send: every optional OpenAI parameter, many as null (typed clients write them all), the
// ones that change nothing here with values; no max_tokens, so the reply runs until the context is full (the
// chat API has no default length; 16 is the legacy completions API's); the same endpoints without /v1, as
// llama-server serves them; GET /v1/models/{model}; llama-server's n_predict and repeat_penalty.
TEST(Server, ChatClientsParametersAndRoutes) {
  ChatModel& m = chat_model();
  ServerFixture f(m.model, m.tok, chat_options());
  const json user = {{"role", "user"}, {"content", "hi"}};
  json body = {{"messages", {user}},
               {"ignore_eos", true},
               {"temperature", 0},
               {"service_tier", "auto"},
               {"reasoning_effort", "low"},
               {"prompt_cache_key", "k"},
               {"safety_identifier", "u1"},
               {"verbosity", "low"},
               {"prediction", {{"type", "content"}, {"content", "x"}}},
               {"modalities", {"text"}},
               {"functions", json::array()},
               {"function_call", "none"}};
  for (const char* k : {"audio", "web_search_options", "max_tokens", "max_completion_tokens", "tools",
                        "logit_bias", "stop", "seed", "n", "some_future_field"})
    body[k] = nullptr;
  const json r = post_json(f, "/v1/chat/completions", body);
  const int64_t prompt = r["usage"]["prompt_tokens"].get<int64_t>();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << r.dump();
  // chatml-tiny's 128 positions: prompt + completion - 1 (the last token is sampled, not evaluated)
  EXPECT_EQ(r["usage"]["completion_tokens"].get<int64_t>(), 129 - prompt) << r.dump();
  // without /v1: the same answer
  const json again = post_json(f, "/chat/completions", body);
  EXPECT_EQ(again["choices"][0]["message"], r["choices"][0]["message"]);
  // n_predict (llama-server's max_tokens): a number, or -1 for the whole context
  body["n_predict"] = 5;
  EXPECT_EQ(post_json(f, "/v1/chat/completions", body)["usage"]["completion_tokens"], 5);
  body["n_predict"] = -1;
  EXPECT_EQ(post_json(f, "/v1/chat/completions", body)["usage"]["completion_tokens"].get<int64_t>(),
            129 - prompt);
  // with max_tokens too, n_predict wins (llama-server's reading); max_tokens alone is the length, and the
  // legacy completions API keeps its 16
  body["max_tokens"] = 3;
  body["n_predict"] = 4;
  EXPECT_EQ(post_json(f, "/v1/chat/completions", body)["usage"]["completion_tokens"], 4);
  body.erase("n_predict");
  EXPECT_EQ(post_json(f, "/v1/chat/completions", body)["usage"]["completion_tokens"], 3);
  const json c =
      post_json(f, "/completions", {{"prompt", "hi"}, {"ignore_eos", true}, {"repeat_penalty", 1.3}});
  EXPECT_EQ(c["usage"]["completion_tokens"], 16);
  // models, with and without /v1, and one model by name
  auto cl = f.client();
  for (const char* path : {"/v1/models", "/models"}) {
    auto res = cl.Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(json::parse(res->body)["data"][0]["id"], "chatml-tiny");
  }
  auto res = cl.Get("/v1/models/chatml-tiny");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["id"], "chatml-tiny");
  EXPECT_EQ(json::parse(res->body)["object"], "model");
  res = cl.Get("/v1/models/gpt-4");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "model_not_found");
}

// A request's "model" names what answers it: the name /v1/models lists, an alias, or none; another name is
// the OpenAI API's 404 model_not_found naming the served names, on both completion endpoints and on
// GET /v1/models/{model} (it was answered by whatever was loaded).
TEST(Server, ModelFieldMustNameThisModel) {
  ChatModel& m = chat_model();
  server::ServerOptions o = chat_options();
  o.model_aliases = {"gpt-3.5-turbo", "local"};
  ServerFixture f(m.model, m.tok, o);
  const json user = {{"role", "user"}, {"content", "hi"}};
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/completions"}) {
    SCOPED_TRACE(path);
    json body = {{"max_tokens", 2}, {"temperature", 0}};
    if (std::string(path).ends_with("chat/completions")) {
      body["messages"] = {user};
    } else {
      body["prompt"] = "hi";
    }
    for (const char* name : {"chatml-tiny", "gpt-3.5-turbo", "local"}) {
      body["model"] = name;
      const json r = post_json(f, path, body);
      EXPECT_EQ(r["model"], "chatml-tiny") << r.dump();  // the name /v1/models lists
    }
    body.erase("model");
    post_json(f, path, body);
    body["model"] = nullptr;  // null: not given, as for every field
    post_json(f, path, body);
    body["model"] = "gpt-4o";
    const json e = post_json(f, path, body, 404);
    EXPECT_EQ(e["error"]["code"], "model_not_found") << e.dump();
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << e.dump();
    EXPECT_EQ(e["error"]["param"], "model") << e.dump();
    EXPECT_EQ(e["error"]["message"],
              "The model 'gpt-4o' does not exist; this server serves: chatml-tiny, gpt-3.5-turbo, local");
    body["model"] = "Chatml-Tiny";  // names are compared as given, as OpenAI's are
    post_json(f, path, body, 404);
  }
  auto cl = f.client();
  for (const char* name : {"chatml-tiny", "local"}) {
    auto res = cl.Get((std::string("/v1/models/") + name).c_str());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << name;
  }
  auto res = cl.Get("/v1/models/gpt-4o");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(json::parse(res->body)["error"]["message"],
            "The model 'gpt-4o' does not exist; this server serves: chatml-tiny, gpt-3.5-turbo, local");
}

// A special token the model samples (<|im_start|>) is counted but gives no text, as in llama-server and
// transformers' decode(skip_special_tokens=True). The server always skips them, `generate` unless
// --show-special.
TEST(Server, SampledSpecialTokensGiveNoText) {
  ChatModel& m = chat_model();
  const auto start = m.tok.special_id("<|im_start|>");
  ASSERT_TRUE(start.has_value());
  EXPECT_TRUE(m.tok.is_special(*start));
  const int32_t a = m.tok.encode("a").at(0);
  EXPECT_FALSE(m.tok.is_special(a));
  const int64_t V = m.model->config().n_vocab;
  for (const bool skip : {true, false}) {
    GenerateOptions o;
    o.sampling.temperature = 0;
    o.max_new_tokens = 3;
    o.skip_special = skip;
    Generator g(m.model->config(), &m.tok, o, {a});
    for (const int32_t id : {a, *start, a}) {
      std::vector<float> logits(size_t(V), 0.0f);
      logits[size_t(id)] = 10;
      g.push(logits);
    }
    EXPECT_EQ(g.result().tokens, (std::vector<int32_t>{a, *start, a}));
    EXPECT_EQ(g.result().text, skip ? "aa" : "a<|im_start|>a") << skip;
  }
  // A stop string that is a special token's text still ends generation there (llama.cpp matches a one-token
  // reverse prompt by id); the text before it is shown whole.
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.max_new_tokens = 5;
  o.skip_special = true;
  o.stop = {"<|im_start|>"};
  std::string shown;
  GenerateCallbacks cb;
  cb.on_text = [&](std::string_view t) { shown += t; };
  Generator g(m.model->config(), &m.tok, o, {a}, cb);
  bool going = true;
  for (const int32_t id : {a, a, *start}) {
    ASSERT_TRUE(going);
    std::vector<float> logits(size_t(V), 0.0f);
    logits[size_t(id)] = 10;
    going = g.push(logits);
  }
  EXPECT_FALSE(going);
  EXPECT_EQ(g.result().reason, StopReason::Stop);
  EXPECT_EQ(g.result().stop, "<|im_start|>");
  EXPECT_EQ(g.result().text, "aa");
  EXPECT_EQ(shown, "aa");
  // and through the server: parse_chat_request asks for it
  const auto r = server::parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}]})", m.tok,
                                            m.model->config(), {}, &m.tmpl);
  EXPECT_TRUE(r.gen.skip_special);
}

// A chat reply ends at the template's end-of-turn token: chatml-tiny's eos_token <|im_end|> (its
// tokenizer_config.json), also for a model whose config names <|endoftext|> alone, as a base model's does;
// ignore_eos still goes past both. A completion (no template) ends at the config's ids only.
TEST(ServerRequest, ChatRepliesEndAtTheTemplatesEndOfTurn) {
  ChatModel& m = chat_model();
  const auto im_end = m.tok.special_id("<|im_end|>"), eot = m.tok.special_id("<|endoftext|>");
  ASSERT_TRUE(im_end && eot);
  Config c = m.model->config();
  c.eos_token_ids = {*eot};
  c.eos_token_id = *eot;
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}]})";
  auto r = server::parse_chat_request(body, m.tok, c, {}, &m.tmpl);
  EXPECT_EQ(r.gen.eos_token_ids, (std::vector<int64_t>{*eot, *im_end}));
  std::vector<float> logits(size_t(c.n_vocab), 0.0f);
  logits[size_t(*im_end)] = 10;
  Generator g(c, &m.tok, r.gen, {1}, {});
  EXPECT_FALSE(g.push(logits));
  EXPECT_EQ(g.result().reason, StopReason::Eos);
  r = server::parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "ignore_eos": true})",
                                 m.tok, c, {}, &m.tmpl);
  Generator past(c, &m.tok, r.gen, {1}, {});
  EXPECT_TRUE(past.push(logits));
  const auto completion = server::parse_completion_request(R"({"prompt": "hi"})", m.tok, c, {});
  EXPECT_TRUE(completion.gen.eos_token_ids.empty());  // generate() takes the config's: <|endoftext|>
}

// A template's raise_exception is a 400 with its message (code chat_template_error); a model without a
// template says so (code model_not_chat).
TEST(Server, ChatTemplateRefusalsAndModelsWithoutTemplatesAre400) {
  ChatModel& m = chat_model();
  server::ServerOptions o = chat_options();
  o.chat_template = ChatTemplate(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{{ m.content }}{% endfor %}",
      {});
  {
    ServerFixture f(m.model, m.tok, o);
    const json r =
        post_json(f, "/v1/chat/completions",
                  {{"messages",
                    {json{{"role", "system"}, {"content", "x"}}, json{{"role", "user"}, {"content", "y"}}}}},
                  400);
    EXPECT_EQ(r["error"]["code"], "chat_template_error");
    EXPECT_NE(r["error"]["message"].get<std::string>().find("System role not supported"), std::string::npos);
    // The same template takes a conversation without a system message.
    post_json(f, "/v1/chat/completions",
              {{"messages", {json{{"role", "user"}, {"content", "y"}}}}, {"max_tokens", 2}});
  }
  o.chat_template.reset();
  ServerFixture f(m.model, m.tok, o);
  const json r =
      post_json(f, "/v1/chat/completions", {{"messages", {json{{"role", "user"}, {"content", "y"}}}}}, 400);
  EXPECT_EQ(r["error"]["code"], "model_not_chat");
}

// A /v1/completions request written on a raw socket (so that the test can close it): the socket, -1 on
// failure.
int post_raw(int port, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::write(fd, req.data(), req.size()) != ssize_t(req.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads what `fd` receives into `got` until `needle` is in it (true), or EOF or `seconds` pass (false).
bool read_until(int fd, std::string& got, const std::string& needle, double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (got.find(needle) == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    got.append(buf, size_t(n));
  }
  return true;
}

// Whether one /metrics answer shows nothing queued and no slot busy (a request may still be queued when its
// response headers went out), within the hang guard.
bool becomes_idle(ServerFixture& f) {
  return wait_until([&] {
    auto r = f.client().Get("/metrics");
    return r && r->body.find("\nminigpt_queue_depth 0\n") != std::string::npos &&
           r->body.find("\nminigpt_slots_busy 0\n") != std::string::npos;
  });
}

// A client that leaves before its completion ends cancels it. The request asks for a random model's whole
// context (16384 positions, the end of text ignored), so that a generation that ran on would end only at a
// full context: prompt + generated tokens = the context + 1. The client leaves once a token is out, long
// before that.
constexpr int64_t kLongContext = 16384;

// A stream: the client closes its socket once the first token's chunk has arrived; the server sees it at its
// next writes, cancels, and the slot is free again.
TEST(Server, ADisconnectedStreamFreesItsSlot) {
  server::ServerOptions o = default_options();
  o.n_parallel = 1;
  o.model_id = "random";
  ServerFixture f(random_gpt2_vocab_model(kLongContext), gpt2_tokenizer(), o);
  const json body = {
      {"prompt", "ROMEO:"}, {"max_tokens", kLongContext}, {"ignore_eos", true}, {"stream", true}};
  const int fd = post_raw(f.port(), body.dump());
  ASSERT_GE(fd, 0);
  std::string got;
  EXPECT_TRUE(read_until(fd, got, "data: {")) << got;  // the first token's chunk
  ::close(fd);
  EXPECT_TRUE(becomes_idle(f)) << "the slot was not freed";
  const int64_t generated = metric(f, "minigpt_generated_tokens_total");
  const int64_t prompt = metric(f, "minigpt_prompt_tokens_total");
  EXPECT_GE(generated, 1);
  EXPECT_GE(prompt, 1);
  EXPECT_LE(prompt + generated, kLongContext) << "the generation ran on after the client left";
  std::printf("[ measured ] tokens generated before the disconnect was seen: %lld\n", (long long)generated);
  // and the server goes on
  const json ok = post_json(f, "/v1/completions", {{"prompt", "A"}, {"max_tokens", 2}});
  EXPECT_EQ(ok["choices"][0]["finish_reason"], "length");
}

// The same for a client that closes before a non-streamed answer (a timeout, Ctrl-C): the handler finds
// its socket, sees the close within 250 ms, cancels and answers 499 (nginx's "client closed request", for
// the metrics), where the generation ran to max_tokens before.
TEST(Server, AClientThatLeavesBeforeTheAnswerFreesItsSlot) {
  server::ServerOptions o = default_options();
  o.n_parallel = 1;
  o.model_id = "random";
  ServerFixture f(random_gpt2_vocab_model(kLongContext), gpt2_tokenizer(), o);
  const json body = {{"prompt", "ROMEO:"}, {"max_tokens", kLongContext}, {"ignore_eos", true}};
  const int fd = post_raw(f.port(), body.dump());
  ASSERT_GE(fd, 0);
  // Wait until it generates, then leave.
  ASSERT_TRUE(wait_until([&] { return metric(f, "minigpt_generated_tokens_total") > 0; }));
  ::close(fd);
  EXPECT_TRUE(becomes_idle(f)) << "the slot was not freed";
  EXPECT_TRUE(wait_until([&] {
    return metrics_line(f.port(), R"(minigpt_requests_total{path="/v1/completions",status="499"} 1)");
  })) << "the request was not answered as cancelled";
  const int64_t generated = metric(f, "minigpt_generated_tokens_total");
  const int64_t prompt = metric(f, "minigpt_prompt_tokens_total");
  EXPECT_GE(prompt, 1);
  EXPECT_LE(prompt + generated, kLongContext) << "the generation ran on after the client left";
  std::printf("[ measured ] tokens generated before the close was seen: %lld\n", (long long)generated);
  // A client that stays gets its whole answer (the check does not mistake a live connection for a closed
  // one).
  const json ok =
      post_json(f, "/v1/completions", {{"prompt", "A"}, {"max_tokens", 40}, {"ignore_eos", true}});
  EXPECT_EQ(ok["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ok["usage"]["completion_tokens"], 40);
}

// A burst of clients connecting at once, more than httplib's own backlog of 5: with the server bound and
// nobody accepting yet (run() not called: the worst case of an accept loop starved while both cores
// decode), every handshake completes, kept by the kernel until the server takes it. With a backlog of 5 the
// sixth and later connects would wait on SYN retransmits (load-test clients saw ReadErrors at 1 s).
TEST(Server, ABurstOfConnectionsIsHeldForAccept) {
  server::ServerOptions o = default_options();
  o.port = 0;
  server::Server srv(shipped_model().model, shipped_model().tok, o);
  const int port = srv.bind();
  constexpr int kClients = 64;
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < kClients; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
  }
  // Each connect completes (the socket turns writable with no error). One past a full backlog never does
  // while nobody accepts (its SYNs are dropped): the deadline only ends that wait.
  int connected = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int fd : fds) {
    while (true) {
      pollfd p{fd, POLLOUT, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, int(std::max<int64_t>(0, left.count()))) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        connected += err == 0;
        break;
      }
      if (left.count() <= 0) break;
    }
  }
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(connected, kClients) << "connections completed while the server was not accepting";
}

// A port another server listens on is refused in one line, as llama-server does (with httplib's SO_REUSEPORT
// a second server would bind it silently, and the kernel would share the connections between the two).
// A server restarted on the port of one that has stopped, its connection just closed, binds it
// (SO_REUSEADDR).
TEST(Server, APortInUseIsRefusedAndAStoppedServersPortIsReused) {
  int port = 0;
  {
    ServerFixture first(default_options());
    port = first.port();
    auto res = first.client().Get("/health");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    server::ServerOptions o = default_options();
    o.port = port;
    server::Server second(shipped_model().model, shipped_model().tok, o);
    test::expect_error([&] { second.bind(); }, ErrorKind::Io,
                       {"cannot listen on " + o.host + ":" + std::to_string(port), "Address already in use"});
    res = first.client().Get("/health");  // the first one still answers
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
  server::ServerOptions o = default_options();
  o.port = port;
  server::Server again(shipped_model().model, shipped_model().tok, o);
  EXPECT_EQ(again.bind(), port);
}

// 10,000 random and malformed requests: every one answered (never a 5xx), and /health still answers.
TEST(Server, TenThousandMalformedRequestsLeaveItUp) {
  auto& f = shared_server();
  std::mt19937 rng(12345);
  const std::vector<std::string> paths = {"/v1/completions", "/v1/chat/completions", "/tokenize",
                                          "/detokenize",     "/v1/models",           "/health",
                                          "/metrics",        "/tokenizer_info",      "/x"};
  const std::vector<std::string> seeds = {R"({"prompt":"ROMEO:","max_tokens":2})",
                                          R"({"prompt":[1,2,3],"max_tokens":1,"logprobs":2,"echo":true})",
                                          R"({"content":"hello"})", R"({"tokens":[1,2]})",
                                          R"({"prompt":["a","b"],"n":2,"max_tokens":1,"stop":["x"]})"};
  const std::vector<std::string> junk = {"{",
                                         "}",
                                         "[",
                                         "]",
                                         "\"",
                                         ":",
                                         ",",
                                         "null",
                                         "-1",
                                         "1e999",
                                         "\xff",
                                         "\\u0000",
                                         "true",
                                         "\"prompt\"",
                                         "\"max_tokens\"",
                                         "99999999999999999999",
                                         "\"n\""};
  auto c = f.client();
  int answered = 0;
  for (int i = 0; i < 10000; ++i) {
    std::string body = seeds[rng() % seeds.size()];
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      const size_t at = rng() % body.size();
      switch (rng() % 4) {
        case 0:
          body.erase(at, 1 + rng() % 4);
          break;
        case 1:
          body.insert(at, junk[rng() % junk.size()]);
          break;
        case 2:
          body[at] = char(rng() % 256);
          break;
        default:
          body = body.substr(0, at);
      }
    }
    const std::string& path = paths[rng() % paths.size()];
    auto res = (rng() % 8 == 0) ? c.Get(path.c_str()) : c.Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(res) << "no answer to request " << i << ": " << path << " " << body;
    ASSERT_LT(res->status, 500) << path << " " << body << " -> " << res->body;
    ++answered;
  }
  EXPECT_EQ(answered, 10000);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

// The CLI: SIGTERM (and SIGINT) while a stream runs: no new requests, the stream ends with [DONE], exit 0.
// `minigpt serve ARGS` on port 0: the process, its stderr so far and the port it printed.
struct ServeProcess {
  pid_t pid = -1;
  int err_fd = -1;
  int port = 0;
  std::string err;
  explicit ServeProcess(std::vector<std::string> args) {
    int err_pipe[2];
    if (::pipe(err_pipe) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
    args.insert(args.begin(), {MINIGPT_CLI_PATH, "serve", "--port", "0"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(err_pipe[1]);
    err_fd = err_pipe[0];
    if (rc != 0) return;
    char buf[256];
    while (port == 0) {
      const ssize_t n = ::read(err_fd, buf, sizeof buf);
      if (n <= 0) break;
      err.append(buf, size_t(n));
      const auto at = err.find("http://127.0.0.1:");
      if (at != std::string::npos && err.find(' ', at) != std::string::npos)
        port = std::stoi(err.substr(at + 17));
    }
  }
  // Reads stderr into err until it holds `needle` (true), or the process ends or the hang guard passes.
  bool wait_for(const std::string& needle) { return err_fd >= 0 && read_until(err_fd, err, needle); }
  // SIGTERM (or `sig`), then the exit status (and the rest of stderr in err)
  int stop(int sig = SIGTERM) {
    if (pid > 0) ::kill(pid, sig);
    return wait();
  }
  // The exit status, once the process ends (and the rest of stderr in err)
  int wait() {
    int st = -1;
    if (pid > 0) {
      ::waitpid(pid, &st, 0);
      pid = -1;
    }
    char buf[256];
    ssize_t n;
    while (err_fd >= 0 && (n = ::read(err_fd, buf, sizeof buf)) > 0) err.append(buf, size_t(n));
    if (err_fd >= 0) ::close(err_fd);
    err_fd = -1;
    return st;
  }
  ~ServeProcess() { stop(); }
};

// serve's sampling flags (llama-server's names as aliases) are the defaults of a request that leaves the
// setting out: the shipped model's greedy tokens with the repetition penalty over the last 8 ids, as
// transformers gives them (penalties.json); a request's own fields win (the plain greedy tokens).
TEST(ServeCli, SamplingFlagsAreRequestDefaults) {
  const json ref = json::parse(
      test::read_file(test::source_dir() / "tests" / "fixtures" / "generate" / "penalties.json"))["greedy"];
  const json* windowed = nullptr;
  for (const json& c : ref) {
    if (c["repeat_last_n"] == 8) windowed = &c;
  }
  ASSERT_NE(windowed, nullptr);
  ASSERT_EQ(ref[0]["repetition_penalty"], 1.0);  // the plain greedy case
  ServeProcess srv({"-m", (test::source_dir() / "models" / "shakespeare-char").string(), "-t", "1", "--temp",
                    "0", "--repeat-penalty", (*windowed)["repetition_penalty"].dump(), "--repeat-last-n",
                    "8"});
  ASSERT_GT(srv.port, 0) << srv.err;
  EXPECT_NE(srv.err.find("the command line: temperature 0, repetition_penalty 1.5, penalty_last_n 8"),
            std::string::npos)
      << srv.err;
  // The start line gives the base URL an OpenAI client takes (with /v1).
  EXPECT_NE(srv.err.find(" at http://127.0.0.1:" + std::to_string(srv.port) + "/v1 ("), std::string::npos)
      << srv.err;
  httplib::Client c("127.0.0.1", srv.port);
  c.set_read_timeout(60, 0);
  const auto text = [](const json& ids) {
    const auto v = ids.get<std::vector<int32_t>>();
    return std::string(v.begin(), v.end());  // the byte-level vocabulary: id = byte
  };
  const size_t n = (*windowed)["generated"].size();
  json body = {{"prompt", (*windowed)["prompt"]}, {"max_tokens", n}};
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], text((*windowed)["generated"]));
  body["repetition_penalty"] = 1;
  res = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], text(ref[0]["generated"]).substr(0, n));
  EXPECT_EQ(srv.stop(), 0) << srv.err;
  // a flag's bad value is one line before the server listens
  ServeProcess bad(
      {"-m", (test::source_dir() / "models" / "shakespeare-char").string(), "--repeat-last-n", "-3"});
  EXPECT_EQ(bad.port, 0);
  const int st = bad.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
  EXPECT_NE(bad.err.find("minigpt: error: repeat_last_n: must be >= -1"), std::string::npos) << bad.err;
  EXPECT_EQ(test::line_count(bad.err), 1u) << bad.err;
}

// serve's log on stderr: an access line per request (refusals with their message), with -v the request's
// settings; --alias names the model may also be asked by, the first one listed; the start line and a
// prompt past -c say the model's longer context and the option for it.
TEST(ServeCli, AccessLinesAliasesAndTheContextOption) {
  const int64_t trained = shipped_model().model->config().n_ctx;
  ServeProcess srv(
      {"-m", shipped().string(), "-t", "1", "-c", "64", "--alias", "bard", "--alias", "gpt-4o-mini", "-v"});
  ASSERT_GT(srv.port, 0) << srv.err;
  EXPECT_NE(srv.err.find("serving bard (also gpt-4o-mini) at http://127.0.0.1:" + std::to_string(srv.port) +
                         "/v1 (4 slots, context 64 of the model's " + std::to_string(trained) + ": -c " +
                         std::to_string(trained) + " for all of it)"),
            std::string::npos)
      << srv.err;
  httplib::Client c("127.0.0.1", srv.port);
  c.set_read_timeout(60, 0);
  auto res = c.Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["data"][0]["id"], "bard");
  res = c.Post(
      "/v1/completions",
      json{{"model", "gpt-4o-mini"}, {"prompt", "ROMEO:"}, {"max_tokens", 3}, {"temperature", 0}}.dump(),
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(srv.wait_for("\"POST /v1/completions\" 200 prompt_tokens=" +
                           std::to_string(shipped_model().tok.encode("ROMEO:").size()) +
                           " cached_tokens=0 completion_tokens=3 time="))
      << srv.err;
  EXPECT_TRUE(srv.wait_for(" model=\"gpt-4o-mini\" n=1 max_tokens=3 stream=false temperature=0 ")) << srv.err;
  res = c.Post("/v1/completions", json{{"model", "shakespeare-char"}, {"prompt", "x"}}.dump(),
               "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404) << res->body;
  EXPECT_TRUE(srv.wait_for("\"POST /v1/completions\" 404 time=")) << srv.err;
  EXPECT_TRUE(
      srv.wait_for("error=\"The model 'shakespeare-char' does not exist; this server serves: bard, "
                   "gpt-4o-mini\""))
      << srv.err;
  res = c.Post("/v1/completions", json{{"prompt", std::string(100, 'a')}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  const std::string raise = "This server's maximum context length is 64 tokens (the model's is " +
                            std::to_string(trained) + "; start the server with -c " +
                            std::to_string(trained) + " (--ctx-size) to raise it)";
  EXPECT_NE(json::parse(res->body)["error"]["message"].get<std::string>().find(raise), std::string::npos)
      << res->body;
  EXPECT_TRUE(srv.wait_for("\"POST /v1/completions\" 400 time=")) << srv.err;
  EXPECT_TRUE(srv.wait_for("error=\"" + raise)) << srv.err;
  EXPECT_EQ(srv.stop(), 0) << srv.err;
  // an empty alias is one line before the server listens
  ServeProcess bad({"-m", shipped().string(), "--alias", ""});
  EXPECT_EQ(bad.port, 0);
  const int st = bad.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
  EXPECT_NE(bad.err.find("the alias is empty"), std::string::npos) << bad.err;
  EXPECT_EQ(test::line_count(bad.err), 1u) << bad.err;
}

// A signal (SIGTERM, or SIGINT: Ctrl-C) mid-stream: the server takes no new requests and ends when the
// running ones have finished, each stream with its last chunk and [DONE]; then exit 0. The stream asks for
// a random model's whole context (8192 positions, the end of text ignored), so that it ends only at a full
// context, many times later than the signal watcher's 50 ms poll acts; the signal goes once its first token
// has arrived, and the drain is seen to begin (/health answers 503) while its slot still generates.
TEST(ServeCli, SignalsEndStreamsCleanlyAndExitZero) {
  constexpr int64_t kCtx = 8192;
  test::TempDir tmp;
  Config cfg = test::tiny_config();
  cfg.n_vocab = 256;  // the shipped model's tokenizer: one token per byte
  cfg.n_ctx = kCtx;
  cfg.n_embd = 32;
  cfg.n_inner = 128;
  write_random_model(tmp.path(), cfg);
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    ServeProcess srv({"-m", tmp.path().string(), "--tokenizer", shipped().string(), "-c",
                      std::to_string(kCtx), "-np", "2", "-t", "1"});
    const int port = srv.port;
    ASSERT_GT(port, 0) << srv.err;
    // The stream's body as it arrives.
    std::mutex m;
    std::condition_variable cv;
    std::string body;
    auto stream = std::async(std::launch::async, [&] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(300, 0);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.set_header("Content-Type", "application/json");
      req.body = json{{"prompt", "ROMEO:"},
                      {"max_tokens", kCtx},
                      {"ignore_eos", true},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}}
                     .dump();
      req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        std::lock_guard<std::mutex> l(m);
        body.append(data, n);
        cv.notify_all();
        return true;
      };
      return c.send(req);
    });
    {
      std::unique_lock<std::mutex> l(m);
      ASSERT_TRUE(
          cv.wait_for(l, std::chrono::seconds(60), [&] { return body.find("data: {") != std::string::npos; }))
          << "no token streamed: " << body;
    }
    ::kill(srv.pid, sig);
    int health = 0;
    EXPECT_TRUE(wait_until([&] {
      httplib::Client h("127.0.0.1", port);
      auto r = h.Get("/health");
      health = r ? r->status : -1;
      return health != 200;
    }));
    EXPECT_EQ(health, 503) << "the server was gone: the stream had ended before the signal was handled";
    EXPECT_TRUE(metrics_line(port, "minigpt_slots_busy 1")) << "the stream had ended before the drain began";
    auto res = stream.get();
    ASSERT_TRUE(res) << httplib::to_string(res.error()) << "; received " << body.size() << " bytes, ending "
                     << body.substr(body.size() - std::min<size_t>(body.size(), 300));
    EXPECT_EQ(res->status, 200);
    bool done = false;
    const auto evs = sse_events(body, &done);
    EXPECT_TRUE(done) << "the stream was cut, not ended";
    ASSERT_GE(evs.size(), 2u);
    // The choice's last chunk, then the usage: it ran to a full context.
    EXPECT_EQ(evs[evs.size() - 2]["choices"][0]["finish_reason"], "length");
    const json& usage = evs.back()["usage"];
    EXPECT_EQ(usage["prompt_tokens"].get<int64_t>() + usage["completion_tokens"].get<int64_t>(), kCtx + 1)
        << usage;
    // The build, the back-end and the kernels a seed's tokens depend on.
    EXPECT_EQ(evs.back()["system_fingerprint"], "minigpt-0.1.0-cpu-" + cpu_info().kernel_level);
    const int st = srv.wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st << "\n" << srv.err;
    EXPECT_NE(srv.err.find("minigpt: stopping: no new requests; finishing the running ones"),
              std::string::npos)
        << srv.err;
    EXPECT_NE(srv.err.find("minigpt: stopped"), std::string::npos) << srv.err;
  }
}

}  // namespace
}  // namespace minigpt
