// server/messages_route.cpp — POST /v1/messages and POST /v1/messages/count_tokens
// (Anthropic's Messages API) on the chat pipeline of chat_job.h.
//
// The body is converted to the OpenAI chat request it means (anthropic_protocol.h), the model
// checked, the job prepared exactly as for /v1/chat/completions (template, tools, forced call,
// grammar), and run_job() answers in Anthropic's style: one Message object, or the SSE events
// written by MessageWriter below (text deltas as they come; with tools, content through the
// ToolStreamSplitter and each call as a tool_use block at the end). Errors are Anthropic error
// bodies. count_tokens renders and tokenizes the same prompt and generates nothing. One answer
// per request (Anthropic has no n). Cost: that of the chat route plus one body conversion.
#include <memory>
#include <utility>
#include <vector>

#include "server/anthropic_protocol.h"
#include "server/chat_job.h"

namespace hs::server {
namespace {

void send_anthropic_error(HttpResponse& res, const ApiError& e) {
  send_json(res, e.status, anthropic_error_json(e, res.get_header_value("X-Request-Id")));
}

class MessageWriter final : public StreamWriter {
 public:
  MessageWriter(const ResponseMeta& meta, const Job& job)
      : job_(job), events_(meta), tools_(&job), ids_(call_id_seed()) {}

  void start(std::string& out, int) override { events_.start(out, static_cast<int>(job_.prompt.size())); }

  void event(std::string& out, int, const RequestEvent& ev) override {
    const bool with_tools = job_.tool_format != ToolCallFormat::kNone;
    events_.text(out, with_tools ? tools_.feed(ev.text) : ev.text);
    if (ev.finish == EventFinish::kNone) return;
    bool calls = false;
    if (with_tools) {
      ParsedToolOutput p = tools_.finish(ids_);
      events_.text(out, p.content);
      events_.tool_calls(out, p.calls);
      calls = !p.calls.empty();
    }
    reason_ = anthropic_stop_reason(ev.finish, calls);
    stop_ = ev.stop;
  }

  void failure(std::string& out, const ApiError& e) override { events_.error(out, e); }

  void end(std::string& out, const UsageTotals& usage) override { events_.stop(out, reason_, stop_, usage); }

 private:
  const Job& job_;
  MessageStreamEvents events_;
  ToolStreamSplitter tools_;
  uint64_t ids_;
  const char* reason_ = "end_turn";
  std::string stop_;
};

ApiStyle anthropic_style() {
  ApiStyle s;
  s.make_writer = [](const Job& job, const ResponseMeta& meta, int) -> std::unique_ptr<StreamWriter> {
    return std::make_unique<MessageWriter>(meta, job);
  };
  s.body = [](const Job&, const ResponseMeta& meta, std::vector<ChoiceResult>& results, const UsageTotals& usage) {
    return anthropic_message_json(meta, results.at(0), usage);
  };
  s.send_error = send_anthropic_error;
  s.id_prefix = "msg_";
  return s;
}

// Body → the prepared job (the prompt rendered and tokenized), or the error sent.
bool prepare(ServerState& st, const RouteContext& ctx, HttpResponse& res, MessagesEndpoint ep, Job& job) {
  res.set_header("request-id", ctx.request_id);  // where Anthropic's SDKs read it
  Json body;
  MessagesRequest mr;
  MaybeError e = parse_json_body(ctx.body, body);
  if (!e) e = parse_messages_request(body, ep, mr);
  if (!e) e = check_model(mr.chat.gen.model, st.cfg.served_model_name);
  if (!e) e = prepare_chat_job(st, std::move(mr.chat), mr.tools, ResponseFormat{}, job);
  if (!e) return true;
  send_anthropic_error(res, *e);
  return false;
}

}  // namespace

void handle_messages(ServerState& st, const HttpRequest& req, HttpResponse& res, const RouteContext& ctx) {
  Job job;
  if (!prepare(st, ctx, res, MessagesEndpoint::kCreate, job)) return;
  run_job(st, req, res, ctx, std::move(job), anthropic_style());
}

void handle_count_tokens(ServerState& st, const HttpRequest&, HttpResponse& res, const RouteContext& ctx) {
  Job job;
  if (!prepare(st, ctx, res, MessagesEndpoint::kCountTokens, job)) return;
  send_json(res, 200, Json{{"input_tokens", job.prompt.size()}});
}

}  // namespace hs::server
