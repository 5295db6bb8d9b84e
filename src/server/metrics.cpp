// The Prometheus text of GET /metrics: the requests answered (counted here, by route and status), the
// Scheduler's token and step counters, its gauges and its latency histograms.
#include <charconv>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

#include "server/server_impl.h"

namespace minigpt::server {

void Server::Impl::count_request(const std::string& request_path, int status) {
  static const char* kKnown[] = {
      "/v1/completions", "/v1/chat/completions", "/v1/models",     "/health", "/metrics",
      "/tokenize",       "/detokenize",          "/tokenizer_info"};
  std::string path = "other";
  for (const char* k : kKnown) {
    // the endpoints without /v1 count as theirs; /v1/models/ID as /v1/models
    const std::string_view v1(k);
    if (request_path == k || (v1.starts_with("/v1/") && request_path == v1.substr(3)) ||
        (v1 == "/v1/models" &&
         (request_path.starts_with("/v1/models/") || request_path.starts_with("/models/"))))
      path = k;
  }
  std::lock_guard<std::mutex> l(metrics_m);
  ++requests[{path, status}];
}

std::string Server::Impl::metrics_text() {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  // The shortest text that reads back as the same double (0.025, not %.17g's 0.025000000000000001), as
  // Prometheus' own clients print bucket bounds and sums.
  auto num = [](double x) {
    char b[64];
    const auto r = std::to_chars(b, b + sizeof b, x);
    return std::string(b, r.ptr);
  };
  // Each metric's HELP and TYPE lines, as the Prometheus text format puts them before its samples.
  auto header = [&](const std::string& name, const char* type, const std::string& help) {
    line("# HELP " + name + " " + help);
    line("# TYPE " + name + " " + type);
  };
  auto scalar = [&](const std::string& name, const char* type, const std::string& help, int64_t value) {
    header(name, type, help);
    line(name + " " + std::to_string(value));
  };
  header("minigpt_requests_total", "counter", "HTTP requests answered, by path and status.");
  {
    std::lock_guard<std::mutex> l(metrics_m);
    for (const auto& [k, v] : requests) {
      line("minigpt_requests_total{path=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(v));
    }
  }
  SchedulerStats& s = sched->stats();
  scalar("minigpt_prompt_tokens_total", "counter", "Prompt tokens evaluated.", s.prompt_tokens.load());
  scalar("minigpt_prompt_tokens_cached_total", "counter",
         "Prompt tokens not evaluated: a slot's cache or the host prompt cache held them.",
         s.prompt_tokens_cached.load());
  scalar("minigpt_prompt_tokens_shared_total", "counter",
         "Prompt tokens not evaluated: another choice of the request evaluated the same prompt (n > 1).",
         s.prompt_tokens_shared.load());
  scalar("minigpt_prompt_cache_hits_total", "counter",
         "Prompts the host prompt cache (--cache-ram) gave a prefix to, beyond what their slot held.",
         s.host_cache_hits.load());
  scalar(
      "minigpt_prompt_cache_misses_total", "counter",
      "Prompts that might have used the host prompt cache and found nothing more there than in their slot.",
      s.host_cache_misses.load());
  scalar("minigpt_prompt_cache_tokens_total", "counter",
         "Prompt tokens not evaluated: the host prompt cache held them (also in "
         "minigpt_prompt_tokens_cached_total).",
         s.host_cache_tokens.load());
  scalar("minigpt_prompt_cache_bytes", "gauge", "Bytes of keys and values the host prompt cache holds.",
         s.host_cache_bytes.load());
  scalar("minigpt_prompt_cache_max_bytes", "gauge",
         "The host prompt cache's limit (--cache-ram); 0: off, or this model's keys and values cannot be "
         "exported.",
         s.host_cache_max_bytes.load());
  scalar("minigpt_generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens.load());
  scalar("minigpt_draft_tokens_total", "counter", "Tokens drafted for speculative decoding.",
         s.draft_tokens.load());
  scalar("minigpt_draft_tokens_accepted_total", "counter",
         "Drafted tokens the model agreed with (each saved a forward step).", s.draft_tokens_accepted.load());
  scalar("minigpt_steps_total", "counter", "Forward steps run (each batches every running sequence).",
         s.steps.load());
  scalar("minigpt_queue_depth", "gauge", "Choices waiting for a slot.", s.queued.load());
  scalar("minigpt_slots_busy", "gauge", "Slots generating.", s.busy.load());
  scalar("minigpt_slots_total", "gauge", "Slots (-np).", o.n_parallel);
  std::lock_guard<std::mutex> l(s.m);
  for (const auto& [name, help, h] :
       {std::tuple<const char*, const char*, const Histogram*>{
            "minigpt_time_to_first_token_seconds", "From a request's arrival to its first token.", &s.ttft},
        {"minigpt_inter_token_latency_seconds", "Between two tokens of one choice.", &s.itl}}) {
    header(name, "histogram", help);
    for (size_t i = 0; i < h->bounds.size(); ++i) {
      line(std::string(name) + "_bucket{le=\"" + num(h->bounds[i]) + "\"} " + std::to_string(h->counts[i]));
    }
    line(std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(h->count));
    line(std::string(name) + "_sum " + num(h->sum));
    line(std::string(name) + "_count " + std::to_string(h->count));
  }
  return out;
}

}  // namespace minigpt::server
