// server/responses_protocol.h — OpenAI's Responses API (POST /v1/responses): request bodies →
// the OpenAI chat request the pipeline runs, and Response objects and stream events back.
//
// Request side: responses_to_chat_body() validates the Responses-only shapes and writes the
// chat body they mean: `input` (a string: one user message; or items: messages with string or
// input_text / output_text parts (developer → system), function_call items → the assistant
// message's tool_calls (consecutive calls, and calls right after an assistant message, are one
// assistant turn), function_call_output → role "tool" messages answering an earlier call_id),
// `instructions` → a leading system message, `max_output_tokens` → max_tokens, `tools`
// ({type: "function", name, ...}) → chat function tools, `tool_choice` ({type: "function",
// name} → the chat shape), `text.format` → response_format; then parse_chat_request /
// parse_tools_request / parse_response_format run on it (one validation of the generation
// fields) and their errors are renamed back to the Responses field names. Every other field
// is either honoured, accepted as an informational marker (metadata, user, safety_identifier,
// prompt_cache_key, store: nothing is stored and the Response says "store": false), or a 400
// naming it (previous_response_id, conversation, background, reasoning effort, built-in
// tools, images and files, include values, truncation "auto", top_logprobs, ...).
// Response side: the Response object (output: a message item with one output_text part, then
// one function_call item per call; usage with input/output token details), and the SSE
// events (response.created, .in_progress, .output_item.added / .done, .content_part.added /
// .done, .output_text.delta / .done, .function_call_arguments.delta / .done, .completed or
// .incomplete; on failure `error` then response.failed), each with "type" and an increasing
// "sequence_number". No HTTP types here; cost is linear in the body and in the output.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace hs::server {

struct ResponsesRequest {
  ChatRequest chat;       // OpenAI-shaped messages and generation options (n is 1)
  ToolsRequest tools;     // the function tools in the chat shape
  ResponseFormat format;  // text.format
  // The request fields a Response object repeats (instructions, max_output_tokens, tools,
  // tool_choice, text, temperature, top_p, metadata, ...), normalised; see response_json.
  Json echo = Json::object();
};

// The Responses body → the chat body it means (no generation-field validation yet) and the
// fields the Response echoes.
MaybeError responses_to_chat_body(const Json& body, Json& chat, Json& echo);
// responses_to_chat_body, then the OpenAI parsers on the result (errors in Responses names).
MaybeError parse_responses_request(const Json& body, ResponsesRequest& out);
// An error of the chat parsers or of the pipeline in the Responses body's names
// (max_tokens → max_output_tokens, messages → input, response_format → text.format,
// tools[i].function.X → tools[i].X).
ApiError responses_names(ApiError e);

// "fc_" + the hex of a "call_<hex>" id (any other id gets the prefix in front).
std::string function_call_item_id(std::string_view call_id);
// {"input_tokens", "input_tokens_details": {"cached_tokens", "cache_write_tokens": 0},
//  "output_tokens", "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens"}
Json responses_usage_json(const UsageTotals& u);
// "incomplete" when the output was cut (max_output_tokens or the context), else "completed".
const char* response_status(EventFinish f);

// Output items.
Json message_item_json(const std::string& id, const std::string& text, const char* status);
Json function_call_item_json(const ToolCall& c, const char* status, bool with_arguments = true);

// A Response object: `status` "in_progress" / "completed" / "incomplete" / "failed";
// `usage` null (in progress) or responses_usage_json; `error` null or {"code", "message"}.
Json response_object_json(const ResponseMeta& meta, const Json& echo, std::string_view status, Json output, Json usage,
                          Json error = nullptr);
// The Response of a finished answer (`r` already split into text and calls): a message item
// `message_id` when there is text or no call, then the calls.
Json response_json(const ResponseMeta& meta, const Json& echo, const ChoiceResult& r, const UsageTotals& u,
                   const std::string& message_id);

// One answer's event stream. The message item (output_index 0) opens at the first text and
// closes at finish(); each call is then one function_call item with its whole arguments in
// one delta. Every call appends the bytes to send to `out`.
class ResponseStreamEvents {
 public:
  ResponseStreamEvents(const ResponseMeta& meta, const Json& echo, std::string message_id)
      : meta_(meta), echo_(echo), message_id_(std::move(message_id)) {}
  void start(std::string& out);                         // response.created, response.in_progress
  void text(std::string& out, std::string_view delta);  // nothing for empty text
  // The answer ended with `f`: closes the message item (opening an empty one when there was
  // no text and there are no calls), then one function_call item per call.
  void finish(std::string& out, const std::vector<ToolCall>& calls, EventFinish f);
  void end(std::string& out, const UsageTotals& u);  // response.completed / response.incomplete
  void failure(std::string& out, const ApiError& e);  // `error`, then response.failed
  int sequence_number() const { return seq_; }      // the next event's

 private:
  void emit(std::string& out, const char* type, Json data);
  void open_message(std::string& out);
  const ResponseMeta& meta_;
  const Json& echo_;
  std::string message_id_;
  Json output_ = Json::array();  // the finished items
  std::string text_;
  int seq_ = 0;
  bool message_open_ = false;
  const char* status_ = "completed";
};

}  // namespace hs::server
