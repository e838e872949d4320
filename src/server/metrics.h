// server/metrics.h — Prometheus metrics for GET /metrics (text exposition format 0.0.4).
//
// Names follow vLLM's with the prefix `hindsight:`, every series labelled
// model_name="<served name>". Latency histograms (time to first token, inter-token latency,
// end-to-end latency, queue time) are observed by the HTTP layer from event timestamps;
// engine gauges and counters are copied from an EngineStats snapshot at render time; HTTP
// counters (responses by status, requests inside a handler) are kept here. Thread-safe: one
// mutex around the histograms and status counts (a few ns per observation, contention is
// per token at most), an atomic for the active-request gauge.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hs::server {

// A Prometheus histogram: per-bucket counts (rendered cumulative), sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double v);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Appends the _bucket/_sum/_count lines; `labels` is `key="value"` pairs without braces.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1] per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// vLLM's bucket boundaries (seconds).
const std::vector<double>& ttft_buckets();
const std::vector<double>& itl_buckets();
const std::vector<double>& request_latency_buckets();

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  void observe_e2e(double seconds);
  void observe_queue(double seconds);
  void count_http_response(int status);

  // Requests inside a handler (or a streaming response still being written).
  void http_request_begin() { active_.fetch_add(1, std::memory_order_relaxed); }
  void http_request_end() { active_.fetch_sub(1, std::memory_order_relaxed); }
  int http_requests_active() const { return active_.load(std::memory_order_relaxed); }

  // The whole exposition; `engine` null while the model loads (engine series are omitted).
  std::string render(const EngineStats* engine) const;

 private:
  std::string labels_;  // model_name="..."
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_;
  std::map<int, uint64_t> http_status_;  // HTTP status → responses
  std::atomic<int> active_{0};
};

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string escape_label_value(const std::string& v);

}  // namespace hs::server
