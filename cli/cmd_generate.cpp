// minigpt generate: stream text from a prompt, with transformers-compatible sampling.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "command.h"
#include "common.h"
#include "constraint_flags.h"
#include "id_list.h"
#include "io/io.h"
#include "line_input.h"
#include "minigpt/error.h"
#include "minigpt/generate.h"
#include "minigpt/generation_config.h"
#include "minigpt/speculative.h"
#include "prompt_cache_flags.h"
#include "sampling_flags.h"
#include "speculative_flags.h"

namespace minigpt::cli {
namespace {

using json = nlohmann::json;

struct GenerateCliOptions : SamplingFlags {
  ModelOptions model;
  std::string prompt;
  bool prompt_given = false;
  std::string file;
  bool no_echo = false;
  bool json_out = false;
  bool special = false;       // special tokens recognised in the prompt
  bool show_special = false;  // generated special tokens shown as text
  int64_t top_logprobs = 0;
  std::string overflow;  // --context-overflow; empty: error, or slide with -i
  std::optional<int64_t> ctx_size;
  bool interactive = false;
  ConstraintFlags constraint;    // --json-schema, --grammar-file, --json-object
  SpeculativeFlags speculative;  // --prompt-lookup, --draft-model, --draft-max ...
  PromptCacheFlags prompt_cache;
};

// --json's logit_bias: {"id": bias} as the OpenAI API writes it, a token's last bias, -inf as null.
json bias_json(const std::vector<std::pair<int32_t, float>>& bias) {
  std::map<int32_t, float> last;
  for (const auto& [id, b] : bias) last[id] = b;
  json out = json::object();
  for (const auto& [id, b] : last) out[std::to_string(id)] = std::isinf(b) ? json(nullptr) : json(b);
  return out;
}

// `generate -i`: one Session and its KV cache across turns. Each turn appends the user's line (and a newline)
// to the sequence, evaluating only the new tokens, and generates until a stop string (--stop,
// -r/--reverse-prompt), EOS or --max-new-tokens; Ctrl-C ends the turn, not the program; EOF (Ctrl-D) ends it.
// Line editing and history: libedit's readline() on a terminal, plain lines otherwise.
//
// The context, with --context-overflow as for a prompt (slide unless given: a conversation outgrows a short
// context in a few turns, and llama.cpp's conversation mode shifts its context likewise):
// - error drops nothing: a line the context has no room for is refused (the conversation goes
//   on), and when the conversation itself has filled the context the session ends;
// - truncate: a line that does not fit keeps the last tokens of the conversation (leaving room for -n tokens,
//   at least half the context of it, as a truncated prompt), evaluated again from position 0 (GPT-2's
//   positions are learned: cached keys cannot be shifted); a generation that fills the context ends the turn;
// - slide: as truncate, and a generation that fills the context goes on from the last half of the window, as
//   `generate --context-overflow slide` does.
// So a turn is what `generate` with the same options gives on the whole conversation up to there (checked by
// tests/test_interactive.cpp), where the window starts where it last had to move.
int run_interactive(GenerateCliOptions& o, std::shared_ptr<const Model> model, const Tokenizer& tok,
                    GenerateOptions g, int64_t n_ctx, const std::string& first_prompt,
                    const std::vector<int32_t>& first_ids) {
  // What a note may suggest: -c only when the model has positions beyond this context.
  const bool can_enlarge = n_ctx < model->config().n_ctx;
  const std::string enlarge = can_enlarge ? "-c enlarges it; " : "";
  const Config& c = model->config();
  SessionOptions so;
  so.n_ctx = n_ctx;
  Session session(model, so);
  // Speculative decoding (--prompt-lookup, --draft-model): one drafter across the turns.
  std::unique_ptr<Speculator> spec;
  if (g.speculative.enabled()) spec = std::make_unique<Speculator>(g.speculative, *model, n_ctx);
  std::vector<int32_t> history;  // every token of the conversation, evaluated or not
  size_t window = 0;             // history[window] is at position 0 of the session
  std::vector<int32_t> pending;  // tokens sampled but not evaluated yet (the last of a turn)
  bool at_line_start = true;
  std::string prompt = "> ";  // what the next line is read after
  auto show = [&](std::string_view t) {
    if (t.empty()) return;
    write_stdout(t);
    at_line_start = t.back() == '\n';
  };
  auto note = [&](const std::string& text) {
    std::fprintf(stderr, "%sminigpt: %s\n", at_line_start ? "" : "\n", text.c_str());
  };
  const std::string ctx_text = "the context of " + std::to_string(n_ctx) + " tokens";

  catch_interrupts();

  enum class Turn { Done, Refused, End };
  // One turn: `ids` appended, then generation.
  auto turn = [&](const std::vector<int32_t>& ids) {
    std::vector<int32_t> in = pending;
    in.insert(in.end(), ids.begin(), ids.end());
    if (in.empty()) return Turn::Done;
    const int64_t room = n_ctx - session.n_past();
    if (g.overflow == ContextOverflow::Error) {
      // Room for the line and for at least one token of the reply.
      const int64_t line_room = room - 1 - int64_t(pending.size());
      if (line_room < 1) {  // not even an empty line (its newline) fits
        note(ctx_text + " is full; ending the session (" + enlarge +
             "--context-overflow slide drops the oldest tokens instead)");
        return Turn::End;
      }
      if (int64_t(ids.size()) > line_room) {
        note("that line is " + std::to_string(ids.size()) + " tokens, and " + ctx_text +
             " has room for a line of " + std::to_string(line_room) + " now: it was not added (" + enlarge +
             "--context-overflow truncate or slide drops the oldest tokens)");
        return Turn::Refused;
      }
    }
    pending.clear();
    history.insert(history.end(), ids.begin(), ids.end());
    if (int64_t(in.size()) > room) {
      // truncate / slide: the last tokens of the window, the line's included, from position 0.
      const int64_t keep = truncate_keep(g.max_new_tokens, n_ctx);
      const size_t from = history.size() - size_t(keep);
      note("dropped the oldest " + std::to_string(from - window) + " tokens of the conversation to fit " +
           ctx_text + " (--context-overflow " + o.overflow + ")");
      window = from;
      session.reset();
      in.assign(history.begin() + ptrdiff_t(window), history.end());
    }
    // A Ctrl-C since the line was read (during its evaluation, a long prompt's) ends the turn at its first
    // token: the counter is reset before the prompt is shown, not here.
    std::span<const float> logits = session.eval(in);
    GenerateCallbacks cb;
    cb.on_text = show;
    // The sampler sees the window (for --repetition-penalty), as generate() sees its prompt.
    const size_t base = window;
    Generator gen(c, &tok, g, std::vector<int32_t>(history.begin() + ptrdiff_t(base), history.end()), cb);
    if (spec) spec->prepare(0, gen.history());
    bool full = false;
    bool going = gen.push(logits);
    while (going) {
      if (g_interrupts.load() > 0) {
        gen.finish(StopReason::Cancelled);
        break;
      }
      if (session.n_past() == n_ctx) {
        if (g.overflow != ContextOverflow::Slide) {
          gen.finish(StopReason::Context);
          full = true;
          break;
        }
        // The last half of the window, the new token included, evaluated again from position 0.
        const std::vector<int32_t>& h = gen.history();
        const int64_t keep = slide_keep(n_ctx);
        session.reset();
        window = base + h.size() - size_t(keep);
        going = gen.push(
            session.eval(std::span<const int32_t>(h.data() + h.size() - size_t(keep), size_t(keep))));
        continue;
      }
      if (spec) {
        going = spec->step(session, 0, gen);
        continue;
      }
      const int32_t next = gen.next();
      going = gen.push(session.eval(std::span<const int32_t>(&next, 1)));
    }
    // The tokens generated stay in the conversation (also those of a stop string, as llama.cpp keeps them);
    // the last one sampled is evaluated with the next turn's input.
    const std::vector<int32_t>& all = gen.history();
    history.resize(base);
    history.insert(history.end(), all.begin(), all.end());
    const size_t evaluated = window + size_t(session.n_past());
    if (history.size() > evaluated) pending.assign(history.begin() + ptrdiff_t(evaluated), history.end());
    if (gen.result().reason == StopReason::Cancelled) show(at_line_start ? "" : "\n");
    // A stop string (-r) is shown, as llama.cpp shows its reverse prompt: its last line is the prompt that
    // the user's line follows ("User:" then the line); one that ends a line is followed by "> ".
    prompt = "> ";
    if (gen.result().reason == StopReason::Stop) {
      const std::string& s = gen.result().stop;
      const size_t nl = s.rfind('\n');
      const size_t last = nl == std::string::npos ? 0 : nl + 1;
      show(std::string_view(s).substr(0, last));
      if (last < s.size()) prompt = s.substr(last);
    }
    if (full) {
      if (g.overflow == ContextOverflow::Error) {
        note(ctx_text + " is full; ending the session (" + enlarge + "--context-overflow slide goes on)");
        return Turn::End;
      }
      note(ctx_text + " is full: the turn ends here (the next line drops the oldest tokens)");
    }
    return Turn::Done;
  };

  if (!first_prompt.empty()) {
    // Refused before anything is shown, as generate's prompt is: the context must hold it and a reply.
    if (g.overflow == ContextOverflow::Error && int64_t(first_ids.size()) >= n_ctx) {
      throw Error(ErrorKind::Argument,
                  "the prompt is " + std::to_string(first_ids.size()) + " tokens; " + ctx_text +
                      " has room for " + std::to_string(n_ctx - 1) +
                      " and a reply (--context-overflow truncate keeps its last tokens)");
    }
    if (!o.no_echo) show(first_prompt);
    if (turn(first_ids) == Turn::End) return 0;
  }
  for (;;) {
    if (!at_line_start && prompt == "> ") show("\n");
    std::string line;
    if (!read_turn_line(prompt, line, show)) break;
    at_line_start = true;
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(line + "\n", o.special);
    } catch (const Error& e) {
      std::fprintf(stderr, "minigpt: %s\n", e.what());  // invalid UTF-8: this line only
      continue;
    }
    if (turn(ids) == Turn::End) break;
  }
  if (!at_line_start) show("\n");
  return 0;
}

std::string read_prompt(const GenerateCliOptions& o) {
  if (o.prompt_given) return o.prompt;
  if (!o.file.empty()) return read_regular_file(o.file, kMaxTextBytes, "prompt file");
  if (::isatty(STDIN_FILENO)) return "";  // nothing piped in: unconditional generation, never a hang
  return read_fd_capped(STDIN_FILENO, kMaxTextBytes, "stdin");
}

// Valid UTF-8 for JSON output: the stream decoder only releases whole characters (or U+FFFD).
std::string to_json_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int run_generate(GenerateCliOptions& o, const std::function<bool(const char*)>& given) {
  const auto dir = resolve_model_dir(o.model);
  const ModelSource source = ModelSource::open(dir);  // classified, a GGUF parsed, once for every reader
  check_tokenizer_source(o.model.tokenizer, source);
  // The prompt before the model, as perplexity reads its text: a missing file is said before a load.
  const std::string prompt_text = o.interactive ? (o.prompt_given    ? o.prompt
                                                   : !o.file.empty() ? read_prompt(o)
                                                                     : "")
                                                : read_prompt(o);
  const LoadOptions lo = load_options(o.model);
  auto model = Model::load(source, lo);
  const Tokenizer tok = load_tokenizer(o.model.tokenizer, source, model->config().n_vocab);
  std::vector<int32_t> prompt;
  try {
    // With the special tokens of tokenizer.json's template (e.g. a BOS), as a transformers tokenizer gives
    // them; an empty prompt stays empty, so that generation starts from the model's BOS.
    prompt = prompt_text.empty() ? tok.encode(prompt_text, o.special)
                                 : tok.encode_with_specials(prompt_text, o.special);
  } catch (const Error& e) {
    const std::string where = o.prompt_given ? "-p" : o.file.empty() ? "stdin" : o.file;
    throw Error(e.kind(), "prompt (" + where + "): " + e.what());
  }

  GenerateOptions g = o.gen;
  // generation_config.json (general.sampling.* in a GGUF file) for the sampling flags not given, as
  // llama.cpp takes a GGUF file's; its eos_token_id ends generation, as in transformers.
  const GenerationDefaults defaults = read_generation_defaults(source);
  g.skip_special = !o.show_special;  // as llama.cpp's CLI and server, and minigpt's server
  apply_generation_defaults(g, defaults, given, int64_t(prompt.size()));
  note_generation_defaults(defaults);
  g.sampling.seed = o.seed ? *o.seed : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  if (o.overflow.empty()) o.overflow = o.interactive ? "slide" : "error";
  g.overflow = o.overflow == "truncate" ? ContextOverflow::Truncate
               : o.overflow == "slide"  ? ContextOverflow::Slide
                                        : ContextOverflow::Error;
  g.logprobs = o.json_out;
  g.top_logprobs = o.top_logprobs;

  const int64_t model_ctx = model->config().n_ctx;
  const int64_t n_ctx = context_size(o.ctx_size, model_ctx);

  // -n -1 (llama.cpp's): as many tokens as the context has room for after the prompt (an empty prompt is
  // the BOS alone); in -i, a turn's at most a context's worth. Any other negative count is refused below.
  if (g.max_new_tokens == -1 && o.interactive) g.max_new_tokens = n_ctx;
  g.max_new_tokens = resolve_max_new_tokens(g.max_new_tokens, int64_t(prompt.size()), n_ctx);
  g.grammar = compile_constraint(o.constraint, tok, model->config().n_vocab);  // structured output, if asked
  g.speculative = speculative_options(o.speculative, lo, model->config().n_vocab);
  // Everything that can be refused is refused before a byte is written.
  validate_options(g, model->config(), &tok);
  if (o.interactive) return run_interactive(o, model, tok, g, n_ctx, prompt_text, prompt);
  prepare_prompt(prompt, g, model->config(), &tok, n_ctx);
  if (n_ctx < model_ctx && !o.ctx_size) {
    std::fprintf(stderr, "minigpt: context %lld of the model's %lld tokens (-c to change)\n",
                 (long long)n_ctx, (long long)model_ctx);
  }
  SessionOptions so;
  so.n_ctx = n_ctx;
  Session session(model, so);
  GenerateCallbacks cb;
  if (o.json_out) {
    cb.on_token = [&](const GeneratedToken& t) {
      json top = json::array();
      // Each alternative's text beside its id, as the server's top_logprobs give it (bytes that end
      // inside a character: U+FFFD in the JSON).
      for (const auto& [id, lp] : t.top)
        top.push_back({{"id", id},
                       {"text", id < tok.n_vocab() ? tok.decode(std::vector<int32_t>{id}) : std::string()},
                       {"logprob", lp}});
      json line = {{"id", t.id}, {"text", t.text}, {"logprob", t.logprob}};
      if (o.top_logprobs > 0) line["top_logprobs"] = top;
      write_stdout(to_json_line(line) + "\n");
    };
  } else {
    // Echoed once the prompt has been evaluated: an error there leaves stdout empty.
    if (!o.no_echo) cb.on_prefilled = [&prompt_text] { write_stdout(prompt_text); };
    cb.on_text = [](std::string_view t) { write_stdout(t); };
  }
  use_prompt_cache(o.prompt_cache, session, std::filesystem::path(dir).lexically_normal().filename().string(),
                   cb);
  const GenerateResult r = generate(session, &tok, prompt, g, cb);

  const double prefill_tps = r.prefill_seconds > 0 ? double(r.prompt.size()) / r.prefill_seconds : 0.0;
  // Decode rate: the tokens after the first one, over the time since the first was sampled. With one token
  // or none there is no decode step to time: null in JSON, "n/a" in the text (not a rate of 0).
  const int64_t n_gen = int64_t(r.tokens.size());
  const bool timed = r.decode_seconds > 0 && n_gen > 1;
  const double decode_tps = timed ? double(n_gen - 1) / r.decode_seconds : 0.0;
  char decode_text[48] = "n/a";
  if (timed) std::snprintf(decode_text, sizeof decode_text, "%.1f tok/s", decode_tps);
  // Temperature 0 takes the argmax: no draw, so no seed to repeat the run with.
  const bool greedy = g.sampling.temperature == 0.0f;
  if (o.json_out) {
    json summary = {{"prompt_tokens", r.prompt.size()},
                    {"prompt_tokens_dropped", r.prompt_dropped},
                    {"prompt_tokens_restored", r.prompt_restored},
                    {"prefill_tok_s", prefill_tps},
                    {"generated_tokens", n_gen},
                    {"decode_tok_s", timed ? json(decode_tps) : json(nullptr)},
                    {"ttft_ms", r.first_token_seconds * 1e3},
                    {"stop_reason", stop_reason_name(r.reason)},
                    {"slides", r.slides},
                    {"decode_steps", r.decode_steps},
                    {"drafted_tokens", r.drafted},
                    {"accepted_tokens", r.accepted},
                    {"seed", greedy ? json(nullptr) : json(g.sampling.seed)},
                    {"sampling",
                     {{"temperature", g.sampling.temperature},
                      {"top_k", g.sampling.top_k},
                      {"top_p", g.sampling.top_p},
                      {"min_p", g.sampling.min_p},
                      {"repetition_penalty", g.sampling.repetition_penalty},
                      {"repeat_last_n", g.sampling.repeat_last_n},
                      {"presence_penalty", g.sampling.presence_penalty},
                      {"frequency_penalty", g.sampling.frequency_penalty},
                      {"logit_bias", bias_json(g.sampling.logit_bias)}}},
                    {"text", r.text}};
    write_stdout(to_json_line({{"summary", summary}}) + "\n");
  } else {
    write_stdout("\n");  // the text before the summary, also when both go to one terminal or file
    std::fprintf(stderr,
                 "minigpt: prompt %zu token%s, prefill %.1f tok/s | generated %lld token%s, decode %s | "
                 "time to first token %.1f ms | stop: %s | %s\n",
                 r.prompt.size(), r.prompt.size() == 1 ? "" : "s", prefill_tps, (long long)n_gen,
                 n_gen == 1 ? "" : "s", decode_text, r.first_token_seconds * 1e3, stop_reason_name(r.reason),
                 greedy ? "greedy" : ("seed " + std::to_string(g.sampling.seed)).c_str());
  }
  return 0;
}

const bool registered_generate =
    register_command("generate", "Generate text from a prompt, streaming it", [](CLI::App& app) {
      auto o = std::make_shared<GenerateCliOptions>();
      add_model_options(app, o->model, false);
      add_tokenizer_option(app, o->model.tokenizer);
      auto* prompt_opt = app.add_option_function<std::string>(
          "-p,--prompt", [o](const std::string& p) { o->prompt = p, o->prompt_given = true; },
          "Prompt text (else -f, else stdin; empty: start from BOS)");
      auto* file_opt = app.add_option("-f,--file", o->file, "Read the prompt from this file");
      prompt_opt->excludes(file_opt);
      app.add_flag("--no-echo", o->no_echo, "Do not print the prompt before the generated text");
      add_sampling_flags(app, *o);
      add_constraint_flags(app, o->constraint);
      add_speculative_flags(app, o->speculative);
      app.add_option("--context-overflow", o->overflow,
                     "When the context is full: error, truncate (the prompt's oldest tokens) or slide (the "
                     "oldest tokens, generation goes on) (default error; with -i, slide)")
          ->check(CLI::IsMember({"error", "truncate", "slide"}));
      app.add_option_function<int64_t>(
          "-c,--ctx-size", [o](const int64_t& c) { o->ctx_size = c; },
          "Context size in tokens, the KV cache's length (default: the model's context, at "
          "most 4096; 0 = the model's whole context)");
      auto* json_flag =
          app.add_flag("--json", o->json_out, "One JSON object per token, then a summary (no prompt echo)");
      app.add_option("--top-logprobs", o->top_logprobs, "With --json: this many alternatives per token")
          ->needs(json_flag);
      app.add_flag("--special", o->special, "Recognise special tokens such as <|endoftext|> in the prompt");
      app.add_flag("--show-special", o->show_special,
                   "Show the special tokens the model generates (otherwise they add no text, as in llama.cpp "
                   "without its --special)");
      auto* interactive = app.add_flag(
          "-i,--interactive", o->interactive,
          "Chat-style turns with one KV cache: type a line, the model continues until a stop string "
          "(--stop, -r), EOS or -n tokens; Ctrl-C stops a generation, Ctrl-D ends");
      interactive->excludes(json_flag);
      add_prompt_cache_flags(app, o->prompt_cache);
      interactive->excludes("--prompt-cache");
      app.add_option(
             "-r,--reverse-prompt", o->gen.stop,
             "Stop generating and give the turn back at this string, shown as what the next line follows "
             "(as llama.cpp's -r; without -i, the same as --stop)")
          ->allow_extra_args(false);
      return [o, &app] {
        for (const auto& b : o->logit_bias) o->gen.sampling.logit_bias.push_back(parse_logit_bias(b));
        // The flags given on the command line: the model's generation defaults fill in the others.
        return run_generate(*o, flags_given(app));
      };
    });

}  // namespace
}  // namespace minigpt::cli
