// tests/fuzz/fuzz_chat_template.cpp — libFuzzer target: the Jinja chat-template engine
// (tokenizer/chat_template.h). The input is a template source, then (after the first NUL
// byte, if any) a JSON array of messages; without one a fixed conversation with a tool call is
// rendered. Render limits are small so that a template cannot spend the run in one loop.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace {
const char* const kConversation = R"([
  {"role": "system", "content": "You are terse."},
  {"role": "user", "content": "What is 2+2? Use the tool."},
  {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
     {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
  {"role": "tool", "content": "4"},
  {"role": "assistant", "content": "4"}
])";
const char* const kTools = R"([{"type": "function", "function": {"name": "add", "description": "a + b",
  "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}])";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* p = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(p, 0, size);
  const size_t src_len = nul ? static_cast<size_t>(static_cast<const char*>(nul) - p) : size;
  auto tmpl = hs::ChatTemplate::parse(std::string_view(p, src_len));
  if (!tmpl.is_ok()) return 0;
  hs::ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(kConversation);
  if (nul) {
    auto m = nlohmann::ordered_json::parse(p + src_len + 1, p + size, nullptr, false);
    if (m.is_discarded()) return 0;
    in.messages = std::move(m);
  }
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra = nlohmann::ordered_json::object();
  in.extra["tools"] = nlohmann::ordered_json::parse(kTools);
  hs::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 100000;
  limits.max_call_depth = 32;
  (void)tmpl->render(in, limits);
  return 0;
}
