// server/completion_routes.cpp — POST /v1/chat/completions and POST /v1/completions.
//
// Both routes: parse + validate the body, build the Job (chat: template then encode without
// extra BOS, special-token text recognised, tools and response_format: chat_job.h;
// completions: encode with BOS, or take the token ids as given), then run_job() submits the n
// choices and answers in OpenAI's style: one JSON body, or SSE chunks written by ChunkWriter
// below. Either way the connection's strand writes as the engine's events wake it, a client
// that goes away aborts the body (its engine requests are cancelled), and a GenerationRun
// cancels whatever is still open when the body dies, so no request outlives its client.
#include <memory>
#include <utility>
#include <vector>

#include "server/chat_job.h"
#include "tokenizer/tokenizer.h"

namespace hs::server {
namespace {

// OpenAI's chunks: one event's chunks for choice `index`; the final chunk carries the finish
// reason; chat with tools streams content through a ToolStreamSplitter and the calls as
// delta.tool_calls at the end; [DONE] closes the stream (failures: an error object first).
class ChunkWriter final : public StreamWriter {
 public:
  ChunkWriter(const ResponseMeta& meta, const Job& job, PieceFn piece, int n)
      : meta_(meta), job_(job), piece_(std::move(piece)), text_offset_(static_cast<size_t>(n), 0), ids_(call_id_seed()) {
    for (int i = 0; i < n; ++i) tools_.emplace_back(&job_);
  }

  void start(std::string& out, int n) override {
    if (!job_.chat) return;
    for (int i = 0; i < n; ++i)
      out += sse_event(chat_chunk_json(meta_, i, Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr,
                                       job_.gen.include_usage));
  }

  void event(std::string& out, int index, const RequestEvent& ev) override {
    if (job_.chat && job_.tool_format != ToolCallFormat::kNone) return tool_event(out, index, ev);
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
    if (ev.finish != EventFinish::kNone) {
      const char* reason = event_finish_name(ev.finish);
      out += job_.chat ? sse_event(chat_chunk_json(meta_, index, Json::object(), nullptr, reason, inc))
                       : sse_event(completion_chunk_json(meta_, index, "", nullptr, reason, inc));
    }
  }

  void failure(std::string& out, const ApiError& e) override {
    out += sse_event(api_error_json(e));
    out += sse_done();
  }

  void end(std::string& out, const UsageTotals& usage) override {
    if (job_.gen.include_usage) out += sse_event(usage_chunk_json(meta_, job_.chat, usage));
    out += sse_done();
  }

 private:
  void content_chunk(std::string& out, int index, std::string text) {
    if (text.empty()) return;
    out += sse_event(chat_chunk_json(meta_, index, Json{{"content", std::move(text)}}, nullptr, nullptr,
                                     job_.gen.include_usage));
  }
  void tool_event(std::string& out, int index, const RequestEvent& ev) {
    ToolStreamSplitter& ts = tools_[static_cast<size_t>(index)];
    content_chunk(out, index, ts.feed(ev.text));
    if (ev.finish == EventFinish::kNone) return;
    const char* reason = event_finish_name(ev.finish);
    ParsedToolOutput p = ts.finish(ids_);
    content_chunk(out, index, std::move(p.content));
    if (!p.calls.empty()) {
      out += sse_event(chat_chunk_json(meta_, index, Json{{"tool_calls", tool_calls_json(p.calls, true)}}, nullptr,
                                       nullptr, job_.gen.include_usage));
      if (ev.finish == EventFinish::kStop || ev.finish == EventFinish::kEos) reason = "tool_calls";
    }
    out += sse_event(chat_chunk_json(meta_, index, Json::object(), nullptr, reason, job_.gen.include_usage));
  }

  const ResponseMeta& meta_;
  const Job& job_;
  PieceFn piece_;
  std::vector<int64_t> text_offset_;  // [n] completions logprobs text_offset per choice
  std::vector<ToolStreamSplitter> tools_;  // [n]
  uint64_t ids_;
};

ApiStyle openai_style(ServerState& st, bool chat) {
  ApiStyle s;
  const Tokenizer* tok = st.model.tokenizer;
  s.make_writer = [tok](const Job& job, const ResponseMeta& meta, int n) -> std::unique_ptr<StreamWriter> {
    return std::make_unique<ChunkWriter>(meta, job, piece_fn(*tok), n);
  };
  s.body = [tok](const Job& job, const ResponseMeta& meta, std::vector<ChoiceResult>& results, const UsageTotals& usage) {
    const bool lp = job.gen.logprobs >= 0;
    return job.chat ? chat_completion_json(meta, results, usage, lp, piece_fn(*tok))
                    : completion_json(meta, results, usage, lp, piece_fn(*tok));
  };
  s.send_error = [](HttpResponse& res, const ApiError& e) { send_error(res, e); };
  s.id_prefix = chat ? "chatcmpl-" : "cmpl-";
  return s;
}

}  // namespace

void handle_chat_completions(ServerState& st, const HttpRequest& req, HttpResponse& res,
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
  Job job;
  if (auto e = prepare_chat_job(st, std::move(cr), tools, format, job)) return send_error(res, *e);
  run_job(st, req, res, ctx, std::move(job), openai_style(st, true));
}

void handle_completions(ServerState& st, const HttpRequest& req, HttpResponse& res,
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
  run_job(st, req, res, ctx, std::move(job), openai_style(st, false));
}

}  // namespace hs::server
