// tests/fuzz/fuzz_openai_request.cpp — libFuzzer target: the OpenAI request parsers
// (server/openai_protocol.h) on arbitrary bodies: JSON, then the chat, completion, tokenize and
// detokenize requests. Every input must give a request or an ApiError, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  hs::server::Json json;
  if (hs::server::parse_json_body(body, json)) return 0;  // an error: nothing more to parse
  hs::server::ChatRequest chat;
  (void)hs::server::parse_chat_request(json, chat);
  hs::server::CompletionRequest completion;
  (void)hs::server::parse_completion_request(json, completion);
  hs::server::TokenizeRequest tok;
  (void)hs::server::parse_tokenize_request(json, tok);
  hs::server::DetokenizeRequest detok;
  (void)hs::server::parse_detokenize_request(json, detok);
  return 0;
}
