// minigpt serve's structured output: OpenAI's response_format (json_object, json_schema) and llama-server's
// json_schema and grammar fields on /v1/chat/completions and /v1/completions, on the random-weight chat
// model (chatml-tiny, whose free output is no JSON): every choice of a batch and every stream follows its
// request's constraint (checked here by the schema's few keywords, not by the engine); schemas and grammars
// the engine refuses are a 400 naming the field, and the server goes on serving.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server_test_util.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
using namespace server_test;  // NOLINT(google-build-using-namespace): the fixture is these tests' own

// Short, so that a random model's JSON (with up to 20 characters of whitespace between its tokens) ends
// inside the fixture's 128 positions.
const json kMembership = json::parse(R"({
  "type": "object",
  "properties": {"colour": {"enum": ["red", "green", "blue"]}, "member": {"type": "boolean"}},
  "required": ["colour", "member"]
})");

// kMembership's keywords, checked on `text`: the reasons it fails, empty when it validates.
std::string membership_violations(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return "not JSON";
  if (!j.is_object()) return "not an object";
  if (j.size() != 2) return "not exactly the two properties";  // strict: no others
  if (!j.contains("colour") || !j["colour"].is_string() ||
      (j["colour"] != "red" && j["colour"] != "green" && j["colour"] != "blue"))
    return "colour is not red, green or blue";
  if (!j.contains("member") || !j["member"].is_boolean()) return "member is not a boolean";
  return "";
}

json structured_chat_body(json extra) {
  json body = {{"messages", {json{{"role", "user"}, {"content", "A colour and a membership, as JSON."}}}},
               {"temperature", 1},
               {"n", 4},
               {"seed", 7},
               {"logit_bias", whitespace_bias()}};
  body.update(extra);
  return body;
}

// Each choice: finished by the constraint's end (stop), its text validating; one cut by the context
// (length) is counted but not taken as valid.
int check_stopped_choices(const json& r, const std::function<std::string(const std::string&)>& why,
                          bool chat) {
  int stopped = 0;
  for (const json& c : r["choices"]) {
    const std::string text = chat ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
    if (c["finish_reason"] != "stop") continue;
    ++stopped;
    EXPECT_EQ(why(text), "") << text;
  }
  return stopped;
}

TEST(ServerStructured, ResponseFormatJsonSchemaHoldsForEveryChoice) {
  ServerFixture f(chat_model().model, chat_model().tok, chat_options());
  const json rf = {{"type", "json_schema"},
                   {"json_schema", {{"name", "membership"}, {"schema", kMembership}, {"strict", true}}}};
  int stopped = 0;
  for (const int seed : {1, 2, 3}) {
    const json r =
        post_json(f, "/v1/chat/completions", structured_chat_body({{"response_format", rf}, {"seed", seed}}));
    ASSERT_EQ(r["choices"].size(), 4u) << r.dump();
    stopped += check_stopped_choices(r, membership_violations, true);
  }
  // Without the constraint the same requests give no JSON at all (so the checks above can fail).
  const json free = post_json(f, "/v1/chat/completions", structured_chat_body(json::object()));
  for (const json& c : free["choices"])
    EXPECT_NE(membership_violations(c["message"]["content"].get<std::string>()), "") << c.dump();
  EXPECT_GE(stopped, 9) << "of 12 choices, too few ended inside the context";
}

TEST(ServerStructured, JsonObjectAndLlamaServerFieldsOnBothEndpoints) {
  ServerFixture f(chat_model().model, chat_model().tok, chat_options());
  const auto object = [](const std::string& text) {
    const json j = json::parse(text, nullptr, false);
    return j.is_object() ? std::string() : "not a JSON object";
  };
  int stopped = 0;
  stopped +=
      check_stopped_choices(post_json(f, "/v1/chat/completions",
                                      structured_chat_body({{"response_format", {{"type", "json_object"}}}})),
                            object, true);
  const json completion = {{"prompt", "JSON: "}, {"temperature", 1},  {"n", 4},
                           {"seed", 5},          {"max_tokens", 100}, {"logit_bias", whitespace_bias()}};
  json c1 = completion;
  c1["response_format"] = {{"type", "json_object"}};
  stopped += check_stopped_choices(post_json(f, "/v1/completions", c1), object, false);
  // llama-server's json_schema, and response_format json_object with its "schema"
  json c2 = completion;
  c2["json_schema"] = kMembership;
  stopped += check_stopped_choices(post_json(f, "/v1/completions", c2), membership_violations, false);
  json c3 = completion;
  c3["response_format"] = {{"type", "json_object"}, {"schema", kMembership}};
  stopped += check_stopped_choices(post_json(f, "/v1/completions", c3), membership_violations, false);
  EXPECT_GE(stopped, 12) << "of 16 choices, too few ended inside the context";
  // llama-server's grammar (GBNF): only its strings.
  json c4 = completion;
  c4["grammar"] = R"(root ::= "yes" | "no" | "maybe not")";
  const json yes_no = post_json(f, "/v1/completions", c4);  // held: a range over a temporary's member dangles
  for (const json& c : yes_no["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop");
    EXPECT_TRUE(c["text"] == "yes" || c["text"] == "no" || c["text"] == "maybe not") << c.dump();
  }
  // An empty grammar is none, as llama-server reads it; "text" is the default format.
  json c5 = completion;
  c5["grammar"] = "";
  c5["n"] = 1;
  EXPECT_EQ(post_json(f, "/v1/completions", c5)["choices"].size(), 1u);
  c5.erase("grammar");
  c5["response_format"] = {{"type", "text"}};
  EXPECT_EQ(post_json(f, "/v1/completions", c5)["choices"].size(), 1u);
}

TEST(ServerStructured, AStreamedReplyFollowsTheSchema) {
  ServerFixture f(chat_model().model, chat_model().tok, chat_options());
  json body = structured_chat_body(
      {{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "m"}, {"schema", kMembership}}}}},
       {"stream", true},
       {"n", 1}});
  int stopped = 0;
  for (const int seed : {11, 12, 13}) {
    body["seed"] = seed;
    auto res = f.client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    std::string text, finish;
    for (const json& e : sse_events(res->body)) {
      for (const json& c : e["choices"]) {
        if (c["delta"].contains("content") && c["delta"]["content"].is_string())
          text += c["delta"]["content"].get<std::string>();
        if (c["finish_reason"].is_string()) finish = c["finish_reason"];
      }
    }
    if (finish != "stop") continue;
    ++stopped;
    EXPECT_EQ(membership_violations(text), "") << text;
  }
  EXPECT_GE(stopped, 2);
}

TEST(ServerStructured, SchemasAndGrammarsTheEngineRefusesAre400NamingTheField) {
  ServerFixture f(chat_model().model, chat_model().tok, chat_options());
  const json user = {{"role", "user"}, {"content", "hi"}};
  struct Case {
    json body;
    std::string param, says;
  };
  const json rf_schema = [](json schema) {
    return json{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", std::move(schema)}}}};
  }(json{{"type", "strnig"}});
  const std::vector<Case> cases = {
      {{{"messages", {user}}, {"response_format", rf_schema}},
       "response_format",
       "not one minigpt can follow"},
      {{{"messages", {user}}, {"response_format", {{"type", "xml"}}}}, "response_format.type", "must be"},
      {{{"messages", {user}}, {"response_format", "json"}}, "response_format", "expected an object"},
      {{{"messages", {user}}, {"response_format", {{"type", "json_schema"}}}},
       "response_format.json_schema",
       "required"},
      {{{"messages", {user}},
        {"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {}}}}}}},
       "response_format.json_schema.name",
       "required"},
      {{{"messages", {user}},
        {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", 3}}}}}},
       "response_format.json_schema.schema",
       "expected a JSON Schema"},
      {{{"messages", {user}}, {"grammar", "root ::= ("}}, "grammar", "not one minigpt can follow"},
      {{{"messages", {user}}, {"grammar", "start ::= \"a\""}}, "grammar", "root"},
      {{{"messages", {user}}, {"grammar", 5}}, "grammar", "expected a string"},
      {{{"messages", {user}}, {"json_schema", "{}"}}, "json_schema", "expected a JSON Schema"},
      {{{"messages", {user}}, {"json_schema", {{"type", "object"}}}, {"grammar", "root ::= \"a\""}},
       "grammar",
       "only one of"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body.dump());
    const json r = post_json(f, "/v1/chat/completions", c.body, 400);
    EXPECT_EQ(r["error"]["param"], c.param);
    const std::string m = r["error"]["message"].get<std::string>();
    EXPECT_NE(m.find(c.says), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // A recursive schema is a language like any other.
  const json tree = json::parse(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer", "minimum": 0, "maximum": 9}, "kids": {"type": "array", "maxItems": 2,
      "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})");
  const json r = post_json(f, "/v1/chat/completions",
                           {{"messages", {user}}, {"json_schema", tree}, {"temperature", 1}, {"seed", 3}});
  if (r["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(
        json::parse(r["choices"][0]["message"]["content"].get<std::string>(), nullptr, false).is_object());
  }
  // A body over the server's limit (1 MiB) is 413 before any parsing; the server goes on serving.
  json big = {{"messages", {user}},
              {"json_schema", {{"type", "string"}, {"description", std::string(1 << 20, 'a')}}}};
  auto res = f.client().Post("/v1/chat/completions", big.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(post_json(f, "/v1/chat/completions", {{"messages", {user}}, {"max_tokens", 2}})["choices"].size(),
            1u);
}

}  // namespace
}  // namespace minigpt
