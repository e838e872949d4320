// server/completion_routes.cpp — POST /v1/chat/completions and POST /v1/completions.
//
// Both routes: parse + validate the body, build the prompt (chat: template then encode
// without extra BOS, special-token text recognised; completions: encode with BOS, or take
// the token ids as given), apply the context-length rule, submit n engine requests, then
// either wait for all of them (one JSON body) or stream SSE chunks from a chunked content
// provider. Either way the HTTP thread polls the client's socket every kPollInterval and
// cancels the engine requests of a client that went away, and a GenerationRun cancels
// whatever is still open when the response object dies, so no request outlives its client.
#include <spdlog/spdlog.h>

#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "server/connection_probe.h"
#include "server/generation_run.h"
#include "server/openai_response.h"
#include "server/routes.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hs::server {
namespace {

// The options and the prompt of one generation request, once parsed.
struct Job {
  bool chat = true;
  GenerationOptions gen;
  std::vector<int32_t> prompt;
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // chat with tools: how calls are written
  bool parallel_tool_calls = true;
  std::vector<std::string> tool_names;                 // the request's declared functions
  // tool_choice "required" / a named function: the opening of a call in the template's format
  // (tool_call_prefix), appended to the prompt as the start of the assistant's answer, so the
  // model can only continue a call; it is put back in front of the generated text for parsing.
  std::string forced_prefix;
  // response_format or a forced tool call under a grammar (structured_output.h): every choice's
  // tokens are masked by it.
  std::shared_ptr<const TokenGrammar> grammar;
};

// A request's call ids: call_<hex> from a per-request random start (unique in practice).
uint64_t call_id_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// A chat choice's text split into content and calls, as the request asked: parallel_tool_calls
// false keeps the first call.
ParsedToolOutput job_tool_calls(const Job& job, std::string_view text, uint64_t& ids) {
  ParsedToolOutput p = parse_tool_calls(text, job.tool_format, ids, job.tool_names);
  if (!job.parallel_tool_calls && p.calls.size() > 1) p.calls.resize(1);
  return p;
}

// The non-streamed choice's text split into content and calls (tools requests only).
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

// Appends one event's chunks for choice `index` to `out`; the final chunk carries the
// finish reason (failures are handled by the caller).
class ChunkWriter {
 public:
  ChunkWriter(const ResponseMeta& meta, const Job& job, PieceFn piece, int n)
      : meta_(meta),
        job_(job),
        piece_(std::move(piece)),
        text_offset_(static_cast<size_t>(n), 0),
        tools_(static_cast<size_t>(n)),
        ids_(call_id_seed()) {
    for (ToolStream& ts : tools_) ts.hold = job.forced_prefix;  // a forced call's opening comes first
  }

  void role_chunks(std::string& out, int n) const {
    for (int i = 0; i < n; ++i)
      out += sse_event(chat_chunk_json(meta_, i, Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr,
                                       job_.gen.include_usage));
  }

  void event_chunks(std::string& out, int index, const RequestEvent& ev) {
    if (job_.chat && job_.tool_format != ToolCallFormat::kNone) return tool_event_chunks(out, index, ev);
    const bool want_lp = job_.gen.logprobs >= 0 && !ev.logprobs.empty();
    const bool inc = job_.gen.include_usage;
    if (!ev.text.empty() || want_lp) {
      if (job_.chat) {
        Json lp = want_lp ? chat_logprobs_json(ev.logprobs, piece_) : Json(nullptr);
        out += sse_event(chat_chunk_json(meta_, index, Json{{"content", ev.text}}, std::move(lp), nullptr, inc));
      } else {
        Json lp = want_lp ? completion_logprobs_json(ev.logprobs, piece_, text_offset_[index]) : Json(nullptr);
        out += sse_event(completion_chunk_json(meta_, index, ev.text, std::move(lp), nullptr, inc));
      }
    }
    if (ev.finish != EventFinish::kNone && !is_failure(ev.finish)) {
      const char* reason = event_finish_name(ev.finish);
      out += job_.chat ? sse_event(chat_chunk_json(meta_, index, Json::object(), nullptr, reason, inc))
                       : sse_event(completion_chunk_json(meta_, index, "", nullptr, reason, inc));
    }
  }

 private:
  // Chat with tools: content streams as usual until the opening tag of a call appears; text
  // that might be the start of one is held back; from the tag on everything is buffered and
  // parsed at the end into delta.tool_calls chunks (what failed to parse goes out as content).
  struct ToolStream {
    std::string hold;   // a possible partial opening tag, or all so far while it may be a bare call
    std::string calls;  // from the first opening tag on
    bool in_calls = false;
    bool emitted = false;  // some content went out (then it is not a bare call)
  };
  void content_chunk(std::string& out, int index, std::string text) {
    if (text.empty()) return;
    out += sse_event(chat_chunk_json(meta_, index, Json{{"content", std::move(text)}}, nullptr, nullptr,
                                     job_.gen.include_usage));
  }
  void tool_event_chunks(std::string& out, int index, const RequestEvent& ev) {
    ToolStream& ts = tools_[static_cast<size_t>(index)];
    const bool inc = job_.gen.include_usage;
    if (ts.in_calls) {
      ts.calls += ev.text;
    } else {
      std::string text = ts.hold + ev.text;
      ts.hold.clear();
      const size_t open = find_tool_call_open(text, job_.tool_format);
      if (open != std::string::npos) {
        ts.in_calls = true;
        ts.calls = text.substr(open);
        if (open > 0) ts.emitted = true;
        content_chunk(out, index, text.substr(0, open));
      } else if (!ts.emitted && may_be_bare_call(text)) {
        ts.hold = std::move(text);  // a JSON answer may be a call without its tags: decide at the end
      } else {
        const size_t keep = tool_call_open_prefix(text, job_.tool_format);
        ts.hold = text.substr(text.size() - keep);
        if (text.size() > keep) ts.emitted = true;
        content_chunk(out, index, text.substr(0, text.size() - keep));
      }
    }
    if (ev.finish == EventFinish::kNone || is_failure(ev.finish)) return;
    const char* reason = event_finish_name(ev.finish);
    if (ts.in_calls || !ts.emitted) {
      ParsedToolOutput p = job_tool_calls(job_, ts.in_calls ? ts.calls : ts.hold, ids_);
      content_chunk(out, index, std::move(p.content));
      if (!p.calls.empty()) {
        out += sse_event(chat_chunk_json(meta_, index, Json{{"tool_calls", tool_calls_json(p.calls, true)}}, nullptr,
                                         nullptr, inc));
        if (ev.finish == EventFinish::kStop || ev.finish == EventFinish::kEos) reason = "tool_calls";
      }
    } else {
      content_chunk(out, index, std::move(ts.hold));
    }
    out += sse_event(chat_chunk_json(meta_, index, Json::object(), nullptr, reason, inc));
  }

  const ResponseMeta& meta_;
  const Job& job_;
  PieceFn piece_;
  std::vector<int64_t> text_offset_;  // [n] completions logprobs text_offset per choice
  std::vector<ToolStream> tools_;     // [n]
  uint64_t ids_;
};

// One streaming response: lives as long as httplib's Response (its provider and releaser
// hold it), counts as an active HTTP request meanwhile, and cancels what is still open
// when it dies.
class SseStream {
 public:
  SseStream(ServerState& st, std::unique_ptr<GenerationRun> run, ResponseMeta meta, Job job, PieceFn piece, int fd)
      : st_(st),
        run_(std::move(run)),
        meta_(std::move(meta)),
        job_(std::move(job)),
        writer_(meta_, job_, std::move(piece), run_->n()),
        fd_(fd) {
    st_.metrics.http_request_begin();
  }
  ~SseStream() {
    run_.reset();  // cancels open choices
    st_.metrics.http_request_end();
  }

  // One call of httplib's provider loop: write what the engine produced within one poll
  // interval. false ends the response (client gone or write failed).
  bool step(httplib::DataSink& sink) {
    std::string out;
    if (!started_) {
      started_ = true;
      if (job_.chat) writer_.role_chunks(out, run_->n());
    }
    events_.clear();
    run_->poll(events_, kPollInterval);
    for (ChoiceEvent& ce : events_) {
      if (is_failure(ce.ev.finish)) {  // an error event, then [DONE]
        run_->cancel_all();
        out += sse_event(api_error_json(failure_error(ce.ev)));
        out += sse_done();
        if (!sink.write(out.data(), out.size())) return false;
        sink.done();
        return true;
      }
      writer_.event_chunks(out, ce.index, ce.ev);
      if (ce.ev.finish != EventFinish::kNone) {
        add_choice_usage(usage_, ce.ev.usage, ce.index == 0);
      }
    }
    if (run_->finished()) {
      if (job_.gen.include_usage) out += sse_event(usage_chunk_json(meta_, job_.chat, usage_));
      out += sse_done();
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      run_->cancel_all();
      return false;
    }
    if (run_->finished()) {
      sink.done();
      return true;
    }
    if (peer_closed(fd_)) {
      spdlog::info("{}: client closed the stream; cancelling", meta_.id);
      run_->cancel_all();
      return false;
    }
    return true;
  }

  bool step_noexcept(httplib::DataSink& sink) {
    try {
      return step(sink);
    } catch (const std::exception& e) {
      spdlog::error("{}: stream failed: {}", meta_.id, e.what());
    } catch (...) {
      spdlog::error("{}: stream failed", meta_.id);
    }
    run_->cancel_all();
    return false;
  }

 private:
  ServerState& st_;
  std::unique_ptr<GenerationRun> run_;
  ResponseMeta meta_;
  Job job_;
  ChunkWriter writer_;
  int fd_;
  bool started_ = false;
  UsageTotals usage_;
  std::vector<ChoiceEvent> events_;
};

// Waits for every choice, then writes one chat.completion / text_completion body.
void respond_when_done(ServerState& st, httplib::Response& res, GenerationRun& run, int fd, const ResponseMeta& meta,
                       const Job& job) {
  std::vector<ChoiceResult> results(static_cast<size_t>(run.n()));
  std::vector<ChoiceEvent> events;
  std::optional<ApiError> failure;
  while (!run.finished()) {
    events.clear();
    run.poll(events, kPollInterval);
    for (ChoiceEvent& ce : events) {
      ChoiceResult& r = results[static_cast<size_t>(ce.index)];
      r.text += ce.ev.text;
      for (TokenLogprob& lp : ce.ev.logprobs) r.logprobs.push_back(std::move(lp));
      if (ce.ev.finish == EventFinish::kNone) continue;
      r.finish = ce.ev.finish;
      r.usage = ce.ev.usage;
      if (is_failure(ce.ev.finish) && !failure) {
        failure = failure_error(ce.ev);
        run.cancel_all();
      }
    }
    if (!run.finished() && peer_closed(fd)) {
      spdlog::info("{}: client went away; cancelling", meta.id);
      run.cancel_all();
      res.status = 499;  // nginx's "client closed request"; nobody reads it
      return;
    }
  }
  if (failure) return send_error(res, *failure);
  UsageTotals usage;
  for (size_t i = 0; i < results.size(); ++i) add_choice_usage(usage, results[i].usage, i == 0);
  uint64_t ids = call_id_seed();
  if (job.chat)
    for (ChoiceResult& r : results) split_tool_calls(job, r, ids);
  const PieceFn piece = piece_fn(*st.model.tokenizer);
  const bool lp = job.gen.logprobs >= 0;
  send_json(res, 200, job.chat ? chat_completion_json(meta, results, usage, lp, piece)
                               : completion_json(meta, results, usage, lp, piece));
}

// response_format → job.grammar (nothing for "text").
MaybeError constrain(ServerState& st, const ResponseFormat& format, const GenerationOptions& gen, Job& job) {
  if (!format.constrained()) return std::nullopt;
  if (gen.ignore_eos)
    return invalid_request("'ignore_eos' cannot be combined with 'response_format' (the grammar ends the output)",
                           "ignore_eos");
  return compile_response_format(st.grammar(), format, job.grammar);
}

// Shared tail of both routes.
void run_job(ServerState& st, const httplib::Request& req, httplib::Response& res, const RouteContext& ctx, Job job) {
  const ServingModel& m = st.model;
  const char* prompt_param = job.chat ? "messages" : "prompt";
  int max_tokens = 0;
  if (auto e = resolve_max_tokens(job.gen, static_cast<int>(job.prompt.size()), m.max_model_len, job.chat, max_tokens))
    return send_error(res, *e);
  std::vector<RequestParams> params;
  params.reserve(static_cast<size_t>(job.gen.n));
  for (int i = 0; i < job.gen.n; ++i) {
    params.push_back(make_request_params(job.gen, job.prompt, max_tokens, i, st.cfg.request_timeout_s));
    params.back().grammar = job.grammar;
  }

  auto run = std::make_unique<GenerationRun>(*m.engine, st.metrics, ctx.arrival);
  if (auto e = run->submit(std::move(params), prompt_param)) {
    if (e->status == 429) res.set_header("Retry-After", "1");
    return send_error(res, *e);
  }
  ResponseMeta meta{random_hex_id(job.chat ? "chatcmpl-" : "cmpl-"), st.cfg.served_model_name, unix_seconds_now()};
  const int fd = find_socket_fd(req);
  if (fd < 0) spdlog::warn("{}: client socket not found; disconnects will not be noticed", meta.id);
  if (!job.gen.stream) return respond_when_done(st, res, *run, fd, meta, job);

  auto stream = std::make_shared<SseStream>(st, std::move(run), std::move(meta), std::move(job),
                                            piece_fn(*m.tokenizer), fd);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream->step_noexcept(sink); },
      [stream](bool) {});
}

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

void handle_chat_completions(ServerState& st, const httplib::Request& req, httplib::Response& res,
                             const RouteContext& ctx) {
  Json body;
  if (auto e = parse_json_body(ctx.body, body)) return send_error(res, *e);
  ChatRequest cr;
  if (auto e = parse_chat_request(body, cr)) return send_error(res, *e);
  if (auto e = check_model(cr.gen.model, st.cfg.served_model_name)) return send_error(res, *e);
  ToolsRequest tools;
  if (auto e = parse_tools_request(body, tools)) return send_error(res, *e);
  ResponseFormat format;
  if (auto e = parse_response_format(body, format)) return send_error(res, *e);
  if (format.constrained() && tools.active())
    return send_error(res, invalid_request("'response_format' together with 'tools' is not supported "
                                           "(send tool_choice 'none' or no tools)",
                                           "response_format"));
  Job job;
  if (auto e = constrain(st, format, cr.gen, job)) return send_error(res, *e);
  Json kwargs = cr.template_kwargs;
  if (tools.active()) {
    job.tool_format = st.model.chat_template ? tool_call_format_of(st.model.chat_template->source())
                                             : ToolCallFormat::kNone;
    if (job.tool_format == ToolCallFormat::kNone)
      return send_error(res, invalid_request("this model's chat template has no tool-call format hindsight can parse "
                                             "(supported: Hermes <tool_call> JSON blocks as Qwen2.5 / Qwen3, <function=...> blocks as "
                                             "Qwen3-Coder / Qwen3.5, JSON calls as Llama 3.1)",
                                             "tools"));
    if (cr.gen.logprobs >= 0)
      return send_error(res, invalid_request("'logprobs' together with 'tools' is not supported yet", "logprobs"));
    if (!kwargs.is_object()) kwargs = Json::object();
    kwargs["tools"] = tools.tools;
    job.parallel_tool_calls = tools.parallel;
    job.tool_names = std::move(tools.names);
    if (tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed) {
      if (!cr.add_generation_prompt)
        return send_error(res, invalid_request("'tool_choice' 'required' or a named function needs "
                                               "add_generation_prompt (the call starts the assistant's answer)",
                                               "tool_choice"));
      if (auto forced = forced_tool_call(job.tool_format, tools)) {  // the arguments follow their schema
        if (cr.gen.ignore_eos)
          return send_error(res, invalid_request("'ignore_eos' cannot be combined with a forced tool call", "ignore_eos"));
        if (auto e = compile_forced_tool_call(st.grammar(), *forced, job.grammar)) return send_error(res, *e);
        job.forced_prefix = std::move(forced->prefix);
      } else {
        job.forced_prefix = tool_call_prefix(job.tool_format, tools.choice == ToolChoice::kNamed ? tools.named : "");
      }
    }
  }
  std::string text;
  if (auto e = render_chat_prompt(st, cr.messages, cr.add_generation_prompt, kwargs, text)) return send_error(res, *e);
  text += job.forced_prefix;
  job.chat = true;
  job.gen = std::move(cr.gen);
  // Templates carry their own BOS; special-token text in them is recognised.
  job.prompt = st.model.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true);
  run_job(st, req, res, ctx, std::move(job));
}

void handle_completions(ServerState& st, const httplib::Request& req, httplib::Response& res,
                        const RouteContext& ctx) {
  Json body;
  if (auto e = parse_json_body(ctx.body, body)) return send_error(res, *e);
  CompletionRequest cr;
  if (auto e = parse_completion_request(body, cr)) return send_error(res, *e);
  if (auto e = check_model(cr.gen.model, st.cfg.served_model_name)) return send_error(res, *e);
  const Tokenizer& tok = *st.model.tokenizer;
  ResponseFormat format;
  if (auto e = parse_response_format(body, format)) return send_error(res, *e);
  Job job;
  if (auto e = constrain(st, format, cr.gen, job)) return send_error(res, *e);
  job.chat = false;
  job.gen = std::move(cr.gen);
  if (cr.prompt_is_tokens) {
    if (auto e = check_token_ids(cr.prompt_tokens, tok.n_vocab(), "prompt")) return send_error(res, *e);
    job.prompt = std::move(cr.prompt_tokens);
  } else {
    job.prompt = tok.encode(cr.prompt_text, /*add_special=*/true, /*parse_special=*/true);
  }
  run_job(st, req, res, ctx, std::move(job));
}

}  // namespace hs::server
