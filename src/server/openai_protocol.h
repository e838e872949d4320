// server/openai_protocol.h — OpenAI request bodies → plain, validated structs.
//
// Each parse_* function reads one JSON body (already parsed, a JSON object) and either fills
// its struct or returns the ApiError a client should see: 400 with `param` naming the field
// for a wrong type or an out-of-range value, 404 for an unknown model. Unknown fields are
// ignored, and null counts as absent (clients send null for unset options), except the
// OpenAI fields that would change the output and are not supported here (functions, audio,
// prediction, suffix, ...): those are 400s naming them. Ranges follow
// OpenAI and vLLM (temperature 0..2, top_p (0, 1], top_k -1/0 = off, n 1..16, ...).
// resolve_max_tokens() applies the context-length rule after tokenization, with OpenAI's
// wording for an over-long request. No HTTP types here; cost is linear in the body.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"

namespace hs::server {

using Json = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;

constexpr int kMaxChoices = 16;       // n
constexpr int kMaxStopStrings = 16;   // stop
constexpr int kMaxTopLogprobs = 20;   // top_logprobs (chat), logprobs (completions)
constexpr int kMaxLogitBias = 1024;   // logit_bias entries (OpenAI allows 300; vLLM any)
// /v1/completions without max_tokens generates 16 tokens (OpenAI's and vLLM's default);
// chat without max_tokens may fill the context.
constexpr int kDefaultCompletionMaxTokens = 16;

// Fields chat and completions requests share.
struct GenerationOptions {
  std::string model;               // empty: not given
  std::optional<int> max_tokens;   // none (chat only): fill the context (max_model_len - prompt)
  SamplingParams sampling;         // defaults temperature 1, top_p 1, penalties off
  std::vector<std::string> stop;   // empty strings dropped
  int n = 1;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  int logprobs = -1;               // -1: none; k >= 0: the chosen token's logprob + top k
};

struct ChatRequest {
  GenerationOptions gen;
  Json messages;                   // [{"role", "content": string, ...}]; text parts joined by "\n"
  bool add_generation_prompt = true;
  Json template_kwargs;            // chat_template_kwargs (object) or null
  // Text the assistant's answer starts with, appended to the rendered prompt (Anthropic's
  // final assistant message, server/anthropic_protocol.h); the answer continues it. Never set
  // from an OpenAI body.
  std::string assistant_prefill;
};

struct CompletionRequest {
  GenerationOptions gen;
  bool prompt_is_tokens = false;
  std::string prompt_text;              // !prompt_is_tokens
  std::vector<int32_t> prompt_tokens;   // prompt_is_tokens
};

// vLLM's /tokenize: {"model"?, "prompt" | "messages", "add_special_tokens", "add_generation_prompt"}
struct TokenizeRequest {
  std::string model;
  bool has_messages = false;
  std::string prompt;
  Json messages;
  std::optional<bool> add_special_tokens;  // default: true for a prompt, false for messages
  bool add_generation_prompt = true;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Parses a request body: 400 for malformed JSON or a body that is not a JSON object.
MaybeError parse_json_body(std::string_view body, Json& out);

MaybeError parse_chat_request(const Json& body, ChatRequest& out);
MaybeError parse_completion_request(const Json& body, CompletionRequest& out);
MaybeError parse_tokenize_request(const Json& body, TokenizeRequest& out);
MaybeError parse_detokenize_request(const Json& body, DetokenizeRequest& out);

// 404 when `requested` is given and is not the served model's name.
MaybeError check_model(const std::string& requested, const std::string& served);

// 400 naming `param` when a token id is outside [0, n_vocab).
MaybeError check_token_ids(std::span<const int32_t> ids, int n_vocab, const char* param);

// The completion budget: max_tokens if given, else max_model_len - prompt_tokens. 400 when
// the prompt is empty or prompt + completion exceeds max_model_len; the message gives both
// numbers and the limit. `chat` picks the wording ("messages" or "prompt").
MaybeError resolve_max_tokens(const GenerationOptions& g, int prompt_tokens, int max_model_len,
                              bool chat, int& max_tokens);

// The engine request for choice `choice` (0..n-1): choice i samples with seed + i when a
// seed was given, so the n choices differ yet reproduce.
RequestParams make_request_params(const GenerationOptions& g, std::vector<int32_t> prompt,
                                  int max_tokens, int choice, double timeout_s);

}  // namespace hs::server
