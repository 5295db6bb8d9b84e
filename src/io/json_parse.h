// JSON from outside (request bodies, model and tokenizer files, safetensors headers) is parsed with a bound
// on its nesting. nlohmann parses iteratively, but copying, comparing and printing a value recurse once per
// level: a request body of 100,000 nested brackets (200 KB) overflowed a server thread's stack. Real files
// nest a few levels (tokenizer.json 5, config.json 3, a chat request 4).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace minigpt {

inline constexpr int kMaxJsonDepth = 256;

// Thrown when the bound is passed: a json::exception, so the callers' "not valid JSON" handlers report it.
class JsonTooDeep : public nlohmann::json::exception {
 public:
  JsonTooDeep()
      : exception(
            599, ("[json.exception.minigpt] nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels")
                     .c_str()) {}
};

// Json::parse (nlohmann::json or ordered_json) of `args` (a string, a pair of iterators, a stream), nested at
// most kMaxJsonDepth levels; allow_exceptions as Json::parse's (JsonTooDeep is thrown either way).
template <typename Json = nlohmann::json, typename... Input>
Json parse_json_bounded(bool allow_exceptions, Input&&... args) {
  return Json::parse(
      std::forward<Input>(args)...,
      [](int depth, typename Json::parse_event_t, Json&) {
        if (depth > kMaxJsonDepth) throw JsonTooDeep();
        return true;
      },
      allow_exceptions);
}

}  // namespace minigpt
