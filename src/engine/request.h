// engine/request.h — what a client asks of the engine, and the events it gets back.
//
// The HTTP layer turns JSON into a RequestParams (token ids, sampling, stop strings) and
// submits it; the engine thread pushes RequestEvents into the request's RequestChannel as
// tokens are produced; the HTTP layer pops them and writes SSE chunks or one JSON body.
// No JSON or HTTP types here (ARCHITECTURE.md: they never cross into engine/). The channel
// is a mutex + condition variable queue: O(1) per event, one event per request per step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/token_constraint.h"

namespace hs {

struct RequestParams {
  std::vector<int32_t> prompt;     // token ids, already templated and tokenized
  int max_tokens = 16;             // generated tokens at most (>= 1)
  SamplingParams sampling;
  std::vector<std::string> stop;   // stop strings, not included in the output text
  bool ignore_eos = false;
  int logprobs = -1;               // -1: none; k >= 0: chosen token's logprob + top k
  double timeout_s = 0;            // 0: none; else the request is aborted after this long
  std::shared_ptr<const TokenGrammar> grammar;  // null: unconstrained; else each step is masked by it
};

enum class EventFinish : uint8_t {
  kNone,       // more events follow
  kLength,     // max_tokens reached
  kStop,       // stop string
  kEos,        // end-of-generation token
  kCancelled,  // Engine::cancel (client went away)
  kTimeout,    // RequestParams::timeout_s passed
  kError,      // engine failure; `error` says what
};
// OpenAI's finish_reason for a finished request ("length" | "stop" | "abort" | "error").
const char* event_finish_name(EventFinish f);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;                             // log softmax of the raw model logits
  std::vector<std::pair<int32_t, float>> top;    // [k] (token, logprob), best first
};

struct RequestUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache
};

using SteadyTime = std::chrono::steady_clock::time_point;

// One step's output for one request.
struct RequestEvent {
  std::vector<int32_t> tokens;          // tokens produced this step (usually one)
  std::string text;                     // text that became final this step (may be empty)
  std::vector<TokenLogprob> logprobs;   // [tokens.size()] when logprobs >= 0
  EventFinish finish = EventFinish::kNone;
  std::string error;                    // kError only
  std::string stop;                     // kStop only: the stop string that ended the output
  RequestUsage usage;                   // filled on the final event
  SteadyTime time;                      // when the engine produced it
  int n_preemptions = 0;                // final event: times the request was preempted
  SteadyTime first_scheduled;           // final event: when it first got compute (queue time)
};

// Engine → the HTTP layer. Thread-safe. A reader either pops with a wait, or installs a
// listener (set_listener) that every push calls after the event is queued — on the engine's
// thread, so it must be cheap and must not block (the HTTP transport posts a wake-up to the
// connection's strand and pops there without waiting).
class RequestChannel {
 public:
  using Listener = std::function<void()>;
  void push(RequestEvent ev) {
    std::shared_ptr<const Listener> listener;
    {
      std::lock_guard lk(mu_);
      q_.push_back(std::move(ev));
      listener = listener_;
    }
    cv_.notify_one();
    if (listener && *listener) (*listener)();
  }
  // Waits up to `timeout` for an event; false when none arrived.
  bool pop(RequestEvent& out, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return false;
    out = std::move(q_.front());
    q_.pop_front();
    return true;
  }
  // Called after every later push (null: none). Events queued before are not announced: pop
  // them after installing it.
  void set_listener(Listener fn) {
    auto l = fn ? std::make_shared<const Listener>(std::move(fn)) : nullptr;
    std::lock_guard lk(mu_);
    listener_ = std::move(l);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> q_;
  std::shared_ptr<const Listener> listener_;
};

}  // namespace hs
