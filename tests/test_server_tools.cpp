// minigpt serve's tool calls (src/server/tool_calls.h) on the random-weight chat model: with its own Qwen 2.5
// template (the Hermes format: <tool_call> JSON, constrained once opened) and with Phi-3.5's, which renders
// no tools (llama.cpp's generic JSON format). Each reply the constraint ended reads back as OpenAI's
// message.tool_calls (a known function, arguments a JSON object of its parameters); a stream's tool_calls
// deltas add up to what the same request gives whole (a copy of the model with a longer context, as the
// tools' system prompts need); bad tools and tool choices are a 400 naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/random_weights.h"
#include "server_test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
using namespace server_test;  // NOLINT(google-build-using-namespace): the fixture is these tests' own

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                  "unit": {"enum": ["C", "F"]}}, "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "add", "description": "a + b",
   "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                  "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}}}
])");

// Why a call does not match kTools, or "".
std::string call_violations(const json& call) {
  if (call["type"] != "function" || !call["id"].is_string() || call["id"].get<std::string>().empty())
    return "no id or type";
  const std::string name = call["function"]["name"];
  const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
  if (!args.is_object()) return "arguments are not a JSON object";
  if (name == "get_weather") {
    if (!args.contains("city") || !args["city"].is_string() || !args.contains("unit") ||
        (args["unit"] != "C" && args["unit"] != "F") || args.size() != 2)
      return "not get_weather's parameters: " + args.dump();
    return "";
  }
  if (name == "add") {
    if (!args.contains("a") || !args["a"].is_number_integer() || !args.contains("b") ||
        !args["b"].is_number_integer() || args.size() != 2)
      return "not add's parameters: " + args.dump();
    return "";
  }
  return "an unknown function " + name;
}

// Phi-3.5's template (it renders no tools), from the templates transformers rendered for the chat tests.
server::ServerOptions generic_options() {
  std::ifstream in(test::source_dir() / "tests" / "fixtures" / "chat" / "templates.json");
  const json all = json::parse(in);
  server::ServerOptions o = chat_options();
  for (const json& t : all["templates"]) {
    if (t["name"] == "microsoft-Phi-3.5-mini-instruct")
      o.chat_template = ChatTemplate(t["source"].get<std::string>(), chat_model().tmpl.special_tokens());
  }
  return o;
}

// chatml-tiny's shape, vocabulary and Qwen 2.5 template with 2048 positions (and random weights): the tools'
// system prompts are longer than its 128.
struct LongChat {
  test::TempDir dir;
  std::shared_ptr<const Model> model;
  ChatTemplate tmpl = chat_model().tmpl;
  LongChat() {
    Config c = chat_model().model->config();
    c.n_ctx = 2048;
    write_random_model(dir.path(), c);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
      std::filesystem::copy_file(test::fixture_dir("chatml-tiny") / f, dir.path() / f);
    model = Model::load(dir.path(), LoadOptions::threads(2));
  }
};
LongChat& long_chat() {
  static LongChat m;
  return m;
}
server::ServerOptions long_options() {
  server::ServerOptions o = chat_options();
  o.model_id = "chatml-long";
  return o;
}

json tools_body(json extra) {
  json body = {{"messages", {json{{"role", "user"}, {"content", "Weather?"}}}},
               {"tools", kTools},
               {"temperature", 1},
               {"n", 4},
               {"seed", 3},
               {"max_tokens", 120},
               {"logit_bias", whitespace_bias()}};
  body.update(extra);
  return body;
}

// The replies of `body` to tool_choice `choice`: every one that ended by the constraint (not by the
// context) is calls of `names` (or, `may_answer`, a text answer); returns how many ended so.
int check_calls(const ServerFixture& f, json body, const std::vector<std::string>& names, bool may_answer) {
  int ended = 0;
  const json r = post_json(f, "/v1/chat/completions", body);
  for (const json& c : r["choices"]) {
    const std::string reason = c["finish_reason"];
    if (reason == "length") continue;
    ++ended;
    const json& m = c["message"];
    if (reason == "stop") {
      EXPECT_TRUE(may_answer) << c.dump();
      EXPECT_FALSE(m.contains("tool_calls")) << c.dump();
      EXPECT_TRUE(m["content"].is_string()) << c.dump();
      continue;
    }
    EXPECT_EQ(reason, "tool_calls") << c.dump();
    EXPECT_TRUE(m.contains("tool_calls")) << c.dump();
    if (!m.contains("tool_calls")) continue;
    EXPECT_GE(m["tool_calls"].size(), 1u);
    for (const json& call : m["tool_calls"]) {
      EXPECT_EQ(call_violations(call), "") << call.dump();
      EXPECT_NE(std::find(names.begin(), names.end(), call["function"]["name"]), names.end()) << call.dump();
    }
  }
  return ended;
}

TEST(ServerTools, HermesTemplateCallsFollowTheToolsSchemas) {
  ServerFixture f(long_chat().model, chat_model().tok, long_options());
  int ended = 0;
  for (const int seed : {1, 2}) {
    ended += check_calls(f, tools_body({{"tool_choice", "required"}, {"seed", seed}}), {"get_weather", "add"},
                         false);
    ended += check_calls(f,
                         tools_body({{"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}},
                                     {"seed", seed}}),
                         {"add"}, false);
    ended += check_calls(f, tools_body({{"seed", seed}, {"parallel_tool_calls", false}}),
                         {"get_weather", "add"}, true);
  }
  EXPECT_GE(ended, 12) << "of 24 replies, too few ended inside the context";
}

TEST(ServerTools, GenericFormatForATemplateWithoutTools) {
  ServerFixture f(long_chat().model, chat_model().tok, generic_options());
  int ended = 0;
  for (const int seed : {1, 2}) {
    ended += check_calls(f, tools_body({{"tool_choice", "required"}, {"seed", seed}}), {"get_weather", "add"},
                         false);
    ended += check_calls(
        f,
        tools_body({{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                    {"seed", seed},
                    {"parallel_tool_calls", false}}),
        {"get_weather"}, false);
    ended += check_calls(f, tools_body({{"seed", seed}}), {"get_weather", "add"}, true);
  }
  EXPECT_GE(ended, 12) << "of 24 replies, too few ended inside the context";
}

// A stream's calls as the openai client's stream helpers put them together: per index, the id, type and
// name of the first delta, the arguments concatenated; they equal the same request's whole reply.
TEST(ServerTools, StreamedCallsAddUpToTheWholeReply) {
  for (const bool generic : {false, true}) {
    SCOPED_TRACE(generic ? "generic" : "hermes");
    ServerFixture f(long_chat().model, chat_model().tok, generic ? generic_options() : long_options());
    json body = tools_body({{"tool_choice", "required"}, {"n", 1}});
    int compared = 0;
    for (const int seed : {4, 5, 6}) {
      body["seed"] = seed;
      body["stream"] = false;
      const json whole = post_json(f, "/v1/chat/completions", body)["choices"][0];
      body["stream"] = true;
      auto res = f.client().Post("/v1/chat/completions", body.dump(), "application/json");
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 200) << res->body;
      json calls = json::array();
      std::string finish;
      for (const json& e : sse_events(res->body)) {
        for (const json& c : e["choices"]) {
          if (c["finish_reason"].is_string()) finish = c["finish_reason"];
          if (!c["delta"].contains("tool_calls")) continue;
          for (const json& d : c["delta"]["tool_calls"]) {
            const size_t k = d["index"];
            if (k == calls.size()) {
              ASSERT_TRUE(d.contains("id") && d["function"].contains("name")) << d.dump();
              calls.push_back({{"id", d["id"]},
                               {"type", d["type"]},
                               {"function", {{"name", d["function"]["name"]}, {"arguments", ""}}}});
            }
            ASSERT_LT(k, calls.size());
            calls[k]["function"]["arguments"] =
                calls[k]["function"]["arguments"].get<std::string>() + d["function"].value("arguments", "");
          }
        }
      }
      EXPECT_EQ(finish, whole["finish_reason"]);
      if (finish != "tool_calls") continue;
      ++compared;
      ASSERT_EQ(calls.size(), whole["message"]["tool_calls"].size());
      for (size_t k = 0; k < calls.size(); ++k) {
        const json& w = whole["message"]["tool_calls"][k];
        EXPECT_EQ(calls[k]["function"]["name"], w["function"]["name"]);
        EXPECT_EQ(json::parse(calls[k]["function"]["arguments"].get<std::string>()),
                  json::parse(w["function"]["arguments"].get<std::string>()));
      }
    }
    EXPECT_GE(compared, 2);
  }
}

// A conversation that called a tool and has its result goes back to the template: Hermes renders the call
// in <tool_call> with its arguments as an object and the result in <tool_response>; the generic format as
// JSON turns.
TEST(ServerTools, EarlierCallsAndResultsRenderForTheTemplate) {
  const json messages = json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"C\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees"}])");
  server::RequestLimits lim;
  lim.n_ctx = 100000;
  const json body = {{"messages", messages}, {"tools", kTools}, {"max_tokens", 1}};
  const server::CompletionRequest hermes = server::parse_chat_request(
      body.dump(), chat_model().tok, chat_model().model->config(), lim, &chat_model().tmpl);
  const std::string& h = hermes.rendered_prompt;
  EXPECT_NE(
      h.find(
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"C\"}}"),
      std::string::npos)
      << h;
  EXPECT_NE(h.find("<tool_response>\n21 degrees\n</tool_response>"), std::string::npos) << h;
  EXPECT_NE(h.find("\"name\": \"add\""), std::string::npos) << h;  // the tools, in the system prompt

  const server::ServerOptions g = generic_options();
  const server::CompletionRequest generic = server::parse_chat_request(
      body.dump(), chat_model().tok, chat_model().model->config(), lim, &*g.chat_template);
  const std::string& s = generic.rendered_prompt;
  EXPECT_NE(s.find("Respond in JSON format, either with `tool_calls`"), std::string::npos) << s;
  EXPECT_NE(s.find("\"tool_response\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"city\": \"Paris\""), std::string::npos) << s;
}

TEST(ServerTools, BadToolsAndChoicesAre400NamingTheField) {
  ServerFixture f(long_chat().model, chat_model().tok, long_options());
  const json user = {{"role", "user"}, {"content", "hi"}};
  struct Case {
    json body;
    std::string param, says;
  };
  json dup = kTools;
  dup[1]["function"]["name"] = "get_weather";
  const std::vector<Case> cases = {
      {{{"messages", {user}},
        {"tools", kTools},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
       "tool_choice",
       "not in tools"},
      {{{"messages", {user}}, {"tools", kTools}, {"tool_choice", "sometimes"}}, "tool_choice", "must be"},
      {{{"messages", {user}}, {"tool_choice", "required"}}, "tool_choice", "tools is empty"},
      {{{"messages", {user}}, {"tools", "get_weather"}}, "tools", "expected an array"},
      {{{"messages", {user}}, {"tools", {json{{"type", "retrieval"}}}}}, "tools[0]", "expected"},
      {{{"messages", {user}}, {"tools", {json{{"type", "function"}, {"function", {{"name", "a b"}}}}}}},
       "tools[0].function.name",
       "must be 1 to 64"},
      {{{"messages", {user}}, {"tools", dup}}, "tools[1].function.name", "given twice"},
      {{{"messages", {user}}, {"tools", kTools}, {"response_format", {{"type", "json_object"}}}},
       "response_format",
       "not with tools"},
      {{{"messages", {user}}, {"tools", kTools}, {"parallel_tool_calls", "yes"}},
       "parallel_tool_calls",
       "boolean"},
      {{{"messages", {user}},
        {"tools",
         {json{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "strnig"}}}}}}}}},
       "tools",
       "not one minigpt can follow"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body.dump());
    const json r = post_json(f, "/v1/chat/completions", c.body, 400);
    EXPECT_EQ(r["error"]["param"], c.param);
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.says), std::string::npos) << r.dump();
  }
  // tool_choice "none" (or no tools) is a plain chat reply; the server goes on serving.
  const json r =
      post_json(f, "/v1/chat/completions",
                {{"messages", {user}}, {"tools", kTools}, {"tool_choice", "none"}, {"max_tokens", 3}});
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
}

}  // namespace
}  // namespace minigpt
