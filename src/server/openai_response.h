// server/openai_response.h — OpenAI response objects and Server-Sent Events framing.
//
// Builds chat.completion, chat.completion.chunk and text_completion objects, the usage
// object (prompt counted once, completion tokens summed over the n choices), and the two
// logprobs shapes: chat {"content":[{"token","logprob","bytes","top_logprobs"}]} and
// completions {"tokens","token_logprobs","top_logprobs":[{token: logprob}],"text_offset"}.
// Token strings come through a PieceFn (the tokenizer's raw bytes per id), so this file
// needs no tokenizer. Cost: linear in the text and logprobs of the response.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/openai_protocol.h"
#include "server/tool_calls.h"

namespace hs::server {

using PieceFn = std::function<std::string_view(int32_t)>;  // token id → its raw bytes

struct ResponseMeta {
  std::string id;       // "chatcmpl-<hex>" or "cmpl-<hex>"
  std::string model;    // the served model name
  int64_t created = 0;  // unix seconds
};

std::string random_hex_id(std::string_view prefix);  // prefix + 32 random hex digits
int64_t unix_seconds_now();

// One choice, collected from all events of its engine request (non-streaming responses).
struct ChoiceResult {
  std::string text;                    // chat with tools: the content outside the calls
  std::vector<ToolCall> tool_calls;    // chat with tools: the parsed calls (server/tool_calls.h)
  std::vector<TokenLogprob> logprobs;  // [completion tokens] when logprobs were asked for
  EventFinish finish = EventFinish::kNone;
  std::string stop_sequence;           // kStop: the stop string that ended the output
  RequestUsage usage;
  std::string error;                   // kError
};

// message.tool_calls (stream: delta.tool_calls, with each call's "index").
Json tool_calls_json(const std::vector<ToolCall>& calls, bool stream);

struct UsageTotals {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};
// Adds one choice's usage: completion tokens add up; the prompt and its cached part are
// taken from the first choice only (the prompt is the same for all).
void add_choice_usage(UsageTotals& u, const RequestUsage& r, bool first_choice);
Json usage_json(const UsageTotals& u);

// Logprobs below this (including -inf) are reported as it, as vLLM does: JSON has no -inf.
constexpr double kMinLogprob = -9999.0;

Json chat_logprobs_json(std::span<const TokenLogprob> lps, const PieceFn& piece);
// `text_offset` is where the first token's text starts in the completion; it is advanced
// past these tokens so a stream can continue it.
Json completion_logprobs_json(std::span<const TokenLogprob> lps, const PieceFn& piece, int64_t& text_offset);

// Non-streaming bodies. `logprobs`: whether the request asked for them (else "logprobs": null).
Json chat_completion_json(const ResponseMeta& meta, std::span<const ChoiceResult> choices, const UsageTotals& usage,
                          bool logprobs, const PieceFn& piece);
Json completion_json(const ResponseMeta& meta, std::span<const ChoiceResult> choices, const UsageTotals& usage,
                     bool logprobs, const PieceFn& piece);

// Streaming chunks. finish_reason nullptr → JSON null. include_usage adds "usage": null.
Json chat_chunk_json(const ResponseMeta& meta, int index, Json delta, Json logprobs, const char* finish_reason,
                     bool include_usage);
Json completion_chunk_json(const ResponseMeta& meta, int index, std::string_view text, Json logprobs,
                           const char* finish_reason, bool include_usage);
// The extra chunk stream_options.include_usage asks for: "choices": [] and the usage.
Json usage_chunk_json(const ResponseMeta& meta, bool chat, const UsageTotals& usage);

// "data: <json>\n\n" and "data: [DONE]\n\n".
std::string sse_event(const Json& j);
std::string_view sse_done();

}  // namespace hs::server
