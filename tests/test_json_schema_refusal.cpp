// A JSON Schema keyword the engine (xgrammar) would not enforce is refused, naming it, never silently ignored
// (src/run/json_schema_check.cpp, src/run/xgrammar_log.cpp; docs/structured-output.md lists them). Each
// schema refused here, xgrammar alone compiles, and a model constrained by it can write JSON that does not
// validate (tests/schema_validity/check.py samples and validates with the `jsonschema` package). Every schema
// of the JSON-Schema-Test-Suite fixture and the random fixture compiles or is refused in one line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "minigpt/constraint.h"
#include "minigpt/error.h"
#include "minigpt/model.h"
#include "minigpt/tokenizer.h"
#include "test_util.h"

namespace minigpt {
namespace {

using nlohmann::json;

struct Compiler {
  Tokenizer tok = Tokenizer::load(test::fixture_dir("chatml-tiny"));
  GrammarCompiler compiler{tok, tok.n_vocab()};
};

const Compiler& compiler() {
  static const Compiler c;
  return c;
}

TEST(JsonSchemaRefusal, NamesTheKeywordTheEngineWouldIgnore) {
  // {schema, the keyword the refusal names, where}
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      // never read
      {R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})", "\"uniqueItems\"", " at /"},
      {R"({"type": "array", "contains": {"const": 1}})", "\"contains\"", " at /"},
      {R"({"type": "object", "properties": {"a": {"not": {"type": "null"}}}})", "\"not\"",
       " at /properties/a"},
      {R"({"if": {"type": "string"}, "then": {"minLength": 2}})", "\"if\"", " at /"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "\"dependentRequired\"", " at /"},
      {R"({"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}})", "\"dependentSchemas\"",
       " at /"},
      {R"({"$dynamicRef": "#meta"})", "\"$dynamicRef\"", " at /"},
      {R"({"$ref": "https://example.com/s.json"})", "\"$ref\"", " at /"},
      {R"({"$defs": {"a": {"$anchor": "x", "type": "integer"}}, "$ref": "#x"})", "\"$ref\"", " at /"},
      {R"({"type": "object", "properties": {"a": {"$id": "http://x/y", "type": "integer"}}})", "\"$id\"",
       " at /properties/a"},
      // beside the one keyword xgrammar reads in place of the others
      {R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 3})",
       "\"maxLength\" beside \"$ref\"", " at /"},
      {R"({"anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 3})",
       "\"minimum\" beside \"anyOf\"", " at /"},
      {R"({"type": "object", "properties": {"a": {}}, "allOf": [{"required": ["a"]}]})", "beside \"allOf\"",
       " at /"},
      {R"({"enum": [1, "a"], "type": "integer"})", "\"type\" beside \"enum\"", " at /"},
      {R"({"const": "abc", "maxLength": 2})", "\"maxLength\" beside \"const\"", " at /"},
      // a required name `properties` does not define (xgrammar requires only those it defines)
      {R"({"type": "object", "required": ["foo"]})", "\"required\"", "\"foo\""},
      {R"({"properties": {"a": {}}, "required": ["a", "b"], "additionalProperties": true})", "\"required\"",
       "\"b\""},
      // a keyword of one type, on a schema that allows every type
      {R"({"minLength": 2})", "\"minLength\"", "without \"type\": \"string\""},
      {R"({"properties": {"a": {"maximum": 3}}})", "\"maximum\"", "at /properties/a"},
      {R"({"required": ["a"]})", "\"required\"", "without \"type\": \"object\""},
      {R"({"type": "array", "items": {"maxItems": 1}})", "\"maxItems\"", "at /items"},
      // what xgrammar's converter drops with a warning
      {R"({"type": "number", "multipleOf": 0.5})", "\"multipleOf\"", "number"},
      {R"({"type": "string", "pattern": "^a+$", "maxLength": 3})", "\"maxLength\" beside \"pattern\"",
       " at /"},
      {R"({"type": "string", "format": "email", "maxLength": 8})", "minLength/maxLength", "format"},
      {R"({"type": "integer", "minimum": 0, "multipleOf": 3})", "multipleOf", "range"},
      {R"({"oneOf": [{"type": "integer"}, {"minimum": 2}]})", "\"minimum\"", "without \"type\""},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "oneOf", "anyOf"},
      {R"({"allOf": [{"type": "integer"}, {"type": "integer", "minimum": 2}]})", "allOf", "allOf"},
  };
  for (const auto& [schema, keyword, where] : cases) {
    SCOPED_TRACE(schema);
    test::expect_error([&] { compiler().compiler.json_schema(schema); }, ErrorKind::Argument,
                       {"json_schema: ", keyword, where});
  }
}

// What the engine enforces, and what asserts nothing, is not refused.
TEST(JsonSchemaRefusal, AcceptsWhatTheEngineEnforces) {
  for (
      const char* schema : {
          // pydantic's Literal and Optional, with their annotations
          R"({"enum": ["a", "b"], "title": "Kind", "type": "string"})",
          R"({"const": 3, "type": ["integer", "null"]})",
          R"({"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Name"})",
          R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
               "type": "object", "properties": {"p": {"$ref": "#/$defs/p"}, "q": {"$ref": "#"}}})",
          R"({"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3, "uniqueItems": false})",
          R"({"type": "integer", "minimum": 0, "maximum": 30, "multipleOf": 3})",
          R"({"type": ["string", "integer"], "minLength": 1, "maxLength": 4, "minimum": 2})",
          R"({"type": "string", "minimum": 3, "required": ["x"]})",  // keywords of other types: vacuous
          R"({"properties": {"a": {"type": "boolean"}}, "required": ["a"], "minLength": 3})",
          R"({"oneOf": [{"type": "integer"}, {"type": "string"}]})",
          R"({"type": "object", "propertyNames": {"maxLength": 3}, "maxProperties": 2})",
          R"({"title": "anything", "x-extension": {"not": 1}})",
      }) {
    SCOPED_TRACE(schema);
    EXPECT_NO_THROW(compiler().compiler.json_schema(schema));
  }
}

// Twice the same schema that only the engine's warning refuses (a one-sided range with multipleOf): refused
// twice, since xgrammar's compile cache would answer the second request without converting it again.
TEST(JsonSchemaRefusal, RefusedEveryTime) {
  const char* schema = R"({"type": "integer", "minimum": 1, "multipleOf": 7})";
  for (int i = 0; i < 2; ++i)
    test::expect_error([&] { compiler().compiler.json_schema(schema); }, ErrorKind::Argument,
                       {"json_schema: not supported: ", "multipleOf"});
}

TEST(JsonSchemaRefusal, EveryFixtureSchemaCompilesOrIsRefusedInOneLine) {
  for (const char* name : {"suite-draft2020-12.json", "random-schemas.json"}) {
    const json fixture =
        json::parse(test::read_file(test::source_dir() / "tests" / "fixtures" / "json-schema" / name));
    size_t compiled = 0, refused = 0;
    for (const json& entry : fixture.at("schemas")) {
      SCOPED_TRACE(entry.dump());
      try {
        compiler().compiler.json_schema(entry.at("schema").dump());
        ++compiled;
      } catch (const Error& e) {
        ++refused;
        EXPECT_EQ(e.kind(), ErrorKind::Argument);
        EXPECT_EQ(std::string(e.what()).rfind("json_schema: ", 0), 0u) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      }
    }
    EXPECT_GT(compiled, 0u) << name;
    // The random schemas use only keywords the engine enforces.
    if (std::string(name) == "random-schemas.json") {
      EXPECT_EQ(refused, 0u);
    }
  }
}

}  // namespace
}  // namespace minigpt
