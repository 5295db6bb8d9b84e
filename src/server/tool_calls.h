// OpenAI tool calls (a chat request's `tools`, `tool_choice`, `parallel_tool_calls`) for a model's chat
// template: how the tools and a conversation's earlier calls and results reach the template, which constraint
// the reply is decoded under, and how the reply is read back into `message.tool_calls`.
//
// Two formats, chosen by the template:
// - Hermes (the template renders `tools` and writes an earlier call as `<tool_call>\n{"name": ...`: Qwen 2.5,
//   Qwen 3, QwQ, Hermes): the tools
//   go to the template as they are; a call is `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
//   and is constrained once the model opens it (xgrammar's triggered structural tags, llama.cpp's "lazy
//   grammar"); "required" or a named function makes at least one call the only way to end.
// - Generic (any other template, e.g. SmolLM2's, which knows no tools; Llama 3.x, Mistral and the others
//   whose own call formats minigpt does not read yet): llama.cpp's generic format. A system
//   message lists the tools and asks for JSON; the whole reply is JSON under a schema: {"tool_call": {...}}
//   (or {"tool_calls": [...]} with parallel calls) or {"response": "..."}; earlier calls and results are
//   rendered as JSON in the assistant's and user's turns.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace minigpt {
class ChatTemplate;
}

namespace minigpt::server {

struct ToolCalling {
  enum class Format { Hermes, Generic };
  enum class Choice { Auto, Required, Named };
  Format format = Format::Generic;
  Choice choice = Choice::Auto;
  std::string named;             // Choice::Named: the function
  bool parallel = true;          // parallel_tool_calls
  nlohmann::ordered_json tools;  // the request's, as sent
};

// Reads `tools`, `tool_choice` and `parallel_tool_calls` of a chat request (`j`, keys in their order):
// nullopt when no tool may be called (none given, an empty list, or tool_choice "none"); its format is the
// caller's to set (tool_format). Throws ApiError (400) naming the field: a tool that is not {"type":
// "function", "function": {"name", "description"?, "parameters"?}}, a name twice, a tool_choice naming no
// tool.
std::optional<ToolCalling> parse_tool_calling(const nlohmann::ordered_json& j);

// The format of a template: Hermes when it renders tools and writes an earlier call as `<tool_call>\n{"name":
// ...` (a probe conversation rendered), else Generic.
ToolCalling::Format tool_format(const ChatTemplate& tmpl);

// Whether a conversation has tool calls or results in it (which the template must be given in its format).
bool has_tool_turns(const nlohmann::ordered_json& messages);

// The conversation as `format` renders it: Hermes parses each earlier call's `arguments` (a JSON string in
// the OpenAI API) into the object the templates print, and puts `tc`'s tools in `extra` (the template's
// variables); Generic turns calls and results into JSON turns and, with `tc`, puts the tools and the reply's
// format in a system message. `tc` null: no tool may be called now (the earlier turns are still rendered).
nlohmann::ordered_json tool_messages(const ToolCalling* tc, ToolCalling::Format format,
                                     const nlohmann::ordered_json& messages, nlohmann::ordered_json& extra);

// The constraint of `tc`'s replies: (true, a structural tag's JSON) for Hermes, (false, a JSON Schema) for
// Generic.
std::pair<bool, std::string> tool_constraint(const ToolCalling& tc);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as the OpenAI API sends it
};
struct ToolReply {
  std::optional<std::string> content;  // none: the reply is calls only
  std::vector<ToolCall> calls;
};
// The reply's text read in `tc`'s format. Text that is not a call (the model wrote prose, or a reply cut
// by max_tokens) is content.
ToolReply parse_tool_reply(const ToolCalling& tc, const std::string& text);

}  // namespace minigpt::server
