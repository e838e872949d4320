// server/generation_run.cpp — see generation_run.h.
#include "server/generation_run.h"

#include <fmt/format.h>

#include <variant>

namespace hs::server {
namespace {

double seconds_between(SteadyTime a, SteadyTime b) {
  const double s = std::chrono::duration<double>(b - a).count();
  return s > 0 ? s : 0.0;
}

}  // namespace

ApiError failure_error(const RequestEvent& ev) {
  switch (ev.finish) {
    case EventFinish::kTimeout: return timeout_error("the request timed out before it finished");
    case EventFinish::kCancelled: return unavailable("the request was cancelled (the server is stopping)");
    default: return server_error(ev.error.empty() ? "the engine failed on this request" : "engine error: " + ev.error);
  }
}

ApiError submit_error(const SubmitError& e, const char* prompt_param) {
  switch (e.kind) {
    case SubmitError::kTooLong: return invalid_request(e.message, prompt_param);
    case SubmitError::kQueueFull: return server_overloaded(e.message.empty() ? "the server is overloaded" : e.message);
    case SubmitError::kShuttingDown: return unavailable(e.message.empty() ? "the server is shutting down" : e.message);
    case SubmitError::kInvalid: break;
  }
  return invalid_request(e.message);
}

GenerationRun::GenerationRun(Engine& engine, ServerMetrics& metrics, SteadyTime arrival)
    : engine_(engine), metrics_(metrics), arrival_(arrival) {}

GenerationRun::~GenerationRun() {
  cancel_all();
  for (Choice& c : choices_) c.channel->set_listener(nullptr);
}

void GenerationRun::set_listener(const std::function<void()>& fn) {
  for (Choice& c : choices_) c.channel->set_listener(fn);
}

std::optional<ApiError> GenerationRun::submit(std::vector<RequestParams> choices, const char* prompt_param) {
  choices_.reserve(choices.size());
  for (RequestParams& p : choices) {
    auto r = engine_.submit(std::move(p));
    if (auto* err = std::get_if<SubmitError>(&r)) {
      cancel_all();
      return submit_error(*err, prompt_param);
    }
    auto& s = std::get<Engine::Submitted>(r);
    choices_.push_back(Choice{s.id, std::move(s.channel)});
    ++n_open_;
  }
  return std::nullopt;
}

void GenerationRun::observe(Choice& c, const RequestEvent& ev) {
  if (!ev.tokens.empty()) {
    if (!c.got_token) {
      metrics_.observe_ttft(seconds_between(arrival_, ev.time));
      // Any further tokens of the same event came out together: zero gap between them.
      for (size_t i = 1; i < ev.tokens.size(); ++i) metrics_.observe_inter_token(0.0);
    } else {
      const double per = seconds_between(c.last_token, ev.time) / static_cast<double>(ev.tokens.size());
      for (size_t i = 0; i < ev.tokens.size(); ++i) metrics_.observe_inter_token(per);
    }
    c.got_token = true;
    c.last_token = ev.time;
  }
  if (ev.finish != EventFinish::kNone && ev.finish != EventFinish::kCancelled) {
    metrics_.observe_e2e(seconds_between(arrival_, ev.time));
    if (ev.first_scheduled != SteadyTime{}) metrics_.observe_queue(seconds_between(arrival_, ev.first_scheduled));
  }
}

void GenerationRun::poll(std::vector<ChoiceEvent>& out, std::chrono::milliseconds wait) {
  const size_t before = out.size();
  auto drain = [&](std::chrono::milliseconds w) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      RequestEvent ev;
      while (!c.done && c.channel->pop(ev, w)) {
        w = std::chrono::milliseconds(0);
        observe(c, ev);
        if (ev.finish != EventFinish::kNone) {
          c.done = true;
          --n_open_;
        }
        out.push_back(ChoiceEvent{static_cast<int>(i), std::move(ev)});
      }
    }
  };
  drain(std::chrono::milliseconds(0));
  if (out.size() != before || n_open_ == 0) return;
  // Nothing ready: wait on the open choices in turn, splitting the wait between them.
  const auto share = std::max(std::chrono::milliseconds(1), wait / std::max(1, n_open_));
  for (size_t i = 0; i < choices_.size() && out.size() == before; ++i) {
    Choice& c = choices_[i];
    RequestEvent ev;
    if (c.done || !c.channel->pop(ev, share)) continue;
    observe(c, ev);
    if (ev.finish != EventFinish::kNone) {
      c.done = true;
      --n_open_;
    }
    out.push_back(ChoiceEvent{static_cast<int>(i), std::move(ev)});
  }
  if (out.size() != before) drain(std::chrono::milliseconds(0));
}

void GenerationRun::cancel_all() {
  for (Choice& c : choices_) {
    if (c.done) continue;
    engine_.cancel(c.id);
    c.done = true;  // its final event is no longer awaited
    --n_open_;
  }
}

}  // namespace hs::server
