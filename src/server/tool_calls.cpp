// OpenAI tool calls for a model's chat template (tool_calls.h): the request's tools checked, the conversation
// prepared for the template, the reply's constraint, and the reply read back.
#include "server/tool_calls.h"

#include <cctype>
#include <set>
#include <string>
#include <utility>

#include "chat/chat_template.h"
#include "minigpt/error.h"
#include "server/server.h"

namespace minigpt::server {

namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw ApiError(400, param + ": " + message, param);
}

std::string short_text(const ojson& v) {
  std::string s = v.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// OpenAI's rule for a function's name: a-z, A-Z, 0-9, underscores and dashes, at most 64.
bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (const char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

// Whether the template renders tools and writes a call in the Hermes format: a probe tool and a call of it
// in an earlier turn must come out as `<tool_call>\n{"name": "<probe>"`.
bool template_writes_hermes_calls(const ChatTemplate& t) {
  static const char kProbe[] = "minigpt_probe_function";
  const ojson tools =
      ojson::array({{{"type", "function"},
                     {"function",
                      {{"name", kProbe},
                       {"description", "probe"},
                       {"parameters", {{"type", "object"}, {"properties", ojson::object()}}}}}}});
  const ojson call = {{"id", "call_0"},
                      {"type", "function"},
                      {"function", {{"name", kProbe}, {"arguments", ojson::object()}}}};
  const ojson messages = ojson::array({{{"role", "user"}, {"content", "hi"}},
                                       {{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}},
                                       {{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "ok"}}});
  try {
    const std::string out = t.render(messages, true, {{"tools", tools}});
    return out.find(std::string("<tool_call>\n{\"name\": \"") + kProbe + "\"") != std::string::npos;
  } catch (const Error&) {
    return false;
  }
}

const ojson& function_of(const ojson& tool) { return tool["function"]; }

ojson parameters_of(const ojson& tool) {
  const ojson& f = function_of(tool);
  if (f.contains("parameters") && !f["parameters"].is_null()) return f["parameters"];
  return {{"type", "object"}, {"properties", ojson::object()}};
}

// The tools a reply may call: all, or the named one.
std::vector<const ojson*> callable(const ToolCalling& tc) {
  std::vector<const ojson*> out;
  for (const ojson& t : tc.tools) {
    if (tc.choice != ToolCalling::Choice::Named || function_of(t)["name"] == tc.named) out.push_back(&t);
  }
  return out;
}

// An earlier call's arguments as the OpenAI API sends them (a JSON string), as an object where it is one.
ojson arguments_object(const ojson& arguments) {
  if (!arguments.is_string()) return arguments;
  ojson parsed = ojson::parse(arguments.get<std::string>(), nullptr, false);
  return parsed.is_discarded() ? arguments : parsed;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// One call read from a parsed {"name", "arguments"} object; false if it is not one.
bool read_call(const ojson& j, std::vector<ToolCall>& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  ToolCall c;
  c.name = j["name"].get<std::string>();
  const ojson args = j.contains("arguments") ? j["arguments"] : ojson::object();
  c.arguments = args.is_string() ? args.get<std::string>() : args.dump();
  out.push_back(std::move(c));
  return true;
}

}  // namespace

std::optional<ToolCalling> parse_tool_calling(const ojson& j) {
  const auto given = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  ToolCalling tc;
  if (given("parallel_tool_calls")) {
    if (!j["parallel_tool_calls"].is_boolean()) refuse("parallel_tool_calls", "expected a boolean");
    tc.parallel = j["parallel_tool_calls"].get<bool>();
  }
  tc.tools = ojson::array();
  std::set<std::string> names;
  if (given("tools")) {
    const ojson& tools = j["tools"];
    if (!tools.is_array()) refuse("tools", "expected an array of tools");
    if (tools.size() > 128) refuse("tools", "at most 128 tools, got " + std::to_string(tools.size()));
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string where = "tools[" + std::to_string(i) + "]";
      const ojson& t = tools[i];
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        refuse(where, "expected {\"type\": \"function\", \"function\": {...}}, got " + short_text(t));
      if (!t.contains("function") || !t["function"].is_object())
        refuse(where + ".function", "required, an object");
      const ojson& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string())
        refuse(where + ".function.name", "required, a string");
      const std::string name = f["name"].get<std::string>();
      if (!valid_name(name)) {
        refuse(where + ".function.name",
               "must be 1 to 64 of a-z, A-Z, 0-9, _ and -, got " + short_text(f["name"]));
      }
      if (!names.insert(name).second) refuse(where + ".function.name", "\"" + name + "\" is given twice");
      if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
        refuse(where + ".function.description", "expected a string");
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        refuse(where + ".function.parameters", "expected a JSON Schema (an object)");
      if (f.contains("strict") && !f["strict"].is_null() && !f["strict"].is_boolean())
        refuse(where + ".function.strict", "expected a boolean");
      tc.tools.push_back(t);
    }
  }
  bool none = false;
  if (given("tool_choice")) {
    const ojson& c = j["tool_choice"];
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "none") {
        none = true;
      } else if (s == "required") {
        tc.choice = ToolCalling::Choice::Required;
      } else if (s != "auto") {
        refuse("tool_choice", "must be \"none\", \"auto\", \"required\" or a function, got " + short_text(c));
      }
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      tc.choice = ToolCalling::Choice::Named;
      tc.named = c["function"]["name"].get<std::string>();
      if (!names.count(tc.named))
        refuse("tool_choice", "names the function \"" + tc.named + "\", which is not in tools");
    } else {
      refuse("tool_choice",
             "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": "
             "...}}, "
             "got " +
                 short_text(c));
    }
  }
  if (tc.tools.empty()) {
    if (tc.choice != ToolCalling::Choice::Auto)
      refuse("tool_choice", "asks for a tool call, but tools is empty");
    return std::nullopt;
  }
  if (none) return std::nullopt;
  return tc;
}

ToolCalling::Format tool_format(const ChatTemplate& tmpl) {
  return template_writes_hermes_calls(tmpl) ? ToolCalling::Format::Hermes : ToolCalling::Format::Generic;
}

bool has_tool_turns(const ojson& messages) {
  for (const ojson& m : messages) {
    if (m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()) return true;
    if (m.contains("role") && m["role"] == "tool") return true;
  }
  return false;
}

ojson tool_messages(const ToolCalling* tc, ToolCalling::Format format, const ojson& messages, ojson& extra) {
  ojson out = ojson::array();
  if (format == ToolCalling::Format::Hermes) {
    if (tc) extra["tools"] = tc->tools;
    for (ojson m : messages) {
      if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
        for (ojson& call : m["tool_calls"]) {
          if (call.is_object() && call.contains("function") && call["function"].is_object() &&
              call["function"].contains("arguments"))
            call["function"]["arguments"] = arguments_object(call["function"]["arguments"]);
        }
      }
      out.push_back(std::move(m));
    }
    return out;
  }
  // Generic: llama.cpp's words for the tools and the format.
  const bool parallel = !tc || tc->parallel;
  std::string system;
  if (tc) {
    ojson listed = ojson::array();
    for (const ojson* t : callable(*tc)) listed.push_back((*t)["function"]);
    const char* key = parallel ? "tool_calls" : "tool_call";
    system = "You can call any of the following tools to satisfy the user's requests: " + listed.dump(2) +
             "\n\nRespond in JSON format, ";
    system += tc->choice == ToolCalling::Choice::Auto
                  ? std::string("either with `") + key +
                        "` (a request to call tools) or with `response` reply to the user's request"
                  : std::string("with `") + key + "` (a request to call tools)";
  }
  bool placed = system.empty();
  for (const ojson& m : messages) {
    const std::string role = m["role"].get<std::string>();
    if (!placed && (role == "system" || role == "developer")) {
      ojson s = m;
      s["content"] = (m["content"].is_string() ? m["content"].get<std::string>() + "\n\n" : "") + system;
      out.push_back(std::move(s));
      placed = true;
      continue;
    }
    if (!placed) {
      out.push_back({{"role", "system"}, {"content", system}});
      placed = true;
    }
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array() &&
        !m["tool_calls"].empty()) {
      ojson calls = ojson::array();
      for (const ojson& call : m["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        const ojson& f = call["function"];
        ojson c = {
            {"name", f.value("name", "")},
            {"arguments", f.contains("arguments") ? arguments_object(f["arguments"]) : ojson::object()}};
        if (call.contains("id") && call["id"].is_string()) c["id"] = call["id"];
        calls.push_back(std::move(c));
      }
      const ojson said =
          parallel || calls.size() != 1 ? ojson{{"tool_calls", calls}} : ojson{{"tool_call", calls[0]}};
      out.push_back({{"role", "assistant"}, {"content", said.dump(2)}});
      continue;
    }
    if (role == "tool") {
      ojson r = {{"content", m.contains("content") ? m["content"] : ojson(nullptr)}};
      if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) r["tool_call_id"] = m["tool_call_id"];
      if (m.contains("name") && m["name"].is_string()) r["tool"] = m["name"];
      out.push_back({{"role", "user"}, {"content", ojson{{"tool_response", r}}.dump(2)}});
      continue;
    }
    out.push_back(m);
  }
  return out;
}

std::pair<bool, std::string> tool_constraint(const ToolCalling& tc) {
  const std::vector<const ojson*> tools = callable(tc);
  if (tc.format == ToolCalling::Format::Hermes) {
    ojson tags = ojson::array();
    for (const ojson* t : tools) {
      const std::string name = (*t)["function"]["name"].get<std::string>();
      tags.push_back({{"type", "tag"},
                      {"begin", "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": "},
                      {"content", {{"type", "json_schema"}, {"json_schema", parameters_of(*t)}}},
                      {"end", "}\n</tool_call>"}});
    }
    // "auto": free text, a call constrained once the model opens it; "required" or a named function: calls
    // from the first token, one per line, nothing else (as llama.cpp's grammar for a forced call).
    const ojson format = tc.choice == ToolCalling::Choice::Auto ? ojson{{"type", "triggered_tags"},
                                                                        {"triggers", {"<tool_call>"}},
                                                                        {"tags", tags},
                                                                        {"at_least_one", false},
                                                                        {"stop_after_first", !tc.parallel}}
                                                                : ojson{{"type", "tags_with_separator"},
                                                                        {"tags", tags},
                                                                        {"separator", "\n"},
                                                                        {"at_least_one", true},
                                                                        {"stop_after_first", !tc.parallel}};
    return {true, ojson{{"type", "structural_tag"}, {"format", format}}.dump()};
  }
  ojson calls = ojson::array();
  for (const ojson* t : tools) {
    const std::string name = (*t)["function"]["name"].get<std::string>();
    calls.push_back(
        {{"type", "object"},
         {"properties", {{"name", {{"type", "string"}, {"const", name}}}, {"arguments", parameters_of(*t)}}},
         {"required", {"name", "arguments"}}});
  }
  const ojson call = calls.size() == 1 ? calls[0] : ojson{{"anyOf", calls}};
  const ojson asked =
      tc.parallel
          ? ojson{{"type", "object"},
                  {"properties", {{"tool_calls", {{"type", "array"}, {"items", call}, {"minItems", 1}}}}},
                  {"required", {"tool_calls"}}}
          : ojson{{"type", "object"}, {"properties", {{"tool_call", call}}}, {"required", {"tool_call"}}};
  if (tc.choice != ToolCalling::Choice::Auto) return {false, asked.dump()};
  const ojson response = {
      {"type", "object"}, {"properties", {{"response", {{"type", "string"}}}}}, {"required", {"response"}}};
  return {false, ojson{{"anyOf", {asked, response}}}.dump()};
}

ToolReply parse_tool_reply(const ToolCalling& tc, const std::string& text) {
  ToolReply r;
  if (tc.format == ToolCalling::Format::Hermes) {
    static const std::string kOpen = "<tool_call>", kClose = "</tool_call>";
    std::string content;
    size_t pos = 0;
    while (true) {
      const size_t open = text.find(kOpen, pos);
      if (open == std::string::npos) break;
      const size_t close = text.find(kClose, open + kOpen.size());
      if (close == std::string::npos) break;  // cut by max_tokens: it stays text
      const ojson j =
          ojson::parse(text.substr(open + kOpen.size(), close - open - kOpen.size()), nullptr, false);
      if (j.is_discarded() || !read_call(j, r.calls)) break;
      content += text.substr(pos, open - pos);
      pos = close + kClose.size();
    }
    content += text.substr(pos);
    content = trim(content);
    if (!content.empty() || r.calls.empty()) r.content = r.calls.empty() ? text : content;
    return r;
  }
  const ojson j = ojson::parse(text, nullptr, false);
  bool read = false;
  if (j.is_object() && j.contains("tool_calls") && j["tool_calls"].is_array()) {
    read = true;
    for (const ojson& c : j["tool_calls"]) read = read_call(c, r.calls) && read;
  } else if (j.is_object() && j.contains("tool_call")) {
    read = read_call(j["tool_call"], r.calls);
  } else if (j.is_object() && j.contains("response")) {
    r.content = j["response"].is_string() ? j["response"].get<std::string>() : j["response"].dump();
    return r;
  }
  if (!read) {  // not the format (a reply cut by max_tokens): the text as it is
    r.calls.clear();
    r.content = text;
  }
  return r;
}

}  // namespace minigpt::server
