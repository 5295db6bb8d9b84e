// /v1/completions request bodies: parsed with nlohmann::json, every field checked for its type and range
// before use, in the OpenAI API's terms (the field's name, the value's type), never a crash.
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "chat/chat_template.h"
#include "io/json_parse.h"
#include "minigpt/error.h"
#include "server/server.h"

namespace minigpt::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ApiError::ApiError(int status, const std::string& message, std::string param, std::string type,
                   std::string code)
    : std::runtime_error(message),
      status_(status),
      param_(std::move(param)),
      type_(std::move(type)),
      code_(std::move(code)) {
  if (type_.empty()) {
    type_ = status == 401   ? "authentication_error"
            : status == 404 ? "not_found_error"
            : status == 503 ? "server_overloaded"
            : status >= 500 ? "server_error"
                            : "invalid_request_error";
  }
}

std::string ApiError::body() const {
  json e = {{"message", what()},
            {"type", type_},
            {"param", param_.empty() ? json(nullptr) : json(param_)},
            {"code", code_.empty() ? json(nullptr) : json(code_)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, param + ": " + message, param);
}

[[noreturn]] void bad_type(const std::string& param, const json& v, const char* want) {
  bad(param, std::string("expected ") + want + ", got " + type_name(v));
}

bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

int64_t get_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!is_int(v)) bad_type(param, v, "an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
    bad(param, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    bad(param,
        "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(x));
  }
  return x;
}

double get_number(const json& v, const std::string& param) {
  if (!v.is_number()) bad_type(param, v, "a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) bad(param, "must be finite");
  return x;
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) bad_type(param, v, "a boolean");
  return v.get<bool>();
}

std::string short_dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::vector<int32_t> id_prompt(const json& a, const std::string& param, int64_t n_vocab) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const json& v = a[i];
    if (!is_int(v)) bad_type(param + "[" + std::to_string(i) + "]", v, "a token id (integer)");
    if (v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(n_vocab)
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() >= n_vocab)) {
      bad(param + "[" + std::to_string(i) + "]",
          "token id " + v.dump() + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return ids;
}

std::vector<int32_t> text_prompt(const std::string& text, const std::string& param, const Tokenizer& tok) {
  try {
    // As `minigpt generate`: the tokenizer's template specials (a BOS) for a non-empty prompt; an empty one
    // stays empty and starts from the model's BOS.
    return text.empty() ? std::vector<int32_t>{} : tok.encode_with_specials(text, true);
  } catch (const Error& e) {
    bad(param, e.what());  // invalid UTF-8
  }
}

}  // namespace

namespace {

json parse_body(std::string_view body) {
  json j;
  try {
    j = parse_json_bounded(true, body.begin(), body.end());
  } catch (const json::exception& e) {  // a syntax error, invalid UTF-8, or a number out of range
    // nlohmann's message names the byte where parsing stopped.
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, std::string("the body must be a JSON object, got ") + type_name(j));
  return j;
}

// The fields both endpoints take (parse_common reads them, logprobs aside), and `own` ones.
const std::set<std::string> kCommonFields = {"model", "max_tokens", "temperature", "top_p", "n", "stream",
                                             "stream_options", "logprobs", "stop", "seed", "presence_penalty",
                                             "frequency_penalty", "logit_bias", "user", "top_k", "min_p",
                                             "repetition_penalty", "ignore_eos", "cache_prompt",
                                             // llama-server's names: n_predict (-1: until the context is
                                             // full), repeat_penalty (= repetition_penalty)
                                             "n_predict", "repeat_penalty", "repeat_last_n",
                                             // structured output: OpenAI's response_format, llama-server's
                                             // json_schema and grammar (parse_constraint)
                                             "response_format", "json_schema", "grammar",
                                             // speculative decoding: minigpt's prompt_lookup, llama-server's
                                             // speculative.n_max / n_min (0: off)
                                             "prompt_lookup", "speculative.n_max", "speculative.n_min"};

void check_known(const json& j, const std::set<std::string>& own) {
  for (const auto& [key, value] : j.items()) {
    // null is "not given" for every field, as for the OpenAI API's optional parameters (typed clients send
    // each one, null when unset)
    if (!value.is_null() && !kCommonFields.count(key) && !own.count(key)) {
      // The OpenAI API's own wording.
      throw ApiError(400, "Unrecognized request argument supplied: " + key, key);
    }
  }
}

bool has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

// Whose limit a context of n_ctx is: the server's (-c) may be less than what the model was trained for,
// and then the message says how to raise it.
std::string whose_context(int64_t n_ctx, const Config& c) {
  return n_ctx < c.n_ctx ? " (the model's is " + std::to_string(c.n_ctx) + "; start the server with -c " +
                               std::to_string(c.n_ctx) + " (--ctx-size) to raise it)"
                         : " (the model's whole context)";
}

// A length field (max_tokens, n_predict) within [lo, n_ctx], refused naming whose context bounds it.
int64_t get_length(const json& v, const std::string& param, int64_t lo, int64_t n_ctx, const Config& c) {
  const bool over =
      is_int(v) && (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(n_ctx) : v.get<int64_t>() > n_ctx);
  if (over && n_ctx < c.n_ctx) {
    bad(param, "must be in [" + std::to_string(lo) + ", " + std::to_string(n_ctx) +
                   "], the server's context" + whose_context(n_ctx, c) + ", got " + v.dump());
  }
  return get_int(v, param, lo, n_ctx);
}

// The request's "model", checked by check_model_name(), or "" when it gives none.
std::string check_model(const json& j, const RequestLimits& limits) {
  if (!has(j, "model")) return "";
  if (!j["model"].is_string()) bad_type("model", j["model"], "a string");
  std::string name = j["model"].get<std::string>();
  check_model_name(name, limits);
  return name;
}

// logit_bias: the OpenAI API's object of token ids (as strings) to a bias in [-100, 100]; also llama-server's
// array of [id, bias] pairs, and its `false` for "never" (-inf).
std::vector<std::pair<int32_t, float>> parse_logit_bias(const json& b, int64_t n_vocab) {
  std::vector<std::pair<int32_t, float>> out;
  const auto entry = [&](const std::string& where, int64_t id, const json& v) {
    if (id < 0 || id >= n_vocab) {
      bad(where, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(n_vocab) + ")");
    }
    if (v.is_boolean() && !v.get<bool>()) {
      out.emplace_back(int32_t(id), -std::numeric_limits<float>::infinity());
      return;
    }
    if (!v.is_number()) bad_type(where, v, "a number in [-100, 100] (or false: never)");
    const double x = v.get<double>();
    if (!(x >= -100 && x <= 100)) bad(where, "the bias must be in [-100, 100], got " + short_dump(v));
    out.emplace_back(int32_t(id), float(x));
  };
  if (b.is_object()) {
    for (const auto& [key, value] : b.items()) {
      // a decimal id, as the OpenAI API's keys are: no sign, space or leading zero
      const bool id = !key.empty() && key.size() <= 10 && (key == "0" || key[0] != '0') &&
                      key.find_first_not_of("0123456789") == std::string::npos;
      const std::string where = "logit_bias[" + short_dump(json(key)) + "]";
      if (!id) bad(where, "the key must be a token id (a decimal integer), got " + short_dump(json(key)));
      entry(where, std::stoll(key), value);
    }
  } else if (b.is_array()) {
    for (size_t i = 0; i < b.size(); ++i) {
      const std::string where = "logit_bias[" + std::to_string(i) + "]";
      const json& e = b[i];
      if (!e.is_array() || e.size() != 2 || !is_int(e[0])) bad_type(where, e, "a [token id, bias] pair");
      entry(where, get_int(e[0], where + "[0]", 0, n_vocab - 1), e[1]);
    }
  } else {
    bad_type("logit_bias", b, "an object of token ids to biases");
  }
  std::set<int32_t> banned;  // a token's last bias counts
  for (const auto& [id, bias] : out)
    bias == -std::numeric_limits<float>::infinity() ? void(banned.insert(id)) : void(banned.erase(id));
  if (int64_t(banned.size()) == n_vocab) {
    bad("logit_bias",
        "bans all " + std::to_string(n_vocab) + " tokens of the vocabulary: none is left to choose");
  }
  return out;
}

// The fields /v1/completions and /v1/chat/completions share: model, n, max_tokens (`max_tokens_name`),
// stream, stream_options, seed, stop, sampling, penalties, logit_bias, user, ignore_eos, cache_prompt
// (and response_format, json_schema, grammar: parse_constraint).
void parse_common(const json& j, CompletionRequest& r, const Config& c, const RequestLimits& limits,
                  const char* max_tokens_name) {
  r.gen.sampling.top_k = 0;   // OpenAI's API has no top-k: off unless asked for
  r.gen.skip_special = true;  // a sampled <|im_start|> is no part of the answer's text (llama-server's way)
  // What the request leaves out, the model's generation_config.json (general.sampling.*) gives; the length
  // is the request's (finish_request).
  apply_generation_defaults(r.gen, limits.model_defaults, [&j](const char* key) { return has(j, key); });
  if (has(j, "n")) r.n = get_int(j["n"], "n", 1, limits.max_choices);
  if (int64_t(r.prompts.size()) * r.n > limits.max_choices) {
    bad("n", "prompts x n is " + std::to_string(int64_t(r.prompts.size()) * r.n) + ", more than the " +
                 std::to_string(limits.max_choices) + " choices one request may ask for");
  }
  const int64_t n_ctx = limits.n_ctx > 0 ? limits.n_ctx : c.n_ctx;
  // llama-server's n_predict wins over max_tokens when both are given, as there.
  if (has(j, "n_predict")) {
    const int64_t n = get_length(j["n_predict"], "n_predict", -1, n_ctx, c);
    r.max_tokens = n < 0 ? n_ctx : n;
    r.max_tokens_given = n >= 0;
    if (has(j, max_tokens_name))
      get_length(j[max_tokens_name], max_tokens_name, 0, n_ctx, c);  // still checked
  } else if (has(j, max_tokens_name)) {
    r.max_tokens = get_length(j[max_tokens_name], max_tokens_name, 0, n_ctx, c);
    r.max_tokens_given = true;
  }
  if (has(j, "stream")) r.stream = get_bool(j["stream"], "stream");
  if (has(j, "stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) bad_type("stream_options", so, "an object");
    if (!r.stream) bad("stream_options", "only allowed when stream is true");
    for (const auto& [key, value] : so.items()) {
      if (key != "include_usage") bad("stream_options", "unknown option " + key);
      if (!value.is_null()) r.include_usage = get_bool(value, "stream_options.include_usage");
    }
  }
  if (has(j, "seed")) {
    const json& s = j["seed"];
    if (!is_int(s)) bad_type("seed", s, "an integer");
    // -1 asks for a random seed, as llama.cpp's server reads it (the same as no seed); other negative
    // values are refused rather than wrapped to 2^64 - k.
    if (s.is_number_unsigned()) {
      r.seed = s.get<uint64_t>();
    } else if (s.get<int64_t>() >= 0) {
      r.seed = uint64_t(s.get<int64_t>());
    } else if (s.get<int64_t>() != -1) {
      bad("seed", "must be >= 0 (or -1: a random seed), got " + short_dump(s));
    }
  }
  if (has(j, "stop")) {
    const json& s = j["stop"];
    std::vector<std::string> stops;
    if (s.is_string()) {
      stops.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (int64_t(s.size()) > limits.max_stop) {
        bad("stop",
            "at most " + std::to_string(limits.max_stop) + " stop strings, got " + std::to_string(s.size()));
      }
      for (size_t i = 0; i < s.size(); ++i) {
        if (!s[i].is_string()) bad_type("stop[" + std::to_string(i) + "]", s[i], "a string");
        stops.push_back(s[i].get<std::string>());
      }
    } else {
      bad_type("stop", s, "a string or an array of strings");
    }
    for (const auto& x : stops) {
      if (x.empty()) bad("stop", "a stop string must not be empty");
    }
    r.gen.stop = std::move(stops);
  }
  SamplingParams& sp = r.gen.sampling;
  if (has(j, "temperature")) {
    const double t = get_number(j["temperature"], "temperature");
    if (t < 0 || t > 2) bad("temperature", "must be in [0, 2], got " + short_dump(j["temperature"]));
    sp.temperature = float(t);
  }
  if (has(j, "top_p")) {
    const double t = get_number(j["top_p"], "top_p");
    if (!(t > 0 && t <= 1)) bad("top_p", "must be in (0, 1], got " + short_dump(j["top_p"]));
    // A mass below the smallest normal float keeps the top token alone, as any mass below its probability
    // does: the same nucleus, where float(t) would be 0 (refused).
    sp.top_p = std::max(float(t), std::numeric_limits<float>::min());
  }
  if (has(j, "top_k")) sp.top_k = get_int(j["top_k"], "top_k", 0, c.n_vocab);
  if (has(j, "min_p")) {
    const double t = get_number(j["min_p"], "min_p");
    if (!(t >= 0 && t <= 1)) bad("min_p", "must be in [0, 1], got " + short_dump(j["min_p"]));
    sp.min_p = float(t);
  }
  for (const char* key : {"repetition_penalty", "repeat_penalty"}) {
    if (!has(j, key)) continue;
    if (std::string_view(key) == "repeat_penalty" && has(j, "repetition_penalty")) {
      bad(key, "give repetition_penalty or repeat_penalty (llama-server's name for it), not both");
    }
    const double t = get_number(j[key], key);
    if (!(t > 0 && t <= 100)) bad(key, "must be in (0, 100], got " + short_dump(j[key]));
    if (float(t) < std::numeric_limits<float>::min()) {
      bad(key,
          short_dump(j[key]) + " is below the smallest normal 32-bit float (1.2e-38): give a larger value");
    }
    sp.repetition_penalty = float(t);
  }
  // llama-server's window of the repetition penalty (-1: the whole sequence, 0: none)
  if (has(j, "repeat_last_n")) {
    sp.repeat_last_n = get_int(j["repeat_last_n"], "repeat_last_n", -1, std::numeric_limits<int64_t>::max());
  }
  // The OpenAI API's penalties, over the tokens generated (its documentation's formula, vLLM's reading)
  for (const char* pen : {"presence_penalty", "frequency_penalty"}) {
    if (!has(j, pen)) continue;
    const double t = get_number(j[pen], pen);
    if (t < -2 || t > 2) bad(pen, "must be in [-2, 2], got " + short_dump(j[pen]));
    (std::string_view(pen) == "presence_penalty" ? sp.presence_penalty : sp.frequency_penalty) = float(t);
  }
  if (has(j, "logit_bias")) sp.logit_bias = parse_logit_bias(j["logit_bias"], c.n_vocab);
  if (has(j, "user") && !j["user"].is_string()) bad_type("user", j["user"], "a string");
  if (has(j, "ignore_eos")) r.gen.ignore_eos = get_bool(j["ignore_eos"], "ignore_eos");
  if (has(j, "cache_prompt")) r.cache_prompt = get_bool(j["cache_prompt"], "cache_prompt");
  SpeculativeOptions& spec = r.gen.speculative;
  spec = limits.speculative;
  if (has(j, "prompt_lookup")) {
    spec.prompt_lookup = get_bool(j["prompt_lookup"], "prompt_lookup");
    if (spec.prompt_lookup) spec.draft_model = nullptr;  // the request's source, in place of the server's
  }
  if (has(j, "speculative.n_max")) {
    spec.draft_max = get_int(j["speculative.n_max"], "speculative.n_max", 0, 64);
    if (spec.draft_max == 0) spec = SpeculativeOptions{};  // off for this request
  }
  if (has(j, "speculative.n_min")) {
    spec.draft_min = get_int(j["speculative.n_min"], "speculative.n_min", 0, spec.draft_max);
  }
}

// The checks after every field is read: sampling, and each prompt within the context.
// A schema as the request gives it: an object (OpenAI's response_format.json_schema.schema, llama-server's
// json_schema), or true / {} for any JSON value. Its text goes to the engine, which refuses what it cannot
// honour.
std::string schema_text(const json& schema, const std::string& param) {
  if (schema.is_boolean() && schema.get<bool>()) return "{}";
  if (!schema.is_object()) bad_type(param, schema, "a JSON Schema (an object)");
  return schema.dump();
}

// response_format ({"type": "text" | "json_object" | "json_schema"}), json_schema, grammar: at most one.
void parse_constraint(const json& j, CompletionRequest& r) {
  using Kind = CompletionRequest::Constraint::Kind;
  const char* given = nullptr;
  for (const char* key : {"response_format", "json_schema", "grammar"}) {
    if (!has(j, key)) continue;
    if (given)
      bad(key, std::string("only one of response_format, json_schema and grammar may be given (") + given +
                   " is too)");
    given = key;
  }
  if (has(j, "grammar")) {
    if (!j["grammar"].is_string()) bad_type("grammar", j["grammar"], "a string (a GBNF grammar)");
    // llama-server reads an empty grammar as none
    if (!j["grammar"].get<std::string>().empty())
      r.constraint = {Kind::Gbnf, j["grammar"].get<std::string>(), "grammar"};
  }
  if (has(j, "json_schema"))
    r.constraint = {Kind::JsonSchema, schema_text(j["json_schema"], "json_schema"), "json_schema"};
  if (!has(j, "response_format")) return;
  const json& f = j["response_format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
    bad("response_format",
        "expected an object with a \"type\": \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string type = f["type"].get<std::string>();
  if (type == "text") return;
  if (type == "json_object") {
    // llama-server's extension: a schema beside the type
    if (f.contains("schema") && !f["schema"].is_null()) {
      r.constraint = {Kind::JsonSchema, schema_text(f["schema"], "response_format.schema"),
                      "response_format"};
    } else {
      r.constraint = {Kind::JsonObject, "", "response_format"};
    }
    return;
  }
  if (type != "json_schema") {
    bad("response_format.type",
        "must be \"text\", \"json_object\" or \"json_schema\", got " + short_dump(f["type"]));
  }
  if (!f.contains("json_schema") || !f["json_schema"].is_object()) {
    bad("response_format.json_schema", "required, an object with a \"name\" and a \"schema\"");
  }
  const json& js = f["json_schema"];
  if (!js.contains("name") || !js["name"].is_string())
    bad("response_format.json_schema.name", "required, a string");
  if (js.contains("strict") && !js["strict"].is_null())
    get_bool(js["strict"], "response_format.json_schema.strict");
  if (js.contains("description") && !js["description"].is_null() && !js["description"].is_string()) {
    bad_type("response_format.json_schema.description", js["description"], "a string");
  }
  // OpenAI's default schema is none: any JSON (the name alone). Strict or not, the output follows the schema:
  // a constraint that holds only sometimes is of no use to a program.
  if (!js.contains("schema") || js["schema"].is_null()) {
    r.constraint = {Kind::JsonSchema, "{}", "response_format"};
  } else {
    r.constraint = {Kind::JsonSchema, schema_text(js["schema"], "response_format.json_schema.schema"),
                    "response_format"};
  }
}

void finish_request(CompletionRequest& r, const Config& c, const RequestLimits& limits) {
  try {
    r.gen.sampling.validate();
    // what the choices' samplers will check (the logit bias against the vocabulary): here, as a 400, not as
    // a failure in the scheduler
    (void)Sampler(r.gen.sampling, c.n_vocab);
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  const int64_t n_ctx = limits.n_ctx > 0 ? limits.n_ctx : c.n_ctx;
  // Each prompt must fit the context: its last position's logits give the first completion token, which is
  // sampled and never evaluated, so a prompt of n_ctx tokens still gets one. Each later token takes a
  // position, and a completion stops at a full context (finish_reason "length"): at most n_ctx + 1 - prompt
  // tokens, whatever max_tokens asks. The message states this rule, the one the check applies.
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const int64_t len = int64_t(r.prompts[i].size());
    if (len > n_ctx) {
      const std::string where = r.chat ? "messages" : "prompt";
      throw ApiError(
          400,
          "This server's maximum context length is " + std::to_string(n_ctx) + " tokens" +
              whose_context(n_ctx, c) + ". However, your " + where + " resulted in " + std::to_string(len) +
              " tokens. A prompt may fill the context (" + std::to_string(n_ctx) +
              " tokens); the completion stops when the context is full, at " + std::to_string(n_ctx + 1) +
              " - prompt tokens. Please reduce the length of the " + where + ".",
          where, "", "context_length_exceeded");
    }
  }
  r.gen.max_new_tokens = std::max<int64_t>(r.max_tokens, 1);
  r.gen.logprobs = r.logprobs.has_value();
  r.gen.top_logprobs = r.logprobs.value_or(0);
}

}  // namespace

void check_model_name(const std::string& name, const RequestLimits& limits) {
  const auto& names = limits.model_names;
  if (names.empty() || std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string served;
  for (const std::string& n : names) served += (served.empty() ? "" : ", ") + n;
  throw ApiError(404, "The model '" + name + "' does not exist; this server serves: " + served, "model",
                 "invalid_request_error", "model_not_found");
}

CompletionRequest parse_completion_request(std::string_view body, const Tokenizer& tok, const Config& c,
                                           const RequestLimits& limits) {
  const json j = parse_body(body);
  CompletionRequest r;
  r.model = check_model(j, limits);
  static const std::set<std::string> known = {"prompt", "echo", "best_of", "suffix"};
  check_known(j, known);

  // prompt: a string, an array of strings, an array of token ids, or an array of arrays of token ids.
  if (!has(j, "prompt")) throw ApiError(400, "prompt: required (a string, strings, or token ids)", "prompt");
  const json& p = j["prompt"];
  if (p.is_string()) {
    r.prompts.push_back(text_prompt(p.get<std::string>(), "prompt", tok));
  } else if (p.is_array()) {
    if (p.empty()) bad("prompt", "must not be an empty array");
    if (is_int(p[0])) {
      r.prompts.push_back(id_prompt(p, "prompt", c.n_vocab));
    } else {
      if (int64_t(p.size()) > limits.max_choices) {
        bad("prompt",
            "at most " + std::to_string(limits.max_choices) + " prompts, got " + std::to_string(p.size()));
      }
      for (size_t i = 0; i < p.size(); ++i) {
        const std::string name = "prompt[" + std::to_string(i) + "]";
        if (p[i].is_string()) {
          r.prompts.push_back(text_prompt(p[i].get<std::string>(), name, tok));
        } else if (p[i].is_array()) {
          if (p[i].empty()) bad(name, "must not be an empty array");
          r.prompts.push_back(id_prompt(p[i], name, c.n_vocab));
        } else {
          bad_type(name, p[i], "a string or an array of token ids");
        }
      }
    }
  } else {
    bad_type("prompt", p, "a string, an array of strings or an array of token ids");
  }

  parse_common(j, r, c, limits, "max_tokens");
  parse_constraint(j, r);
  if (has(j, "best_of") && get_int(j["best_of"], "best_of", 1, limits.max_choices) != r.n) {
    throw ApiError(400, "best_of: not supported (it must equal n)", "best_of");
  }
  if (has(j, "logprobs")) r.logprobs = get_int(j["logprobs"], "logprobs", 0, limits.max_top_logprobs);
  if (has(j, "echo")) r.echo = get_bool(j["echo"], "echo");
  if (has(j, "suffix")) {
    if (!j["suffix"].is_string()) bad_type("suffix", j["suffix"], "a string");
    if (!j["suffix"].get<std::string>().empty()) throw ApiError(400, "suffix: not supported", "suffix");
  }
  finish_request(r, c, limits);
  return r;
}

CompletionRequest parse_chat_request(std::string_view body, const Tokenizer& tok, const Config& c,
                                     const RequestLimits& limits, const ChatTemplate* tmpl) {
  const json j = parse_body(body);
  const std::string model = check_model(j, limits);
  static const std::set<std::string> known = {
      "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
      "store", "metadata", "chat_template_kwargs", "add_generation_prompt",
      // the rest of the OpenAI chat API's parameters: those that change nothing here are accepted, those
      // that would change the answer are refused below unless they ask for what minigpt does anyway
      "functions", "function_call", "audio", "modalities", "web_search_options", "prediction",
      "prompt_cache_key", "safety_identifier", "service_tier", "reasoning_effort", "verbosity"};
  check_known(j, known);
  for (const char* key :
       {"prompt_cache_key", "safety_identifier", "service_tier", "reasoning_effort", "verbosity"}) {
    if (has(j, key) && !j[key].is_string()) bad_type(key, j[key], "a string");
  }
  if (has(j, "prediction") && !j["prediction"].is_object())
    bad_type("prediction", j["prediction"], "an object");
  if (has(j, "audio")) throw ApiError(400, "audio: not supported (minigpt writes text only)", "audio");
  if (has(j, "web_search_options")) {
    throw ApiError(400, "web_search_options: not supported (minigpt does not search the web)",
                   "web_search_options");
  }
  if (has(j, "modalities")) {
    const json& m = j["modalities"];
    if (!m.is_array()) bad_type("modalities", m, "an array");
    for (const json& e : m) {
      if (!(e.is_string() && e == "text"))
        throw ApiError(400, "modalities: only [\"text\"] is supported, got " + short_dump(m), "modalities");
    }
  }
  if (tmpl == nullptr) {
    throw ApiError(400,
                   "this model has no chat template (no chat_template.jinja, no chat_template in its "
                   "tokenizer_config.json or GGUF metadata): use /v1/completions",
                   "messages", "", "model_not_chat");
  }

  CompletionRequest r;
  r.model = model;
  r.chat = true;
  // The conversation as sent, keys in their order (a template may iterate over a message's fields).
  const ojson oj = parse_json_bounded<ojson>(true, body.begin(), body.end());
  if (!has(j, "messages")) throw ApiError(400, "messages: required (an array of messages)", "messages");
  if (!j["messages"].is_array()) bad_type("messages", j["messages"], "an array");
  if (j["messages"].empty()) bad("messages", "must not be empty");
  if (int64_t(j["messages"].size()) > 4096) bad("messages", "more than 4096 messages");
  ojson messages = ojson::array();
  for (size_t i = 0; i < oj["messages"].size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    ojson m = oj["messages"][i];
    if (!m.is_object()) bad_type(name, j["messages"][i], "an object");
    if (!m.contains("role") || !m["role"].is_string()) bad(name + ".role", "required, a string");
    const std::string role = m["role"].get<std::string>();
    static const std::set<std::string> roles = {"system",    "developer", "user",
                                                "assistant", "tool",      "function"};
    if (!roles.count(role)) {
      bad(name + ".role",
          "must be one of system, developer, user, assistant, tool, function; got " + short_dump(json(role)));
    }
    // The participant's name (OpenAI's optional field): a template may print it, so it must be text.
    if (m.contains("name") && !m["name"].is_string())
      bad_type(name + ".name", j["messages"][i]["name"], "a string");
    if (m.contains("content")) {
      ojson& content = m["content"];
      if (content.is_array()) {
        // Content parts: the text ones joined (as vLLM does for templates that take a string); minigpt has
        // no image or audio input.
        std::string text;
        for (size_t k = 0; k < content.size(); ++k) {
          const std::string pname = name + ".content[" + std::to_string(k) + "]";
          const ojson& part = content[k];
          if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            bad(pname, "expected an object with a \"type\"");
          }
          if (part["type"] != "text") {
            bad(pname, "only text content is supported, got type " +
                           short_dump(json(part["type"].get<std::string>())));
          }
          if (!part.contains("text") || !part["text"].is_string()) bad(pname + ".text", "required, a string");
          if (k > 0) text += "\n";
          text += part["text"].get<std::string>();
        }
        content = text;
      } else if (content.is_null()) {
        if (role != "assistant") bad(name + ".content", "only an assistant message may have null content");
      } else if (!content.is_string()) {
        bad_type(name + ".content", j["messages"][i]["content"], "a string or an array of content parts");
      }
    } else if (role != "assistant") {
      bad(name + ".content", "required");
    }
    messages.push_back(std::move(m));
  }
  ojson kwargs = ojson::object();
  if (has(j, "chat_template_kwargs")) {
    if (!oj["chat_template_kwargs"].is_object()) {
      bad_type("chat_template_kwargs", j["chat_template_kwargs"], "an object");
    }
    kwargs = oj["chat_template_kwargs"];
    for (const char* reserved : {"messages", "add_generation_prompt"}) {
      if (kwargs.contains(reserved)) bad("chat_template_kwargs", std::string("must not set ") + reserved);
    }
  }
  bool add_generation_prompt = true;
  if (has(j, "add_generation_prompt"))
    add_generation_prompt = get_bool(j["add_generation_prompt"], "add_generation_prompt");
  // functions / function_call, the former names of tools / tool_choice: none, or "none"
  if (has(j, "functions")) {
    if (!j["functions"].is_array()) bad_type("functions", j["functions"], "an array");
    if (!j["functions"].empty())
      throw ApiError(400, "functions: not supported (send tools, their current name)", "functions");
  }
  if (has(j, "function_call") && !(j["function_call"].is_string() && j["function_call"] == "none")) {
    throw ApiError(400, "function_call: not supported (send tool_choice, its current name)", "function_call");
  }
  // tools, tool_choice, parallel_tool_calls (tool_calls.h)
  r.tools = parse_tool_calling(oj);
  if (r.tools || has_tool_turns(messages)) {
    const ToolCalling::Format format = tool_format(*tmpl);
    if (r.tools) r.tools->format = format;
    messages = tool_messages(r.tools ? &*r.tools : nullptr, format, messages, kwargs);
  }
  if (has(j, "store") && get_bool(j["store"], "store")) {
    throw ApiError(400, "store: not supported (minigpt keeps no completions)", "store");
  }
  if (has(j, "metadata") && !j["metadata"].is_object()) bad_type("metadata", j["metadata"], "an object");

  parse_common(j, r, c, limits, has(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
  parse_constraint(j, r);
  if (r.tools) {
    if (r.constraint) {
      bad(r.constraint->param, "not with tools (a reply is a tool call or an answer in the tools' format)");
    }
    auto [tag, text] = tool_constraint(*r.tools);
    using Kind = CompletionRequest::Constraint::Kind;
    r.constraint = {tag ? Kind::StructuralTag : Kind::JsonSchema, std::move(text), "tools"};
    if (r.stream && has(j, "logprobs") && get_bool(j["logprobs"], "logprobs")) {
      bad("logprobs", "not with tools in a stream (a streamed reply with tools comes whole at its end)");
    }
  }
  // A reply ends at the template's end-of-turn token (<|im_end|>, <|eot_id|>) too, where the model's eos ids
  // do not name it.
  r.gen.eos_token_ids = chat_stop_ids(c, r.gen.eos_token_ids, *tmpl);
  // The chat API has no default length (16 is the legacy completions API's): without one, a reply runs
  // until EOS, a stop string or a full context, as OpenAI's and llama-server's do.
  if (!r.max_tokens_given) r.max_tokens = limits.n_ctx > 0 ? limits.n_ctx : c.n_ctx;
  bool logprobs = false;
  if (has(j, "logprobs")) logprobs = get_bool(j["logprobs"], "logprobs");
  int64_t top = 0;
  if (has(j, "top_logprobs")) {
    top = get_int(j["top_logprobs"], "top_logprobs", 0, 20);
    if (!logprobs) bad("top_logprobs", "logprobs must be true when top_logprobs is given");
  }
  if (logprobs) r.logprobs = top;

  std::string prompt;
  try {
    prompt = tmpl->render(messages, add_generation_prompt, kwargs);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages", "", "chat_template_error");
  }
  try {
    // As apply_chat_template(tokenize=True): no special tokens added (the template writes them), and the
    // special tokens in the text recognised.
    r.prompts.push_back(tok.encode(prompt, /*allow_special=*/true));
  } catch (const Error& e) {
    throw ApiError(400, std::string("messages: ") + e.what(), "messages");
  }
  r.rendered_prompt = std::move(prompt);
  finish_request(r, c, limits);
  return r;
}

}  // namespace minigpt::server
