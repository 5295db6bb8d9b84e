// minigpt chat: a conversation over the model's chat template, as `llama-cli -cnv` or `ollama run` give one.
//
// Each turn renders the whole conversation (the system prompt, every user line and reply so far, the new
// line, and the generation prompt) with the template, exactly as transformers' apply_chat_template does, and
// tokenizes it as apply_chat_template(tokenize=True) does. The KV cache holds the tokens of the previous
// turns: only the part after the longest prefix they share with the new rendering is evaluated (from where
// they differ when the template renders the history differently, e.g. one that moves the system prompt to the
// last user turn or drops a past reply's thinking). The reply is
// generated until an end-of-turn token (the model's eos ids and the template's, chat_stop_ids()), a stop
// string, -n tokens or a full context; what was shown of it joins the conversation as the assistant's
// message.
//
// Ctrl-C stops a reply and returns to the prompt (at an empty prompt, it ends the program, as Ctrl-D does);
// `/reset` clears the history (the system prompt stays). Lines are edited with libedit on a terminal
// (line_input.h, as `generate -i`), read plainly from a pipe.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "chat/chat_template.h"
#include "command.h"
#include "common.h"
#include "constraint_flags.h"
#include "id_list.h"
#include "line_input.h"
#include "minigpt/error.h"
#include "minigpt/generate.h"
#include "minigpt/generation_config.h"
#include "minigpt/speculative.h"
#include "sampling_flags.h"
#include "speculative_flags.h"

namespace minigpt::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct ChatCliOptions : SamplingFlags {
  ModelOptions model;
  std::string system;
  bool system_given = false;
  std::string chat_template;  // --chat-template FILE
  std::optional<int64_t> ctx_size;
  std::string prompt_log;        // --prompt-log FILE
  ConstraintFlags constraint;    // --json-schema, --grammar-file, --json-object
  SpeculativeFlags speculative;  // --prompt-lookup, --draft-model, --draft-max ...
};

// The tokens `a` and `b` begin with alike.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

int run_chat(ChatCliOptions& o, const std::function<bool(const char*)>& given) {
  const auto dir = resolve_model_dir(o.model);
  const ModelSource source = ModelSource::open(dir);
  check_tokenizer_source(o.model.tokenizer, source);
  const LoadOptions lo = load_options(o.model);
  auto model = Model::load(source, lo);
  const Config& c = model->config();
  const Tokenizer tok = load_tokenizer(o.model.tokenizer, source, c.n_vocab);
  std::optional<ChatTemplate> tmpl;
  if (!o.chat_template.empty()) {
    tmpl = load_chat_template_file(o.chat_template, source, tok);
  } else {
    tmpl = load_chat_template(source, tok);
    if (!tmpl) {
      throw Error(ErrorKind::Config,
                  dir.string() +
                      ": the model has no chat template (no chat_template.jinja, no chat_template in its "
                      "tokenizer_config.json or GGUF metadata): give one with --chat-template FILE, or use "
                      "generate -i");
    }
  }

  GenerateOptions g = o.gen;
  const int64_t n_ctx = context_size(o.ctx_size, c.n_ctx);
  // A reply runs until its end-of-turn token or the context is full unless -n (or the model's
  // max_new_tokens) bounds it, as the chat API's replies do.
  if (!given("max_new_tokens")) g.max_new_tokens = n_ctx;
  const GenerationDefaults defaults = read_generation_defaults(source);
  apply_generation_defaults(g, defaults, given);
  g.eos_token_ids = chat_stop_ids(c, g.eos_token_ids, *tmpl);
  g.skip_special = true;  // a sampled <|im_start|> is no part of the reply's text
  g.sampling.seed = o.seed ? *o.seed : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  if (g.max_new_tokens == -1) g.max_new_tokens = n_ctx;
  g.grammar = compile_constraint(o.constraint, tok, c.n_vocab);  // structured output, if asked
  g.speculative = speculative_options(o.speculative, lo, c.n_vocab);
  validate_options(g, c, &tok);

  std::ofstream log;
  if (!o.prompt_log.empty()) {
    log.open(o.prompt_log, std::ios::app | std::ios::binary);
    if (!log)
      throw Error(ErrorKind::Io, o.prompt_log + ": cannot open the prompt log for writing (--prompt-log)");
  }
  ojson system = ojson::array();
  if (o.system_given) system.push_back({{"role", "system"}, {"content", o.system}});
  // A template that refuses a system message (its raise_exception) says so now, not at the first line.
  if (o.system_given) {
    try {
      tmpl->render(ojson::array({system[0], {{"role", "user"}, {"content", "hi"}}}), true);
    } catch (const Error& e) {
      throw Error(ErrorKind::Argument, std::string("--system: ") + e.what());
    }
  }
  note_generation_defaults(defaults);

  SessionOptions so;
  so.n_ctx = n_ctx;
  Session session(model, so);
  // Speculative decoding (--prompt-lookup, --draft-model): one drafter across the turns.
  std::unique_ptr<Speculator> spec;
  if (g.speculative.enabled()) spec = std::make_unique<Speculator>(g.speculative, *model, n_ctx);
  ojson messages = system;
  std::vector<int32_t> cached;  // the tokens whose keys and values the session holds
  bool at_line_start = true;
  auto show = [&](std::string_view t) {
    if (t.empty()) return;
    write_stdout(t);
    at_line_start = t.back() == '\n';
  };
  auto note = [&](const std::string& text) {
    std::fprintf(stderr, "%sminigpt: %s\n", at_line_start ? "" : "\n", text.c_str());
    at_line_start = true;
  };
  catch_interrupts();

  for (;;) {
    if (!at_line_start) show("\n");
    std::string line;
    if (!read_turn_line("> ", line, show)) break;
    at_line_start = true;
    if (is_blank(line)) continue;  // a stray Enter costs no reply and leaves the conversation as it is
    if (line == "/reset") {
      messages = system;
      cached.clear();
      session.reset();
      note("the conversation is cleared");
      continue;
    }
    ojson next = messages;
    next.push_back({{"role", "user"}, {"content", line}});
    std::string prompt;
    std::vector<int32_t> ids;
    try {
      prompt = tmpl->render(next, /*add_generation_prompt=*/true);
      // As apply_chat_template(tokenize=True): the template writes the special tokens, none is added.
      ids = tok.encode(prompt, /*allow_special=*/true);
    } catch (const Error& e) {
      note(std::string(e.what()) + " (the line was not added)");  // a refused conversation, invalid UTF-8
      continue;
    }
    if (ids.empty()) {
      note("the chat template rendered an empty prompt: there is nothing to reply to");
      continue;
    }
    if (int64_t(ids.size()) >= n_ctx) {
      note("the conversation with that line is " + std::to_string(ids.size()) +
           " tokens, and the context of " + std::to_string(n_ctx) + " has room for " +
           std::to_string(n_ctx - 1) +
           " and a reply: the line was not added (/reset clears the conversation" +
           (n_ctx < c.n_ctx ? "; -c enlarges the context)" : ")"));
      continue;
    }
    // The cache keeps what it shares with the new rendering; at least the last token is evaluated again, for
    // the logits of the reply's first token.
    // (0 where a windowed layer's ring no longer holds that prefix: Session::keepable.)
    const size_t keep =
        size_t(session.keepable(0, int64_t(std::min(common_prefix(cached, ids), ids.size() - 1))));
    session.keep(0, int64_t(keep));
    cached.assign(ids.begin(), ids.end());
    std::span<const float> logits =
        session.eval(std::span<const int32_t>(ids.data() + keep, ids.size() - keep));
    if (spec) spec->prepare(0, ids);
    GenerateCallbacks cb;
    cb.on_text = show;
    Generator gen(c, &tok, g, ids, cb);
    bool going = gen.push(logits);
    while (going) {
      if (g_interrupts.load() > 0) {
        gen.finish(StopReason::Cancelled);
        break;
      }
      if (session.n_past() == n_ctx) {
        gen.finish(StopReason::Context);
        break;
      }
      if (spec) {
        going = spec->step(session, 0, gen);
      } else {
        const int32_t t = gen.next();
        going = gen.push(session.eval(std::span<const int32_t>(&t, 1)));
      }
    }
    // What the cache holds: the rendering and the reply's tokens evaluated so far.
    cached.assign(gen.history().begin(), gen.history().begin() + ptrdiff_t(session.n_past()));
    const GenerateResult& r = gen.result();
    if (log) {
      log << ojson{{"prompt", prompt},
                   {"tokens", ids.size()},
                   {"kept", keep},
                   {"evaluated", ids.size() - keep},
                   {"reply", r.text}}
                 .dump(-1, ' ', false, ojson::error_handler_t::replace)
          << "\n"
          << std::flush;
    }
    messages = std::move(next);
    messages.push_back({{"role", "assistant"}, {"content", r.text}});
    if (r.reason == StopReason::Context) {
      note("the context of " + std::to_string(n_ctx) +
           " tokens is full: the reply ends here (/reset clears the conversation)");
    }
  }
  if (!at_line_start) show("\n");
  return 0;
}

const bool registered_chat = register_command(
    "chat",
    "Talk with a chat model over its chat template: /reset clears the history, Ctrl-C stops a reply, "
    "Ctrl-D ends (docs/chat.md)",
    [](CLI::App& app) {
      auto o = std::make_shared<ChatCliOptions>();
      add_model_options(app, o->model, false);
      add_tokenizer_option(app, o->model.tokenizer);
      app.add_option_function<std::string>(
          "-s,--system", [o](const std::string& s) { o->system = s, o->system_given = true; },
          "The system prompt: the conversation's first message (kept by /reset)");
      app.add_option("--chat-template", o->chat_template,
                     "A Jinja chat template file to use instead of the model's (for a model without one)")
          ->check(nonempty_path());
      add_sampling_flags(app, *o,
                         "Tokens per reply at most (default: until the end of the turn or a full context)");
      add_constraint_flags(app, o->constraint);
      add_speculative_flags(app, o->speculative);
      app.add_option_function<int64_t>(
          "-c,--ctx-size", [o](const int64_t& c) { o->ctx_size = c; },
          "Context size in tokens, the KV cache's length (default: the model's context, at most 4096; 0 = "
          "the model's whole context)");
      app.add_option(
             "--prompt-log", o->prompt_log,
             "Append to FILE, each turn, a JSON line with the prompt the template rendered, the tokens kept "
             "from the cache and evaluated, and the reply")
          ->check(nonempty_path());
      return [o, &app] {
        for (const auto& b : o->logit_bias) o->gen.sampling.logit_bias.push_back(parse_logit_bias(b));
        return run_chat(*o, flags_given(app));
      };
    });

}  // namespace
}  // namespace minigpt::cli
