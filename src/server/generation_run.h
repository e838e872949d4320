// server/generation_run.h — the n engine requests behind one OpenAI request.
//
// A completion with n choices is n engine requests (choice i samples with seed + i). A
// GenerationRun submits them, merges their events by choice index, observes the latency
// histograms from the events' timestamps (time to first token, inter-token latency, e2e,
// queue time), and guarantees that nothing is left running: choices without a final event
// are cancelled by cancel_all() or by the destructor. Not thread-safe: one owner at a time (the
// worker that submits, then the connection's strand that polls with no wait after each wake
// from set_listener). Cost: one channel pop per event.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/metrics.h"

namespace hs::server {

struct ChoiceEvent {
  int index = 0;  // the choice
  RequestEvent ev;
};

// Whether an event ends its request without a normal finish reason.
inline bool is_failure(EventFinish f) {
  return f == EventFinish::kCancelled || f == EventFinish::kTimeout || f == EventFinish::kError;
}
// The error a client sees for a failed request (500 error, 504 timeout, 503 cancelled).
ApiError failure_error(const RequestEvent& ev);
// The error a client sees when the engine refuses a request (400, 429, 503).
ApiError submit_error(const SubmitError& e, const char* prompt_param);

class GenerationRun {
 public:
  GenerationRun(Engine& engine, ServerMetrics& metrics, SteadyTime arrival);
  ~GenerationRun();  // cancels every choice that has not finished
  GenerationRun(const GenerationRun&) = delete;
  GenerationRun& operator=(const GenerationRun&) = delete;

  // Submits one engine request per choice, in order. When one is refused, the ones already
  // submitted are cancelled and the error is returned.
  std::optional<ApiError> submit(std::vector<RequestParams> choices, const char* prompt_param);

  // Appends the events available now (after waiting up to `wait` when none is).
  void poll(std::vector<ChoiceEvent>& out, std::chrono::milliseconds wait);
  bool finished() const { return n_open_ == 0; }
  int n() const { return static_cast<int>(choices_.size()); }
  // Cancels every open choice (client gone, one choice failed, server stopping). Their
  // final events may still arrive; nobody needs to read them.
  void cancel_all();
  // `fn` is called (on the engine's thread) after every event pushed to any choice from now on;
  // cleared by the destructor. Poll after installing it: earlier events are not announced.
  void set_listener(const std::function<void()>& fn);

 private:
  struct Choice {
    uint64_t id = 0;
    std::shared_ptr<RequestChannel> channel;
    bool done = false;
    bool got_token = false;
    SteadyTime last_token;
  };
  void observe(Choice& c, const RequestEvent& ev);

  Engine& engine_;
  ServerMetrics& metrics_;
  SteadyTime arrival_;
  std::vector<Choice> choices_;  // [n]
  int n_open_ = 0;
};

}  // namespace hs::server
