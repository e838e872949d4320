// server/anthropic_protocol.h — Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens): request bodies → the OpenAI-shaped structs the chat pipeline
// runs, and Message objects, stream events and errors back.
//
// Request side: parse_messages_request() validates the Anthropic-only shapes (content blocks,
// system, tools with input_schema, tool_choice, the fields this server does not support),
// converts the body into an OpenAI chat body (system → a system message; tool_use blocks →
// the assistant message's tool_calls; tool_result blocks → role "tool" messages in order;
// stop_sequences → stop; tool_choice auto/any/tool/none → auto/required/named/none,
// disable_parallel_tool_use → parallel_tool_calls false; a final assistant message → the
// answer's prefill) and hands that to parse_chat_request / parse_tools_request, so the
// generation fields have one validation; their errors are renamed back to the Anthropic field
// names. Every field is either honoured or a 400 naming it (e.g. messages[0].content[1].type).
// Response side: the Message object, the SSE events (message_start, content_block_start /
// _delta / _stop, message_delta, message_stop, error) through MessageStreamEvents, and the
// error body {"type":"error","error":{"type","message"},"request_id"} with Anthropic's error
// types. No HTTP types here; cost is linear in the body and in the generated text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/tool_calls.h"

namespace hs::server {

enum class MessagesEndpoint { kCreate, kCountTokens };  // /v1/messages, /v1/messages/count_tokens

struct MessagesRequest {
  ChatRequest chat;    // OpenAI-shaped messages (+ assistant_prefill) and generation options
  ToolsRequest tools;  // the tools as OpenAI function tools
};

// The Anthropic body → the OpenAI chat body it means (no generation-field validation yet)
// and the prefill (the text of a final assistant message, removed from the messages).
MaybeError anthropic_to_openai_body(const Json& body, MessagesEndpoint ep, Json& openai, std::string& prefill);
// anthropic_to_openai_body, then the OpenAI parsers on the result.
MaybeError parse_messages_request(const Json& body, MessagesEndpoint ep, MessagesRequest& out);

// "toolu_" + the hex of a "call_<hex>" id (any other id gets the prefix in front).
std::string anthropic_tool_id(std::string_view call_id);
// end_turn (EOS), stop_sequence (a stop string), max_tokens (length); tool_use when the
// answer holds calls and the model stopped by itself.
const char* anthropic_stop_reason(EventFinish f, bool has_tool_calls);
// {"input_tokens" (not served from the prefix cache), "output_tokens",
//  "cache_read_input_tokens" (served from it), "cache_creation_input_tokens": 0}
Json anthropic_usage_json(const UsageTotals& u);
// The Message object of a finished answer (`r` already split into text and calls).
Json anthropic_message_json(const ResponseMeta& meta, const ChoiceResult& r, const UsageTotals& u);

// invalid_request_error (400 and other 4xx), authentication_error (401), permission_error
// (403), not_found_error (404), request_too_large (413), rate_limit_error (429), api_error
// (500 and other 5xx), overloaded_error (503), timeout_error (504).
const char* anthropic_error_type(const ApiError& e);
// {"type":"error","error":{"type","message"},"request_id"} (request_id omitted when empty);
// the message names the field at fault (e.param in front when it does not already).
Json anthropic_error_json(const ApiError& e, std::string_view request_id = {});

// "event: <type>\ndata: <json>\n\n"
std::string sse_named_event(std::string_view type, const Json& data);

// One answer's event stream. A text block (index 0) opens at the first text and closes before
// the tool_use blocks or at the end; each call is one tool_use block with its whole input in
// one input_json_delta. Every call appends the bytes to send to `out`.
class MessageStreamEvents {
 public:
  explicit MessageStreamEvents(const ResponseMeta& meta) : meta_(meta) {}
  // message_start; input_tokens is the whole prompt (how much the prefix cache served is known
  // at the end: message_delta carries the final counts).
  void start(std::string& out, int prompt_tokens);
  void text(std::string& out, std::string_view text);  // nothing for empty text
  void tool_calls(std::string& out, const std::vector<ToolCall>& calls);
  // Closes the open block; message_delta (stop_reason, stop_sequence: null when empty or not
  // a stop_sequence stop; usage) and message_stop.
  void stop(std::string& out, const char* stop_reason, std::string_view stop_sequence, const UsageTotals& u);
  void error(std::string& out, const ApiError& e);  // an `error` event; the stream then ends

 private:
  void close_block(std::string& out);
  const ResponseMeta& meta_;
  int next_index_ = 0;
  bool text_open_ = false;
};

}  // namespace hs::server
