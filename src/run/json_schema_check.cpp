// json_schema_check.h: a walk over the schema that mirrors xgrammar 0.2.9's SchemaParser::Parse
// (cpp/json_schema_converter.cc) in which keywords each subschema's reading uses.
#include "json_schema_check.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace minigpt {
namespace {

using nlohmann::json;

// Keywords no validator reads (JSON Schema's annotations and identifiers), or that hold only subschemas the
// walk visits on its own ($defs): never a reason to refuse.
const std::set<std::string>& neutral_keywords() {
  static const std::set<std::string> k = {
      "title",       "description", "default",         "examples",         "deprecated",    "readOnly",
      "writeOnly",   "$comment",    "$schema",         "$anchor",          "$defs",         "definitions",
      "$vocabulary", "format",      "contentEncoding", "contentMediaType", "contentSchema", "$dynamicAnchor",
  };
  return k;
}

// The validation keywords of each type that xgrammar's reading of that type enforces.
const std::set<std::string>& type_keywords(const std::string& type) {
  static const std::set<std::string> none;
  static const std::set<std::string> integer = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                                "multipleOf"};
  static const std::set<std::string> number = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  static const std::set<std::string> string = {"minLength", "maxLength", "pattern"};
  // minContains and maxContains without contains (which is refused) assert nothing.
  static const std::set<std::string> array = {"items",    "prefixItems", "unevaluatedItems", "minItems",
                                              "maxItems", "minContains", "maxContains"};
  static const std::set<std::string> object = {"properties",        "required",      "additionalProperties",
                                               "patternProperties", "propertyNames", "unevaluatedProperties",
                                               "minProperties",     "maxProperties"};
  if (type == "integer") return integer;
  if (type == "number") return number;
  if (type == "string") return string;
  if (type == "array") return array;
  if (type == "object") return object;
  return none;
}

// The validation keywords that apply to one type of value only: where xgrammar allows any value (no type,
// no composition), each would go unenforced.
std::optional<std::string> type_of_keyword(const std::string& key) {
  for (const char* type : {"integer", "number", "string", "array", "object"})
    if (type_keywords(type).count(key)) return std::string(type);
  if (key == "uniqueItems" || key == "contains") return "array";
  if (key == "dependentRequired" || key == "dependentSchemas" || key == "dependencies") return "object";
  return std::nullopt;
}

// Keywords xgrammar never reads, wherever they are.
const std::set<std::string>& never_read() {
  static const std::set<std::string> k = {
      "not",          "if",       "then",        "else",         "dependentRequired", "dependentSchemas",
      "dependencies", "contains", "$dynamicRef", "$recursiveRef"};
  return k;
}

bool has_type(const json& value, const std::string& type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "string") return value.is_string();
  if (type == "array") return value.is_array();
  if (type == "object") return value.is_object();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double d = value.get<double>();
    return d == static_cast<double>(static_cast<long long>(d));
  }
  return false;
}

std::vector<std::string> types_of(const json& type) {
  std::vector<std::string> out;
  if (type.is_string()) out.push_back(type.get<std::string>());
  if (type.is_array())
    for (const json& t : type)
      if (t.is_string()) out.push_back(t.get<std::string>());
  return out;
}

std::string quoted(const std::string& key) { return json(key).dump(); }

class Walk {
 public:
  // The first keyword found unenforced, as a message; "" when none.
  std::string visit(const json& s, const std::string& at, bool root, const char* default_type = nullptr) {
    if (!s.is_object()) return "";  // true, false (xgrammar refuses it), or what xgrammar calls invalid
    const std::string where = at.empty() ? "/" : at;
    for (const auto& [key, value] : s.items()) {
      if (never_read().count(key)) return quoted(key) + " at " + where + " is not supported";
      if (key == "uniqueItems" && value != json(false))
        return "\"uniqueItems\" at " + where + " is not supported";
      // A nested $id changes the base of the $refs beneath it, which xgrammar resolves against the root.
      if (key == "$id" && !root) return "\"$id\" at " + where + " is not supported (only at the root)";
      if (key == "$ref" &&
          (!value.is_string() || value.get<std::string>().rfind('#', 0) != 0 ||
           (value.get<std::string>() != "#" && value.get<std::string>().rfind("#/", 0) != 0)))
        return "\"$ref\" at " + where + " is not supported (only \"#\" and \"#/...\" within the schema)";
    }
    // The one keyword xgrammar reads in place of all the others, as its Parse() chooses it.
    for (const char* only : {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"}) {
      if (!s.contains(only)) continue;
      for (const auto& [key, value] : s.items()) {
        if (key == only || key == "$id" || neutral_keywords().count(key)) continue;
        // `type` beside const or enum says what the values already are (pydantic writes it so).
        if (key == "type" && (std::string(only) == "const" || std::string(only) == "enum") &&
            values_have_type(s[only], only, value))
          continue;
        if (key == "uniqueItems" || key == "minContains" || key == "maxContains") continue;  // assert nothing
        return quoted(key) + " beside " + quoted(only) + " at " + where + " is not supported (only " +
               quoted(only) + " is read there)";
      }
      return children(s, at);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      types = types_of(s["type"]);
    } else if (default_type != nullptr) {
      types = {default_type};
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("unevaluatedProperties")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("unevaluatedItems")) {
      types = {"array"};
    }
    if (types.empty()) {
      // Any value: a keyword of one type would go unenforced on the values of that type.
      for (const auto& [key, value] : s.items()) {
        if (const auto type = type_of_keyword(key)) {
          if (key == "minContains" || key == "maxContains" || key == "uniqueItems")
            continue;  // nothing asserted
          return quoted(key) + " at " + where + " is not supported without \"type\": \"" + *type + "\"";
        }
      }
    }
    for (const std::string& type : types) {
      // xgrammar requires only the names `properties` defines: any other would be left out.
      if (type == "object" && s.contains("required") && s["required"].is_array()) {
        for (const json& name : s["required"]) {
          if (!name.is_string()) continue;
          if (!s.contains("properties") || !s["properties"].is_object() ||
              !s["properties"].contains(name.get<std::string>()))
            return "\"required\" at " + where + " names " + name.dump() +
                   ", which \"properties\" does not define: not supported";
        }
      }
      if (type == "number" && s.contains("multipleOf"))
        return "\"multipleOf\" at " + where +
               " is not supported for \"type\": \"number\" (only for integers)";
      if (type == "string" && s.contains("pattern") && (s.contains("minLength") || s.contains("maxLength")))
        return quoted(s.contains("minLength") ? "minLength" : "maxLength") + " beside \"pattern\" at " +
               where + " is not supported";
    }
    return children(s, at);
  }

 private:
  static bool values_have_type(const json& values, const std::string& only, const json& type) {
    const std::vector<std::string> types = types_of(type);
    const auto ok = [&](const json& v) {
      for (const std::string& t : types)
        if (has_type(v, t)) return true;
      return false;
    };
    if (only == "const") return ok(values);
    if (!values.is_array()) return false;
    for (const json& v : values)
      if (!ok(v)) return false;
    return true;
  }

  static std::string escape(const std::string& key) {
    std::string out;
    for (const char c : key) {
      if (c == '~') {
        out += "~0";
      } else if (c == '/') {
        out += "~1";
      } else {
        out += c;
      }
    }
    return out;
  }

  // Every subschema: those xgrammar reads and the others alike (a keyword in a subschema it never reaches
  // is refused too: simpler to state, and such a schema is rare).
  std::string children(const json& s, const std::string& at) {
    for (const auto& [key, value] : s.items()) {
      const std::string here = at + "/" + escape(key);
      std::string why;
      if (key == "properties" || key == "patternProperties" || key == "$defs" || key == "definitions") {
        if (!value.is_object()) continue;
        for (const auto& [name, sub] : value.items())
          if (!(why = visit(sub, here + "/" + escape(name), false)).empty()) return why;
      } else if (key == "anyOf" || key == "oneOf" || key == "allOf" || key == "prefixItems") {
        if (!value.is_array()) continue;
        for (size_t i = 0; i < value.size(); ++i)
          if (!(why = visit(value[i], here + "/" + std::to_string(i), false)).empty()) return why;
      } else if (key == "additionalProperties" || key == "unevaluatedProperties" || key == "items" ||
                 key == "unevaluatedItems") {
        if (!(why = visit(value, here, false)).empty()) return why;
      } else if (key == "propertyNames") {
        if (!(why = visit(value, here, false, "string")).empty()) return why;
      }
    }
    return "";
  }
};

}  // namespace

std::string unenforced_keyword(std::string_view schema) {
  json s;
  try {
    s = json::parse(schema);
  } catch (const json::exception&) {
    return "";
  }
  return Walk().visit(s, "", true);
}

}  // namespace minigpt
