// server/openai_response.cpp — see openai_response.h.
#include "server/openai_response.h"

#include <chrono>
#include <cmath>
#include <random>

namespace hs::server {
namespace {

double clamp_logprob(float lp) { return std::isfinite(lp) && lp > kMinLogprob ? static_cast<double>(lp) : kMinLogprob; }

Json bytes_json(std::string_view s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

Json chat_token_entry(int32_t token, float logprob, const PieceFn& piece) {
  std::string_view p = piece(token);
  Json e;
  e["token"] = std::string(p);
  e["logprob"] = clamp_logprob(logprob);
  e["bytes"] = bytes_json(p);
  return e;
}

const char* chunk_object(bool chat) { return chat ? "chat.completion.chunk" : "text_completion"; }

Json response_head(const ResponseMeta& meta, const char* object) {
  Json j;
  j["id"] = meta.id;
  j["object"] = object;
  j["created"] = meta.created;
  j["model"] = meta.model;
  return j;
}

}  // namespace

std::string random_hex_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int w = 0; w < 2; ++w) {
    uint64_t x = rng();
    for (int i = 0; i < 16; ++i, x >>= 4) id += kHex[x & 15];
  }
  return id;
}

int64_t unix_seconds_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void add_choice_usage(UsageTotals& u, const RequestUsage& r, bool first_choice) {
  if (first_choice) {
    u.prompt_tokens = r.prompt_tokens;
    u.cached_tokens = r.cached_tokens;
  }
  u.completion_tokens += r.completion_tokens;
}

Json usage_json(const UsageTotals& u) {
  Json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}};
  return j;
}

Json chat_logprobs_json(std::span<const TokenLogprob> lps, const PieceFn& piece) {
  Json content = Json::array();
  for (const TokenLogprob& lp : lps) {
    Json e = chat_token_entry(lp.token, lp.logprob, piece);
    Json top = Json::array();
    for (const auto& [tok, l] : lp.top) top.push_back(chat_token_entry(tok, l, piece));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  Json j;
  j["content"] = std::move(content);
  return j;
}

Json completion_logprobs_json(std::span<const TokenLogprob> lps, const PieceFn& piece, int64_t& text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(), offsets = Json::array();
  for (const TokenLogprob& lp : lps) {
    std::string_view p = piece(lp.token);
    tokens.push_back(std::string(p));
    token_logprobs.push_back(clamp_logprob(lp.logprob));
    Json top = Json::object();
    top[std::string(p)] = clamp_logprob(lp.logprob);  // the chosen token is always listed (as vLLM)
    for (const auto& [tok, l] : lp.top) {
      std::string key(piece(tok));
      if (!top.contains(key)) top[key] = clamp_logprob(l);
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(p.size());
  }
  Json j;
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(token_logprobs);
  j["top_logprobs"] = std::move(top_logprobs);
  j["text_offset"] = std::move(offsets);
  return j;
}

Json tool_calls_json(const std::vector<ToolCall>& calls, bool stream) {
  Json arr = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c{{"id", calls[i].id}, {"type", "function"},
           {"function", Json{{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (stream) c["index"] = static_cast<int>(i);
    arr.push_back(std::move(c));
  }
  return arr;
}

Json chat_completion_json(const ResponseMeta& meta, std::span<const ChoiceResult> choices, const UsageTotals& usage,
                          bool logprobs, const PieceFn& piece) {
  Json j = response_head(meta, "chat.completion");
  Json arr = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    Json ch;
    ch["index"] = static_cast<int>(i);
    if (c.tool_calls.empty()) {
      ch["message"] = Json{{"role", "assistant"}, {"content", c.text}};
    } else {
      ch["message"] = Json{{"role", "assistant"},
                           {"content", c.text.empty() ? Json(nullptr) : Json(c.text)},
                           {"tool_calls", tool_calls_json(c.tool_calls, false)}};
    }
    ch["logprobs"] = logprobs ? chat_logprobs_json(c.logprobs, piece) : Json(nullptr);
    const bool stopped = c.finish == EventFinish::kStop || c.finish == EventFinish::kEos;
    ch["finish_reason"] = !c.tool_calls.empty() && stopped ? "tool_calls" : event_finish_name(c.finish);
    arr.push_back(std::move(ch));
  }
  j["choices"] = std::move(arr);
  j["usage"] = usage_json(usage);
  return j;
}

Json completion_json(const ResponseMeta& meta, std::span<const ChoiceResult> choices, const UsageTotals& usage,
                     bool logprobs, const PieceFn& piece) {
  Json j = response_head(meta, "text_completion");
  Json arr = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    Json ch;
    ch["index"] = static_cast<int>(i);
    ch["text"] = c.text;
    int64_t offset = 0;
    ch["logprobs"] = logprobs ? completion_logprobs_json(c.logprobs, piece, offset) : Json(nullptr);
    ch["finish_reason"] = event_finish_name(c.finish);
    arr.push_back(std::move(ch));
  }
  j["choices"] = std::move(arr);
  j["usage"] = usage_json(usage);
  return j;
}

Json chat_chunk_json(const ResponseMeta& meta, int index, Json delta, Json logprobs, const char* finish_reason,
                     bool include_usage) {
  Json j = response_head(meta, chunk_object(true));
  Json ch;
  ch["index"] = index;
  ch["delta"] = std::move(delta);
  ch["logprobs"] = std::move(logprobs);
  ch["finish_reason"] = finish_reason ? Json(finish_reason) : Json(nullptr);
  j["choices"] = Json::array({std::move(ch)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

Json completion_chunk_json(const ResponseMeta& meta, int index, std::string_view text, Json logprobs,
                           const char* finish_reason, bool include_usage) {
  Json j = response_head(meta, chunk_object(false));
  Json ch;
  ch["index"] = index;
  ch["text"] = std::string(text);
  ch["logprobs"] = std::move(logprobs);
  ch["finish_reason"] = finish_reason ? Json(finish_reason) : Json(nullptr);
  j["choices"] = Json::array({std::move(ch)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

Json usage_chunk_json(const ResponseMeta& meta, bool chat, const UsageTotals& usage) {
  Json j = response_head(meta, chunk_object(chat));
  j["choices"] = Json::array();
  j["usage"] = usage_json(usage);
  return j;
}

std::string sse_event(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string_view sse_done() { return "data: [DONE]\n\n"; }

}  // namespace hs::server
