// minigpt serve: the OpenAI-compatible HTTP server (src/server/server.h).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>
#include <type_traits>

#include "chat/chat_template.h"
#include "command.h"
#include "common.h"
#include "cpu/cpu.h"
#include "io/io.h"
#include "minigpt/error.h"
#include "minigpt/generate.h"
#include "minigpt/generation_config.h"
#include "server/server.h"
#include "speculative_flags.h"

namespace minigpt::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<int> g_signals{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free counter");

// Request defaults given on the command line (llama-server's sampling flags): they win over the model's
// generation_config.json / general.sampling.*, and a request's own fields win over them.
struct ServeSampling {
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<int64_t> top_k, repeat_last_n;
};

struct ServeCliOptions {
  ModelOptions model;
  server::ServerOptions server;
  std::optional<int64_t> ctx_size;
  std::vector<std::string> aliases;  // --alias, each time given: the first is the name /v1/models lists
  std::string chat_template;         // --chat-template FILE
  ServeSampling sampling;
  SpeculativeFlags speculative;          // --prompt-lookup, --draft-model, --draft-max ...
  std::optional<int64_t> cache_ram_mib;  // --cache-ram; default: default_cache_ram()
};

// llama-server's 8192 MiB, but at most a quarter of the machine's memory: the cache is a cache, never the
// reason the machine swaps.
size_t default_cache_ram() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const size_t mib = size_t(1) << 20, want = 8192 * mib;
  if (pages <= 0 || page <= 0) return want;
  return std::min(want, size_t(pages) * size_t(page) / 4);
}

// The flags over the file's defaults; a flag also makes the file's unusable value of that setting moot.
void apply_sampling_flags(const ServeSampling& f, GenerationDefaults& gd) {
  SamplingParams check;  // the flags' values, refused as generate refuses them
  bool any = false;
  const auto set = [&](const char* name, auto& field, const auto& flag, auto& param) {
    if (!flag) return;
    field = *flag;
    param = *flag;
    any = true;
    std::erase_if(gd.unusable, [&](const auto& u) { return u.first == name; });
  };
  set("temperature", gd.temperature, f.temperature, check.temperature);
  if (f.temperature) gd.do_sample.reset();  // the flag's temperature, as generate's flag wins over do_sample
  set("top_k", gd.top_k, f.top_k, check.top_k);
  set("top_p", gd.top_p, f.top_p, check.top_p);
  set("min_p", gd.min_p, f.min_p, check.min_p);
  set("repetition_penalty", gd.repetition_penalty, f.repetition_penalty, check.repetition_penalty);
  set("repeat_last_n", gd.repeat_last_n, f.repeat_last_n, check.repeat_last_n);
  set("presence_penalty", gd.presence_penalty, f.presence_penalty, check.presence_penalty);
  set("frequency_penalty", gd.frequency_penalty, f.frequency_penalty, check.frequency_penalty);
  check.validate();
  if (any) gd.source = gd.source.empty() ? "the command line" : gd.source + " and the command line";
}

int run_serve(ServeCliOptions& o) {
  // SIGINT and SIGTERM only count (the handler may run on any thread, OpenBLAS's included); a watcher
  // thread acts on the count.
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_signals.fetch_add(1); };
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const auto dir = resolve_model_dir(o.model);
  const ModelSource source = ModelSource::open(dir);  // classified, a GGUF parsed, once for every reader
  check_tokenizer_source(o.model.tokenizer, source);
  const LoadOptions lo = load_options(o.model);
  auto model = Model::load(source, lo);
  Tokenizer tok = load_tokenizer(o.model.tokenizer, source, model->config().n_vocab);
  server::ServerOptions so = o.server;
  so.n_ctx = context_size(o.ctx_size, model->config().n_ctx);
  so.speculative = speculative_options(o.speculative, lo, model->config().n_vocab);
  so.cache_ram = o.cache_ram_mib ? size_t(*o.cache_ram_mib) << 20 : default_cache_ram();
  so.model_id = !o.aliases.empty() ? o.aliases.front() : fs::path(dir).lexically_normal().filename().string();
  if (so.model_id.empty()) so.model_id = fs::path(dir).lexically_normal().parent_path().filename().string();
  so.model_aliases = o.aliases;
  // What a seed's tokens depend on: this build, the back-end and, on the CPU, the kernels chosen.
  so.system_fingerprint = kVersion;
  std::replace(so.system_fingerprint.begin(), so.system_fingerprint.end(), ' ', '-');
  so.system_fingerprint += "-" + model->backend().name();
  if (model->backend().device() == Device::Host) so.system_fingerprint += "-" + cpu_info().kernel_level;
  so.chat_template = o.chat_template.empty() ? load_chat_template(source, tok)
                                             : load_chat_template_file(o.chat_template, source, tok);
  so.generation_defaults = read_generation_defaults(source);
  apply_sampling_flags(o.sampling, so.generation_defaults);
  const GenerationDefaults& gd = so.generation_defaults;
  if (const std::string d = gd.describe(); !d.empty()) {
    std::fprintf(stderr,
                 "minigpt: %s: %s (for requests that leave them out; max_new_tokens and max_length "
                 "are generate's)\n",
                 gd.source.c_str(), d.c_str());
  }
  for (const auto& [name, message] : gd.unusable) {
    std::fprintf(stderr, "minigpt: %s (a request that leaves %s out gets a 500 saying so)\n", message.c_str(),
                 name.c_str());
  }
  if (!gd.not_applied.empty()) {
    std::string names;
    for (const std::string& n : gd.not_applied) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "minigpt: %s: not applied: %s (transformers applies them: its tokens may differ)\n",
                 gd.source.c_str(), names.c_str());
  }
  server::Server srv(model, std::move(tok), so);
  const int port = srv.bind();

  std::atomic<bool> done{false};
  std::thread watcher([&] {
    int seen = 0;
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int now = g_signals.load();
      if (now == seen) continue;
      if (seen++ == 0) {
        std::fprintf(
            stderr,
            "minigpt: stopping: no new requests; finishing the running ones (again to cancel them)\n");
        srv.stop(false);
      } else {
        std::fprintf(stderr, "minigpt: stopping: cancelling the running requests\n");
        srv.stop(true);
      }
    }
  });
  // An IPv6 address goes in brackets in a URL (RFC 3986): http://[::1]:8080. The URL is the API's base URL,
  // what an OpenAI client takes (base_url): its paths are /v1/chat/completions and so on.
  const std::string host = so.host.find(':') != std::string::npos ? "[" + so.host + "]" : so.host;
  std::string names = so.model_id;
  for (size_t i = 1; i < o.aliases.size(); ++i) names += (i == 1 ? " (also " : ", ") + o.aliases[i];
  if (o.aliases.size() > 1) names += ")";
  // The context is the server's: a model trained for more says how to have it.
  const int64_t trained = model->config().n_ctx;
  const std::string ctx = std::to_string(so.n_ctx) +
                          (so.n_ctx < trained ? " of the model's " + std::to_string(trained) + ": -c " +
                                                    std::to_string(trained) + " for all of it"
                                              : "");
  std::fprintf(stderr, "minigpt: serving %s at http://%s:%d/v1 (%lld slots, context %s)\n", names.c_str(),
               host.c_str(), port, (long long)so.n_parallel, ctx.c_str());
  if (so.cache_ram > 0 && srv.prompt_cache_bytes() == 0) {
    std::fprintf(
        stderr,
        "minigpt: prompt cache: off: this model's keys and values cannot be exported on the %s backend "
        "(a windowed layer keeps only its last positions, or the backend cannot); each slot keeps its "
        "own prompt\n",
        model->backend().name().c_str());
  } else if (so.cache_ram > 0) {
    std::fprintf(stderr, "minigpt: prompt cache: up to %s of host memory (--cache-ram)\n",
                 format_bytes(so.cache_ram).c_str());
  }
  srv.run();
  done = true;
  watcher.join();
  std::fprintf(stderr, "minigpt: stopped\n");
  return 0;
}

const bool registered_serve =
    register_command("serve", "Serve the model over HTTP (OpenAI-compatible API)", [](CLI::App& app) {
      auto o = std::make_shared<ServeCliOptions>();
      add_model_options(app, o->model, false);
      add_speculative_flags(app, o->speculative);
      add_tokenizer_option(app, o->model.tokenizer);
      app.add_option("--host", o->server.host, "Address to listen on (default 127.0.0.1: this machine only)")
          ->check(CLI::Validator(
              [](std::string& h) -> std::string {
                return h.empty() ? refuse(
                                       "the host is empty (127.0.0.1: this machine only; 0.0.0.0: every "
                                       "interface)")
                                 : std::string();
              },
              ""));
      app.add_option("--port", o->server.port, "Port (default 8080; 0: any free port, printed at start)")
          ->check(in_range(0, 65535));
      app.add_option("--parallel", o->server.n_parallel,
                     "Sequences decoded together, each with its own KV cache (default 4; -np N as "
                     "llama-server spells it)")
          ->check(in_range(1, 256));
      app.add_option_function<int64_t>(
          "-c,--ctx-size", [o](const int64_t& c) { o->ctx_size = c; },
          "Context per sequence in tokens (default: the model's, at most 4096; 0 = the model's whole "
          "context). Unlike llama-server's -c, not divided among the slots");
      app.add_option("-b,--batch-size", o->server.batch_size,
                     "Prompt tokens per forward step in all, shared by the prompts being prefilled (default "
                     "256); decoding sequences add one each")
          ->check(in_range(1, 8192));
      app.add_option("--max-queue", o->server.max_queue,
                     "Choices that may wait for a slot; beyond it requests get 503 (default 64)")
          ->check(in_range(1, 100000));
      app.add_option("--cache-ram", o->cache_ram_mib,
                     "Host memory in MiB for the prompt cache shared by the slots and requests (default "
                     "8192, at most a quarter of the machine's memory; 0: off)")
          ->check(in_range(0, int64_t(1) << 30));
      app.add_option("--max-body", o->server.max_body, "Largest request body in bytes (default 1 MiB)")
          ->check(in_range(64, int64_t(1) << 30));
      // An empty key ("--api-key $KEY" with KEY unset) would have served without any key, without a word; a
      // space or a control character cannot be sent in an Authorization header (clients trim it away).
      app.add_option("--api-key", o->server.api_key,
                     "Require \"Authorization: Bearer KEY\" on every endpoint but /health")
          ->check(CLI::Validator(
              [](std::string& k) -> std::string {
                if (k.empty()) return refuse("the key is empty (leave --api-key out to serve without a key)");
                for (unsigned char c : k) {
                  if (c <= 0x20 || c == 0x7f) {
                    return refuse(
                        "the key holds a space or a control character, which an Authorization header cannot "
                        "carry");
                  }
                }
                return std::string();
              },
              ""));
      app.add_option("--allowed-origins", o->server.allowed_origins,
                     "Web pages of these origins may call the API from a browser (CORS), comma-separated: "
                     "scheme://host[:port], null (a file:// page) or * (any); default none")
          ->delimiter(',')
          ->check(CLI::Validator(
              [](std::string& v) {
                const std::string why = server::origin_problem(v);
                return why.empty() ? why : refuse(why);
              },
              "ORIGIN"));
      app.add_option("--chat-template", o->chat_template,
                     "A Jinja chat template file for /v1/chat/completions, instead of the model's own (for a "
                     "model without one)")
          ->check(nonempty_path());
      app.add_option("--alias", o->aliases,
                     "A name requests may give as \"model\" (another name is a 404); the first is the one "
                     "/v1/models lists (default: the model's file or folder name). Repeatable")
          ->expected(1)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
          ->check(CLI::Validator(
              [](std::string& a) -> std::string {
                return a.empty() ? refuse("the alias is empty") : std::string();
              },
              ""));
      app.add_flag("-v,--verbose", o->server.verbose,
                   "Log each request's model, length and sampling settings with its access line, and "
                   "/health and /metrics requests too");
      // Request defaults, as llama-server's sampling flags (a request's own field wins)
      const auto opt = [&](const char* names, auto& field, const char* what) {
        using T = typename std::remove_reference_t<decltype(field)>::value_type;
        app.add_option_function<T>(
               names, [&field](const T& v) { field = v; }, what)
            ->group("Request defaults");
      };
      ServeSampling& s = o->sampling;
      opt("--temperature,--temp", s.temperature,
          "For requests without temperature (default: the model's, else 1)");
      opt("--top-k", s.top_k, "For requests without top_k (default: the model's, else 0 = off)");
      opt("--top-p", s.top_p, "For requests without top_p (default: the model's, else 1)");
      opt("--min-p", s.min_p, "For requests without min_p (default: the model's, else 0)");
      opt("--repetition-penalty,--repeat-penalty", s.repetition_penalty,
          "For requests without repetition_penalty (default: the model's, else 1 = off)");
      opt("--repeat-last-n", s.repeat_last_n,
          "For requests without repeat_last_n: the repetition penalty's window (default: the model's, else "
          "-1 "
          "= the whole sequence)");
      opt("--presence-penalty", s.presence_penalty, "For requests without presence_penalty (default 0)");
      opt("--frequency-penalty", s.frequency_penalty, "For requests without frequency_penalty (default 0)");
      return [o] { return run_serve(*o); };
    });

}  // namespace
}  // namespace minigpt::cli
