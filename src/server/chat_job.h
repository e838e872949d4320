// server/chat_job.h — one generation request, API-neutral: what the OpenAI routes
// (completion_routes.cpp) and Anthropic's /v1/messages (messages_route.cpp) share.
//
// A Job is the parsed request reduced to what the engine runs: options, the prompt's tokens,
// the tool-call format and forced opening, the grammar. prepare_chat_job() renders OpenAI-
// shaped messages and tools with the model's chat template (a forced tool call's opening and
// grammar included, response_format compiled). run_job() submits the n choices and hands the
// transport an AsyncBody that the engine's events wake: it either streams them through an
// API's StreamWriter (SSE) or collects them and answers with the API's formatter; errors leave
// through the API's error sender. No thread waits for tokens; a client that goes away aborts
// the body, which cancels its engine requests. ToolStreamSplitter is the one implementation of "stream content
// until a tool call starts, hold what might be one, parse the calls at the end".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "server/generation_run.h"
#include "server/openai_response.h"
#include "server/routes.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace hs::server {

struct Job {
  bool chat = true;
  GenerationOptions gen;
  std::vector<int32_t> prompt;
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // chat with tools: how calls are written
  bool parallel_tool_calls = true;
  std::vector<std::string> tool_names;                 // the request's declared functions
  Json tools = nullptr;                                // their definitions (the XML format types parameters by them)
  // tool_choice "required" / a named function: the opening of a call in the template's format,
  // appended to the prompt as the start of the assistant's answer, so the model can only
  // continue a call; it is put back in front of the generated text for parsing.
  std::string forced_prefix;
  // response_format or a forced tool call under a grammar (structured_output.h): every choice's
  // tokens are masked by it.
  std::shared_ptr<const TokenGrammar> grammar;
};

// Chat: `cr` (OpenAI-shaped messages), `tools` and `format` → job (prompt, tools, grammar).
MaybeError prepare_chat_job(ServerState& st, ChatRequest cr, const ToolsRequest& tools, const ResponseFormat& format,
                            Job& job);
// response_format → job.grammar (nothing for "text").
MaybeError constrain(ServerState& st, const ResponseFormat& format, const GenerationOptions& gen, Job& job);

uint64_t call_id_seed();  // a request's call ids start here (random per request)
// The non-streamed choice's text split into content and calls (tools requests only).
void split_tool_calls(const Job& job, ChoiceResult& r, uint64_t& ids);

// One streamed choice of a tools request: feed() each event's text and emit what it returns
// as content; finish() gives the rest of the content and the calls.
class ToolStreamSplitter {
 public:
  explicit ToolStreamSplitter(const Job* job = nullptr);
  std::string feed(std::string_view text);
  ParsedToolOutput finish(uint64_t& ids);

 private:
  const Job* job_;
  std::string hold_;   // a possible partial opening tag, or all so far while it may be a bare call
  std::string calls_;  // from the first opening tag on
  bool in_calls_ = false;
  bool emitted_ = false;  // some content went out (then it is not a bare call)
};

// An API's stream format. Called on the connection's strand that owns the stream; each call
// appends the bytes to send to `out`.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual void start(std::string& out, int n_choices) = 0;              // before any event
  virtual void event(std::string& out, int index, const RequestEvent& ev) = 0;  // not a failure
  virtual void failure(std::string& out, const ApiError& e) = 0;       // then the stream ends
  virtual void end(std::string& out, const UsageTotals& usage) = 0;    // every choice finished
};

struct ApiStyle {
  // The stream's writer for a job of n choices.
  std::function<std::unique_ptr<StreamWriter>(const Job&, const ResponseMeta&, int n)> make_writer;
  // The non-streamed body from every choice's result (tool calls not yet split).
  std::function<Json(const Job&, const ResponseMeta&, std::vector<ChoiceResult>&, const UsageTotals&)> body;
  std::function<void(HttpResponse&, const ApiError&)> send_error;
  const char* id_prefix = "chatcmpl-";
};

PieceFn piece_fn(const Tokenizer& tok);

// Applies max_tokens, submits job.gen.n choices and answers in `style`: an error now, or
// res.async (streamed when job.gen.stream) woken by ctx.wake. `meta.id` is made here.
void run_job(ServerState& st, const HttpRequest& req, HttpResponse& res, const RouteContext& ctx, Job job,
             const ApiStyle& style);

}  // namespace hs::server
