// server/responses_route.cpp — POST /v1/responses (OpenAI's Responses API) on the chat
// pipeline of chat_job.h, and the answer to GET / DELETE /v1/responses/{id}.
//
// The body is converted to the OpenAI chat request it means (responses_protocol.h), the model
// checked, the job prepared exactly as for /v1/chat/completions (template, tools, forced call,
// grammar for text.format), and run_job() answers in the Responses style: one Response object,
// or the SSE events written by ResponseWriter below (text deltas as they come; with tools,
// content through the ToolStreamSplitter and each call as a function_call item at the end).
// Errors are OpenAI error bodies with the Responses field names. Nothing is stored, so a
// stored response cannot be fetched or deleted: those routes are a 404 saying so. One answer
// per request (n is 1). Cost: that of the chat route plus one body conversion.
#include <fmt/format.h>

#include <memory>
#include <utility>
#include <vector>

#include "server/chat_job.h"
#include "server/responses_protocol.h"

namespace hs::server {
namespace {

void send_responses_error(HttpResponse& res, const ApiError& e) { send_error(res, responses_names(e)); }

class ResponseWriter final : public StreamWriter {
 public:
  ResponseWriter(const ResponseMeta& meta, const Job& job, std::shared_ptr<const Json> echo)
      : job_(job), echo_(std::move(echo)), events_(meta, *echo_, random_hex_id("msg_")), tools_(&job),
        ids_(call_id_seed()) {}

  void start(std::string& out, int) override { events_.start(out); }

  void event(std::string& out, int, const RequestEvent& ev) override {
    const bool with_tools = job_.tool_format != ToolCallFormat::kNone;
    events_.text(out, with_tools ? tools_.feed(ev.text) : ev.text);
    if (ev.finish == EventFinish::kNone) return;
    std::vector<ToolCall> calls;
    if (with_tools) {
      ParsedToolOutput p = tools_.finish(ids_);
      events_.text(out, p.content);
      calls = std::move(p.calls);
    }
    events_.finish(out, calls, ev.finish);
  }

  void failure(std::string& out, const ApiError& e) override { events_.failure(out, responses_names(e)); }

  void end(std::string& out, const UsageTotals& usage) override { events_.end(out, usage); }

 private:
  const Job& job_;
  std::shared_ptr<const Json> echo_;  // before events_, which keeps a reference to it
  ResponseStreamEvents events_;
  ToolStreamSplitter tools_;
  uint64_t ids_;
};

ApiStyle responses_style(std::shared_ptr<const Json> echo) {
  ApiStyle s;
  s.make_writer = [echo](const Job& job, const ResponseMeta& meta, int) -> std::unique_ptr<StreamWriter> {
    return std::make_unique<ResponseWriter>(meta, job, echo);
  };
  s.body = [echo](const Job&, const ResponseMeta& meta, std::vector<ChoiceResult>& results, const UsageTotals& usage) {
    return response_json(meta, *echo, results.at(0), usage, random_hex_id("msg_"));
  };
  s.send_error = send_responses_error;
  s.id_prefix = "resp_";
  return s;
}

}  // namespace

void handle_responses(ServerState& st, const HttpRequest& req, HttpResponse& res, const RouteContext& ctx) {
  Json body;
  ResponsesRequest rr;
  Job job;
  MaybeError e = parse_json_body(ctx.body, body);
  if (!e) e = parse_responses_request(body, rr);
  if (!e) e = check_model(rr.chat.gen.model, st.cfg.served_model_name);
  if (!e) e = prepare_chat_job(st, std::move(rr.chat), rr.tools, rr.format, job);
  if (e) return send_responses_error(res, *e);
  run_job(st, req, res, ctx, std::move(job), responses_style(std::make_shared<const Json>(std::move(rr.echo))));
}

void handle_stored_response(ServerState&, const HttpRequest& req, HttpResponse& res, const RouteContext&) {
  send_error(res, not_found(fmt::format("response '{}' not found: this server does not store responses (every "
                                        "Response says \"store\": false); send the whole conversation in 'input'",
                                        log_safe(req.path_param.empty() ? req.path : req.path_param, 128)),
                            "response_id"));
}

}  // namespace hs::server
