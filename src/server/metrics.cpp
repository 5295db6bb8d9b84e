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
  line("# HELP minigpt_requests_total HTTP requests answered, by path and status.");
  line("# TYPE minigpt_requests_total counter");
  {
    std::lock_guard<std::mutex> l(metrics_m);
    for (const auto& [k, v] : requests) {
      line("minigpt_requests_total{path=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(v));
    }
  }
  SchedulerStats& s = sched->stats();
  line("# HELP minigpt_prompt_tokens_total Prompt tokens evaluated.");
  line("# TYPE minigpt_prompt_tokens_total counter");
  line("minigpt_prompt_tokens_total " + std::to_string(s.prompt_tokens.load()));
  line("# HELP minigpt_prompt_tokens_cached_total Prompt tokens not evaluated: a slot's cache held them.");
  line("# TYPE minigpt_prompt_tokens_cached_total counter");
  line("minigpt_prompt_tokens_cached_total " + std::to_string(s.prompt_tokens_cached.load()));
  line(
      "# HELP minigpt_prompt_tokens_shared_total Prompt tokens not evaluated: another choice of the request "
      "evaluated the same prompt (n > 1).");
  line("# TYPE minigpt_prompt_tokens_shared_total counter");
  line("minigpt_prompt_tokens_shared_total " + std::to_string(s.prompt_tokens_shared.load()));
  line("# HELP minigpt_generated_tokens_total Tokens generated.");
  line("# TYPE minigpt_generated_tokens_total counter");
  line("minigpt_generated_tokens_total " + std::to_string(s.generated_tokens.load()));
  line("# HELP minigpt_steps_total Forward steps run (each batches every running sequence).");
  line("# TYPE minigpt_steps_total counter");
  line("minigpt_steps_total " + std::to_string(s.steps.load()));
  line("# HELP minigpt_queue_depth Choices waiting for a slot.");
  line("# TYPE minigpt_queue_depth gauge");
  line("minigpt_queue_depth " + std::to_string(s.queued.load()));
  line("# HELP minigpt_slots_busy Slots generating.");
  line("# TYPE minigpt_slots_busy gauge");
  line("minigpt_slots_busy " + std::to_string(s.busy.load()));
  line("# HELP minigpt_slots_total Slots (-np).");
  line("# TYPE minigpt_slots_total gauge");
  line("minigpt_slots_total " + std::to_string(o.n_parallel));
  std::lock_guard<std::mutex> l(s.m);
  for (const auto& [name, help, h] :
       {std::tuple<const char*, const char*, const Histogram*>{
            "minigpt_time_to_first_token_seconds", "From a request's arrival to its first token.", &s.ttft},
        {"minigpt_inter_token_latency_seconds", "Between two tokens of one choice.", &s.itl}}) {
    line(std::string("# HELP ") + name + " " + help);
    line(std::string("# TYPE ") + name + " histogram");
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
