// server/metrics.cpp — see metrics.h.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace hs::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  // First bucket whose upper bound is >= v (Prometheus buckets are `le`).
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds_[i], cum);
  }
  cum += counts_.back();
  fmt::format_to(std::back_inserter(out), "{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, cum);
  fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n", name, labels, sum_);
  fmt::format_to(std::back_inserter(out), "{}_count{{{}}} {}\n", name, labels, count_);
}

const std::vector<double>& ttft_buckets() {
  static const std::vector<double> b{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
                                     1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160., 640.0, 2560.0};
  return b;
}
const std::vector<double>& itl_buckets() {
  static const std::vector<double> b{0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                     0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
  return b;
}
const std::vector<double>& request_latency_buckets() {
  static const std::vector<double> b{0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                     30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + escape_label_value(model_name) + "\""),
      ttft_(ttft_buckets()),
      itl_(itl_buckets()),
      e2e_(request_latency_buckets()),
      queue_(request_latency_buckets()) {}

void ServerMetrics::observe_ttft(double s) { std::lock_guard lk(mu_); ttft_.observe(s); }
void ServerMetrics::observe_inter_token(double s) { std::lock_guard lk(mu_); itl_.observe(s); }
void ServerMetrics::observe_e2e(double s) { std::lock_guard lk(mu_); e2e_.observe(s); }
void ServerMetrics::observe_queue(double s) { std::lock_guard lk(mu_); queue_.observe(s); }
void ServerMetrics::count_http_response(int status) { std::lock_guard lk(mu_); ++http_status_[status]; }

std::string ServerMetrics::render(const EngineStats* engine) const {
  std::string out;
  auto it = std::back_inserter(out);
  auto head = [&](const char* name, const char* type, const char* help) {
    fmt::format_to(it, "# HELP hindsight:{} {}\n# TYPE hindsight:{} {}\n", name, help, name, type);
  };
  auto sample = [&](const char* name, const std::string& extra_labels, auto value) {
    fmt::format_to(it, "hindsight:{}{{{}{}}} {}\n", name, labels_, extra_labels, value);
  };
  {
    std::lock_guard lk(mu_);
    const std::pair<const char*, const Histogram*> hists[] = {
        {"time_to_first_token_seconds", &ttft_},
        {"inter_token_latency_seconds", &itl_},
        {"e2e_request_latency_seconds", &e2e_},
        {"request_queue_time_seconds", &queue_},
    };
    const char* helps[] = {"Time from request arrival to its first generated token.",
                           "Time between consecutive generated tokens of a request.",
                           "Time from request arrival to its last event.",
                           "Time from request arrival until it was first scheduled."};
    for (size_t i = 0; i < std::size(hists); ++i) {
      head(hists[i].first, "histogram", helps[i]);
      hists[i].second->render(out, std::string("hindsight:") + hists[i].first, labels_);
    }
    head("http_requests_total", "counter", "HTTP responses by status code.");
    for (const auto& [status, n] : http_status_) sample("http_requests_total", fmt::format(",status=\"{}\"", status), n);
  }
  head("http_requests_active", "gauge", "HTTP requests inside a handler or still streaming.");
  sample("http_requests_active", "", http_requests_active());
  if (!engine) return out;

  const EngineStats& s = *engine;
  head("num_requests_running", "gauge", "Requests holding KV and being computed.");
  sample("num_requests_running", "", s.running);
  head("num_requests_waiting", "gauge", "Requests queued, not yet running.");
  sample("num_requests_waiting", "", s.waiting);
  head("kv_cache_usage_perc", "gauge",
       "Fraction in use (1 = full): host = KV pages referenced by sequences, device = hot chunk slots holding a chunk.");
  sample("kv_cache_usage_perc", ",tier=\"host\"",
         s.kv_pages_total > 0 ? static_cast<double>(s.kv_pages_used) / static_cast<double>(s.kv_pages_total) : 0.0);
  sample("kv_cache_usage_perc", ",tier=\"device\"",
         s.device_slots_total > 0 ? static_cast<double>(s.device_slots_used) / static_cast<double>(s.device_slots_total)
                                  : 0.0);
  head("kv_pages_used", "gauge", "KV pages referenced by a sequence.");
  sample("kv_pages_used", "", s.kv_pages_used);
  head("kv_pages_total", "gauge", "KV pages in the pool.");
  sample("kv_pages_total", "", s.kv_pages_total);
  head("kv_pages_cached", "gauge", "Free KV pages still holding a reusable prefix.");
  sample("kv_pages_cached", "", s.kv_pages_cached);
  head("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  sample("prompt_tokens_total", "", s.prompt_tokens_total);
  head("generation_tokens_total", "counter", "Generated tokens.");
  sample("generation_tokens_total", "", s.generation_tokens_total);
  head("request_success_total", "counter", "Finished requests by finish reason.");
  // requests_finished is indexed by EventFinish; several map to one OpenAI reason.
  std::map<std::string, int64_t> by_reason{{"stop", 0}, {"length", 0}, {"abort", 0}, {"error", 0}};
  for (int f = 1; f < static_cast<int>(std::size(s.requests_finished)); ++f)
    by_reason[event_finish_name(static_cast<EventFinish>(f))] += s.requests_finished[f];
  for (const auto& [reason, n] : by_reason)
    sample("request_success_total", fmt::format(",finished_reason=\"{}\"", reason), n);
  head("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
  sample("prefix_cache_queries_total", "", s.prefix_cache_queries);
  head("prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  sample("prefix_cache_hits_total", "", s.prefix_cache_hits);
  head("num_preemptions_total", "counter", "Times a running request was preempted.");
  sample("num_preemptions_total", "", s.preemptions_total);
  head("kv_fetch_hits_total", "counter", "Selected chunks (not sinks or window) found in a device-tier hot slot.");
  sample("kv_fetch_hits_total", "", s.kv_fetch_hits);
  head("kv_fetch_misses_total", "counter", "Selected chunks (not sinks or window) fetched into a hot slot.");
  sample("kv_fetch_misses_total", "", s.kv_fetch_misses);
  head("kv_fetch_bytes_total", "counter", "Bytes the fetches into hot slots moved.");
  sample("kv_fetch_bytes_total", "", s.kv_fetch_bytes);
  head("kv_fetch_evictions_total", "counter", "Fetches that evicted another chunk from its hot slot.");
  sample("kv_fetch_evictions_total", "", s.kv_fetch_evictions);
  head("kv_leases_live", "gauge", "Sequences holding a lease on copies of their KV (device tier).");
  sample("kv_leases_live", "", s.kv_leases_live);
  head("state_slots_used", "gauge", "Recurrent-state slots held by running sequences (hybrid models; 0 otherwise).");
  sample("state_slots_used", "", s.state_slots_used);
  head("state_slots_total", "gauge", "Recurrent-state slots (hybrid models: the sequences that may run at once).");
  sample("state_slots_total", "", s.state_slots_total);
  head("state_checkpoints_used", "gauge", "Prefix-cache checkpoints of recurrent state holding a prefix's state.");
  sample("state_checkpoints_used", "", s.state_checkpoints_used);
  head("state_checkpoint_saves_total", "counter", "Recurrent-state checkpoints written by the prefix cache.");
  sample("state_checkpoint_saves_total", "", s.state_checkpoint_saves);
  head("state_checkpoint_restores_total", "counter", "Admitted requests that resumed from a recurrent-state checkpoint.");
  sample("state_checkpoint_restores_total", "", s.state_checkpoint_restores);
  head("engine_steps_total", "counter", "Engine steps run.");
  sample("engine_steps_total", "", s.steps_total);
  return out;
}

}  // namespace hs::server
