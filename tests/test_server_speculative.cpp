// serve with speculative decoding (--prompt-lookup, --draft-model; a request's prompt_lookup and
// llama-server's speculative.n_max / n_min): greedy replies equal the plain ones, alone and four at a time.
#include <future>

#include "server_test_util.h"

namespace minigpt {
namespace {

using server_test::json;
using server_test::post_json;
using server_test::ServerFixture;

std::vector<std::string> spec_prompts() {
  std::vector<std::string> out;
  const char* names[] = {"ROMEO", "JULIET", "KING HENRY", "First Citizen", "MENENIUS"};
  for (int i = 0; i < 20; ++i) {
    const std::string n = names[i % 5];
    out.push_back(n + ":\nWhat say you, " + n + "? " + n + ":\nI say" + std::string(size_t(i % 4), ' '));
  }
  return out;
}

json completion(const std::string& prompt, bool plain) {
  json body = {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  if (plain) body["speculative.n_max"] = 0;
  return body;
}

// A counter's value in /metrics.
int64_t metric(ServerFixture& f, const std::string& name) {
  const std::string m = f.client().Get("/metrics")->body;
  const size_t at = m.find("\n" + name + " ");
  EXPECT_NE(at, std::string::npos) << name << " not in " << m;
  return at == std::string::npos ? -1 : std::stoll(m.substr(at + name.size() + 2));
}

// Each prompt plain (speculative.n_max 0) and speculative, one at a time, then four at a time; drafts were
// made and some kept.
void expect_equal_replies(ServerFixture& f) {
  const auto prompts = spec_prompts();
  std::vector<std::string> plain;
  for (const auto& p : prompts) {
    plain.push_back(post_json(f, "/v1/completions", completion(p, true))["choices"][0]["text"]);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const json r = post_json(f, "/v1/completions", completion(prompts[i], false));
    EXPECT_EQ(r["choices"][0]["text"], plain[i]) << "alone, prompt " << i;
  }
  for (size_t i = 0; i < prompts.size(); i += 4) {
    std::vector<std::future<json>> replies;
    for (size_t j = i; j < i + 4; ++j) {
      replies.push_back(std::async(std::launch::async, [&, j] {
        return post_json(f, "/v1/completions", completion(prompts[j], false));
      }));
    }
    for (size_t j = i; j < i + 4; ++j)
      EXPECT_EQ(replies[j - i].get()["choices"][0]["text"], plain[j]) << "four at a time, prompt " << j;
  }
  EXPECT_GT(metric(f, "minigpt_draft_tokens_total"), 0);
  EXPECT_GT(metric(f, "minigpt_draft_tokens_accepted_total"), 0);
}

TEST(ServerSpeculative, PromptLookupRepliesEqualPlainAloneAndFourAtATime) {
  server::ServerOptions o = server_test::default_options();
  o.speculative.prompt_lookup = true;
  o.speculative.draft_min = 1;
  ServerFixture f(o);
  expect_equal_replies(f);
}

TEST(ServerSpeculative, DraftModelRepliesEqualPlainAloneAndFourAtATime) {
  server::ServerOptions o = server_test::default_options();
  LoadOptions lo = LoadOptions::threads(2);
  lo.weight_dtype = DType::F16;  // the model's own F16 copy drafts for it
  o.speculative.draft_model = Model::load(server_test::shipped(), lo);
  ServerFixture f(o);
  expect_equal_replies(f);
}

TEST(ServerSpeculative, BadSpeculativeFieldsAre400NamingTheField) {
  ServerFixture f(server_test::default_options());
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"speculative.n_max", 65}, {"speculative.n_max", "8"}, {"prompt_lookup", 1}}) {
    json body = {{"prompt", "ROMEO:"}, {"max_tokens", 4}, {field, value}};
    const json r = post_json(f, "/v1/completions", body, 400);
    EXPECT_EQ(r["error"]["param"], field) << r.dump();
  }
  // n_min above n_max
  const json r = post_json(
      f, "/v1/completions",
      {{"prompt", "ROMEO:"}, {"max_tokens", 4}, {"speculative.n_max", 2}, {"speculative.n_min", 3}}, 400);
  EXPECT_EQ(r["error"]["param"], "speculative.n_min") << r.dump();
}

}  // namespace
}  // namespace minigpt
