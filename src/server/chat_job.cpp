// server/chat_job.cpp — see chat_job.h.
#include "server/chat_job.h"

#include <spdlog/spdlog.h>

#include <random>
#include <utility>

#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hs::server {
namespace {

// A chat choice's text split into content and calls, as the request asked: parallel_tool_calls
// false keeps the first call.
ParsedToolOutput job_tool_calls(const Job& job, std::string_view text, uint64_t& ids) {
  ParsedToolOutput p = parse_tool_calls(text, job.tool_format, ids, job.tool_names, &job.tools);
  if (!job.parallel_tool_calls && p.calls.size() > 1) p.calls.resize(1);
  return p;
}

// One streaming response, pumped on the connection's strand after each wake-up from the
// engine (and after each write): writes what the engine produced since, never waits. Dropping
// it (end of the exchange, abort()) cancels whatever is still open.
class SseBody final : public AsyncBody {
 public:
  // The writer is made here, over this object's job and meta (which it may keep references to).
  SseBody(std::unique_ptr<GenerationRun> run, ResponseMeta meta, Job job, const ApiStyle& style)
      : run_(std::move(run)), meta_(std::move(meta)), job_(std::move(job)),
        writer_(style.make_writer(job_, meta_, run_->n())), n_(run_->n()) {}

  bool pump(HttpResponse&, std::string& out) override {
    if (!run_) return true;
    if (!started_) {
      started_ = true;
      writer_->start(out, n_);
    }
    events_.clear();
    run_->poll(events_, std::chrono::milliseconds(0));
    for (ChoiceEvent& ce : events_) {
      if (is_failure(ce.ev.finish)) {  // an error event, then the end
        run_->cancel_all();
        writer_->failure(out, failure_error(ce.ev));
        return true;
      }
      writer_->event(out, ce.index, ce.ev);
      if (ce.ev.finish != EventFinish::kNone) add_choice_usage(usage_, ce.ev.usage, ce.index == 0);
    }
    if (!run_->finished()) return false;
    writer_->end(out, usage_);
    return true;
  }

  void abort() noexcept override {
    if (!run_ || run_->finished()) return;
    spdlog::info("{}: stream ended before the answer (client gone or server stopping); cancelling", meta_.id);
    run_->cancel_all();
  }

 private:
  std::unique_ptr<GenerationRun> run_;
  ResponseMeta meta_;
  Job job_;
  std::unique_ptr<StreamWriter> writer_;
  int n_;
  bool started_ = false;
  UsageTotals usage_;
  std::vector<ChoiceEvent> events_;
};

// A non-streamed answer: collects every choice's events as they come, then fills the response
// with one body in the API's style.
class DeferredBody final : public AsyncBody {
 public:
  DeferredBody(std::unique_ptr<GenerationRun> run, ResponseMeta meta, Job job, ApiStyle style)
      : run_(std::move(run)), meta_(std::move(meta)), job_(std::move(job)), style_(std::move(style)),
        results_(static_cast<size_t>(run_->n())) {}

  bool pump(HttpResponse& res, std::string&) override {
    events_.clear();
    run_->poll(events_, std::chrono::milliseconds(0));
    for (ChoiceEvent& ce : events_) {
      ChoiceResult& r = results_[static_cast<size_t>(ce.index)];
      r.text += ce.ev.text;
      for (TokenLogprob& lp : ce.ev.logprobs) r.logprobs.push_back(std::move(lp));
      if (ce.ev.finish == EventFinish::kNone) continue;
      r.finish = ce.ev.finish;
      r.stop_sequence = std::move(ce.ev.stop);
      r.usage = ce.ev.usage;
      if (is_failure(ce.ev.finish) && !failure_) {
        failure_ = failure_error(ce.ev);
        run_->cancel_all();
      }
    }
    if (!run_->finished()) return false;
    if (failure_) {
      style_.send_error(res, *failure_);
      return true;
    }
    UsageTotals usage;
    for (size_t i = 0; i < results_.size(); ++i) add_choice_usage(usage, results_[i].usage, i == 0);
    uint64_t ids = call_id_seed();
    if (job_.chat)
      for (ChoiceResult& r : results_) split_tool_calls(job_, r, ids);
    send_json(res, 200, style_.body(job_, meta_, results_, usage));
    return true;
  }

  void abort() noexcept override {
    if (run_->finished()) return;
    spdlog::info("{}: client went away; cancelling", meta_.id);
    run_->cancel_all();
  }

 private:
  std::unique_ptr<GenerationRun> run_;
  ResponseMeta meta_;
  Job job_;
  ApiStyle style_;
  std::vector<ChoiceResult> results_;
  std::vector<ChoiceEvent> events_;
  std::optional<ApiError> failure_;
};

}  // namespace

MaybeError render_chat_prompt(const ServerState& st, const Json& messages, bool add_generation_prompt,
                              const Json& template_kwargs, std::string& out) {
  if (!st.model.chat_template)
    return invalid_request("this model has no chat template; use /v1/completions with a prompt", "messages");
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = st.bos_token;
  in.eos_token = st.eos_token;
  in.extra = template_kwargs;
  auto r = st.model.chat_template->render(in);
  if (!r.is_ok()) return invalid_request("chat template: " + r.status().message(), "messages");
  out = std::move(*r);
  return std::nullopt;
}

uint64_t call_id_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void split_tool_calls(const Job& job, ChoiceResult& r, uint64_t& ids) {
  if (job.tool_format == ToolCallFormat::kNone) return;
  if (!job.forced_prefix.empty()) r.text = job.forced_prefix + r.text;
  ParsedToolOutput p = job_tool_calls(job, r.text, ids);
  if (p.calls.empty()) return;
  r.text = std::move(p.content);
  r.tool_calls = std::move(p.calls);
}

PieceFn piece_fn(const Tokenizer& tok) {
  return [&tok](int32_t id) { return tok.token_to_piece(id); };
}

ToolStreamSplitter::ToolStreamSplitter(const Job* job) : job_(job) {
  if (job_) hold_ = job_->forced_prefix;  // a forced call's opening comes first
}

std::string ToolStreamSplitter::feed(std::string_view piece) {
  if (in_calls_) {
    calls_ += piece;
    return {};
  }
  std::string text = hold_ + std::string(piece);
  hold_.clear();
  const size_t open = find_tool_call_open(text, job_->tool_format);
  if (open != std::string::npos) {
    in_calls_ = true;
    calls_ = text.substr(open);
    if (open > 0) emitted_ = true;
    return text.substr(0, open);
  }
  if (!emitted_ && may_be_bare_call(text)) {
    hold_ = std::move(text);  // a JSON answer may be a call without its tags: decide at the end
    return {};
  }
  const size_t keep = tool_call_open_prefix(text, job_->tool_format);
  hold_ = text.substr(text.size() - keep);
  if (text.size() > keep) emitted_ = true;
  return text.substr(0, text.size() - keep);
}

ParsedToolOutput ToolStreamSplitter::finish(uint64_t& ids) {
  if (in_calls_ || !emitted_) return job_tool_calls(*job_, in_calls_ ? calls_ : hold_, ids);
  ParsedToolOutput p;
  p.content = std::move(hold_);
  return p;
}

MaybeError constrain(ServerState& st, const ResponseFormat& format, const GenerationOptions& gen, Job& job) {
  if (!format.constrained()) return std::nullopt;
  if (gen.ignore_eos)
    return invalid_request("'ignore_eos' cannot be combined with 'response_format' (the grammar ends the output)",
                           "ignore_eos");
  return compile_response_format(st.grammar(), format, job.grammar);
}

MaybeError prepare_chat_job(ServerState& st, ChatRequest cr, const ToolsRequest& tools, const ResponseFormat& format,
                            Job& job) {
  if (format.constrained() && tools.active())
    return invalid_request("'response_format' together with 'tools' is not supported (send tool_choice 'none' or no tools)",
                           "response_format");
  if (auto e = constrain(st, format, cr.gen, job)) return e;
  Json kwargs = cr.template_kwargs;
  if (!cr.assistant_prefill.empty() && tools.active() &&
      (tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed))
    return invalid_request("a final assistant message (prefilled answer) cannot be combined with a forced tool call "
                           "(the call must start the answer)",
                           "messages");
  if (tools.active()) {
    job.tool_format = st.model.chat_template ? tool_call_format_of(st.model.chat_template->source())
                                             : ToolCallFormat::kNone;
    if (job.tool_format == ToolCallFormat::kNone)
      return invalid_request("this model's chat template has no tool-call format hindsight can parse "
                             "(supported: Hermes <tool_call> JSON blocks as Qwen2.5 / Qwen3, <function=...> blocks as "
                             "Qwen3-Coder / Qwen3.5, JSON calls as Llama 3.1)",
                             "tools");
    if (cr.gen.logprobs >= 0) return invalid_request("'logprobs' together with 'tools' is not supported yet", "logprobs");
    if (!kwargs.is_object()) kwargs = Json::object();
    kwargs["tools"] = tools.tools;
    job.parallel_tool_calls = tools.parallel;
    job.tool_names = tools.names;
    job.tools = tools.tools;
    if (tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed) {
      if (!cr.add_generation_prompt)
        return invalid_request("'tool_choice' 'required' or a named function needs add_generation_prompt (the call "
                               "starts the assistant's answer)",
                               "tool_choice");
      if (auto forced = forced_tool_call(job.tool_format, tools)) {  // the arguments follow their schema
        if (cr.gen.ignore_eos) return invalid_request("'ignore_eos' cannot be combined with a forced tool call", "ignore_eos");
        if (auto e = compile_forced_tool_call(st.grammar(), *forced, job.grammar)) return e;
        job.forced_prefix = std::move(forced->prefix);
      }
    } else if (!cr.gen.ignore_eos) {  // auto: a call, once opened, follows its schema (ignore_eos: unconstrained)
      if (auto calls = auto_tool_calls(job.tool_format, tools))
        if (auto e = compile_auto_tool_calls(st.grammar(), *calls, job.grammar)) return e;
    }
  }
  std::string text;
  if (auto e = render_chat_prompt(st, cr.messages, cr.add_generation_prompt, kwargs, text)) return e;
  text += cr.assistant_prefill;
  text += job.forced_prefix;
  job.chat = true;
  job.gen = std::move(cr.gen);
  // Templates carry their own BOS; special-token text in them is recognised.
  job.prompt = st.model.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true);
  return std::nullopt;
}

void run_job(ServerState& st, const HttpRequest&, HttpResponse& res, const RouteContext& ctx, Job job,
             const ApiStyle& style) {
  const ServingModel& m = st.model;
  const char* prompt_param = job.chat ? "messages" : "prompt";
  int max_tokens = 0;
  if (auto e = resolve_max_tokens(job.gen, static_cast<int>(job.prompt.size()), m.max_model_len, job.chat, max_tokens))
    return style.send_error(res, *e);
  std::vector<RequestParams> params;
  params.reserve(static_cast<size_t>(job.gen.n));
  for (int i = 0; i < job.gen.n; ++i) {
    params.push_back(make_request_params(job.gen, job.prompt, max_tokens, i, st.cfg.request_timeout_s));
    params.back().grammar = job.grammar;
  }

  auto run = std::make_unique<GenerationRun>(*m.engine, st.metrics, ctx.arrival);
  if (auto e = run->submit(std::move(params), prompt_param)) {
    if (e->status == 429) res.set_header("Retry-After", "1");
    return style.send_error(res, *e);
  }
  ResponseMeta meta{random_hex_id(style.id_prefix), st.cfg.served_model_name, unix_seconds_now()};
  // From here the engine's events wake the connection, which pumps the body on its strand.
  if (ctx.wake) run->set_listener(ctx.wake);
  if (!job.gen.stream) {
    res.async = std::make_shared<DeferredBody>(std::move(run), std::move(meta), std::move(job), style);
    return;
  }
  res.status = 200;
  res.set_header("Content-Type", "text/event-stream");
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.async = std::make_shared<SseBody>(std::move(run), std::move(meta), std::move(job), style);
  res.stream = true;
}

}  // namespace hs::server
