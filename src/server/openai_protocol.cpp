// server/openai_protocol.cpp — see openai_protocol.h.
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

#include "server/json_fields.h"

namespace hs::server {
namespace {

// The value as the client sent it, shortened for messages.
std::string shown(const Json& v) {
  std::string s = dump_json(v);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

MaybeError read_bool(const Json& obj, const char* key, bool& out) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return type_error(key, "a boolean", *v);
  out = v->get<bool>();
  return std::nullopt;
}

MaybeError read_string(const Json& obj, const char* key, std::string& out) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return type_error(key, "a string", *v);
  out = v->get<std::string>();
  return std::nullopt;
}

// A number in [lo, hi] ((lo, hi] when lo_open); `out` is unchanged when absent.
MaybeError read_float(const Json& obj, const char* key, float& out, double lo, double hi, bool lo_open = false) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return type_error(key, "a number", *v);
  const double x = v->get<double>();
  const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
  if (!ok)
    return invalid_request(fmt::format("'{}' must be in {}{}, {}], got {}", key, lo_open ? "(" : "[", lo, hi, shown(*v)),
                           key);
  out = static_cast<float>(x);
  return std::nullopt;
}

// An integer (an integral float such as 4.0 is accepted, as pydantic does) in [lo, hi].
MaybeError read_int_value(const Json& v, std::string_view param, int64_t lo, int64_t hi, int64_t& out) {
  int64_t x = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid_request(fmt::format("'{}' is out of range, got {}", param, shown(v)), std::string(param));
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) return type_error(param, "an integer", v);
    x = static_cast<int64_t>(d);
  } else {
    return type_error(param, "an integer", v);
  }
  if (x < lo || x > hi)
    return invalid_request(fmt::format("'{}' must be in [{}, {}], got {}", param, lo, hi, x), std::string(param));
  out = x;
  return std::nullopt;
}

MaybeError read_int(const Json& obj, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  HS_API_TRY(read_int_value(*v, key, lo, hi, x));
  out = x;
  return std::nullopt;
}

// Token ids: an array of integers in [0, INT32_MAX].
MaybeError read_token_array(const Json& v, std::string_view param, std::vector<int32_t>& out) {
  if (!v.is_array()) return type_error(param, "an array of token ids", v);
  out.clear();
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x = 0;
    HS_API_TRY(read_int_value(v[i], fmt::format("{}[{}]", param, i), 0, std::numeric_limits<int32_t>::max(), x));
    out.push_back(static_cast<int32_t>(x));
  }
  return std::nullopt;
}

// The fields chat and completions share (logprobs differ and are read by the callers).
MaybeError parse_generation_options(const Json& body, bool chat, GenerationOptions& g) {
  HS_API_TRY(read_string(body, "model", g.model));
  std::optional<int64_t> max_tokens, max_completion_tokens;
  HS_API_TRY(read_int(body, "max_tokens", 1, 1 << 30, max_tokens));
  if (chat) HS_API_TRY(read_int(body, "max_completion_tokens", 1, 1 << 30, max_completion_tokens));
  if (max_completion_tokens) max_tokens = max_completion_tokens;  // the newer name wins
  if (max_tokens) g.max_tokens = static_cast<int>(*max_tokens);

  SamplingParams& s = g.sampling;
  s = SamplingParams{};  // temperature 1, top_p 1, top_k/min_p/penalties off
  HS_API_TRY(read_float(body, "temperature", s.temperature, 0, 2));
  HS_API_TRY(read_float(body, "top_p", s.top_p, 0, 1, /*lo_open=*/true));
  HS_API_TRY(read_float(body, "min_p", s.min_p, 0, 1));
  HS_API_TRY(read_float(body, "presence_penalty", s.presence_penalty, -2, 2));
  HS_API_TRY(read_float(body, "frequency_penalty", s.frequency_penalty, -2, 2));
  HS_API_TRY(read_float(body, "repetition_penalty", s.repetition_penalty, 0, 10, /*lo_open=*/true));
  std::optional<int64_t> top_k, seed, n;
  HS_API_TRY(read_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(), top_k));
  if (top_k) s.top_k = *top_k <= 0 ? 0 : static_cast<int>(*top_k);  // -1 and 0: off
  HS_API_TRY(read_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed));
  if (seed) s.seed = static_cast<uint64_t>(*seed);
  HS_API_TRY(read_int(body, "n", 1, kMaxChoices, n));
  if (n) g.n = static_cast<int>(*n);

  if (const Json* stop = field(body, "stop")) {
    g.stop.clear();
    if (stop->is_string()) {
      if (!stop->get_ref<const std::string&>().empty()) g.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > static_cast<size_t>(kMaxStopStrings))
        return invalid_request(fmt::format("'stop' may hold at most {} strings, got {}", kMaxStopStrings, stop->size()),
                               "stop");
      for (size_t i = 0; i < stop->size(); ++i) {
        const Json& e = (*stop)[i];
        if (!e.is_string()) return type_error(fmt::format("stop[{}]", i), "a string", e);
        if (!e.get_ref<const std::string&>().empty()) g.stop.push_back(e.get<std::string>());
      }
    } else {
      return type_error("stop", "a string or an array of strings", *stop);
    }
  }
  HS_API_TRY(read_bool(body, "ignore_eos", g.ignore_eos));
  HS_API_TRY(read_bool(body, "stream", g.stream));
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object", *so);
    if (!g.stream)
      return invalid_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (const Json* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) return type_error("stream_options.include_usage", "a boolean", *iu);
      g.include_usage = iu->get<bool>();
    }
  }
  if (const Json* echo = field(body, "echo")) {
    if (!echo->is_boolean()) return type_error("echo", "a boolean", *echo);
    if (echo->get<bool>()) return invalid_request("'echo' is not supported", "echo");
  }
  if (const Json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) return type_error("logit_bias", "an object mapping token ids to biases", *lb);
    if (lb->size() > kMaxLogitBias)
      return invalid_request(fmt::format("'logit_bias' may hold at most {} tokens, got {}", kMaxLogitBias, lb->size()),
                             "logit_bias");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string& key = it.key();
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > std::numeric_limits<int32_t>::max())
        return invalid_request(fmt::format("'logit_bias' keys must be token ids, got {}", shown(Json(key))), "logit_bias");
      if (!it.value().is_number())
        return type_error(fmt::format("logit_bias.{}", key), "a number", it.value());
      const double b = it.value().get<double>();
      if (!(b >= -100 && b <= 100))
        return invalid_request(fmt::format("'logit_bias.{}' is {}: biases are -100..100", key, b), "logit_bias");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
  }
  // Fields OpenAI defines that change what is generated and that this server does not do:
  // a 400 naming each, never silently ignored (informational ones, user / metadata / store /
  // service_tier, are accepted).
  static constexpr const char* kChatOnlyUnsupported[][2] = {
      {"functions", "use 'tools'"},          {"function_call", "use 'tool_choice'"},
      {"audio", "audio output"},             {"prediction", "predicted outputs"},
      {"web_search_options", "web search"},  {"reasoning_effort", "reasoning models"}};
  if (chat)
    for (const auto& [name, what] : kChatOnlyUnsupported)
      if (field(body, name)) return invalid_request(fmt::format("'{}' is not supported ({})", name, what), name);
  if (const Json* mod = field(body, "modalities")) {
    if (!chat || !mod->is_array() || mod->size() != 1 || (*mod)[0] != "text")
      return invalid_request("'modalities' other than [\"text\"] is not supported", "modalities");
  }
  if (!chat && field(body, "suffix")) return invalid_request("'suffix' (insertion) is not supported", "suffix");
  if (const Json* best_of = field(body, "best_of")) {
    int64_t b = 0;
    HS_API_TRY(read_int_value(*best_of, "best_of", 1, kMaxChoices, b));
    if (b != g.n) return invalid_request("'best_of' other than 'n' is not supported", "best_of");
  }
  return std::nullopt;
}

// One chat message: role string; content a string, null, or an array of text parts.
MaybeError parse_message(const Json& m, size_t i, Json& out) {
  const std::string at = fmt::format("messages[{}]", i);
  if (!m.is_object()) return type_error(at, "an object", m);
  const Json* role = field(m, "role");
  if (!role) return invalid_request(fmt::format("'{}.role' is required", at), at + ".role");
  if (!role->is_string()) return type_error(at + ".role", "a string", *role);
  const std::string& r = role->get_ref<const std::string&>();
  if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool" && r != "function")
    return invalid_request(fmt::format("'{}.role' is '{}': expected system, developer, user, assistant or tool", at,
                                       r.size() > 64 ? r.substr(0, 64) + "..." : r),
                           at + ".role");
  out = m;
  const Json* content = field(m, "content");
  if (!content) {
    out["content"] = "";  // assistant turns with tool calls only
  } else if (content->is_array()) {
    std::string text;
    for (size_t j = 0; j < content->size(); ++j) {
      const Json& part = (*content)[j];
      const std::string pat = fmt::format("{}.content[{}]", at, j);
      if (!part.is_object()) return type_error(pat, "an object", part);
      const Json* type = field(part, "type");
      if (!type || !type->is_string())
        return invalid_request(fmt::format("'{}.type' must be a string", pat), pat + ".type");
      if (type->get_ref<const std::string&>() != "text")
        return invalid_request(fmt::format("content part type '{}' is not supported (text only)",
                                           type->get_ref<const std::string&>()),
                               pat + ".type");
      const Json* t = field(part, "text");
      if (!t || !t->is_string()) return invalid_request(fmt::format("'{}.text' must be a string", pat), pat + ".text");
      if (j > 0) text += '\n';
      text += t->get_ref<const std::string&>();
    }
    out["content"] = std::move(text);
  } else if (!content->is_string()) {
    return type_error(at + ".content", "a string or an array of content parts", *content);
  }
  // Assistant tool calls as clients send them (function.arguments a JSON string) are given to
  // the template with the arguments as an object, as vLLM does: the templates (Qwen2.5's
  // `tool_call.arguments | tojson`) were trained on objects.
  if (auto calls = out.find("tool_calls"); calls != out.end() && calls->is_array()) {
    for (Json& c : *calls) {
      if (!c.is_object()) continue;
      auto fn = c.find("function");
      if (fn == c.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string()) continue;
      Json parsed = Json::parse(args->get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded() && parsed.is_object()) *args = std::move(parsed);
    }
  }
  return std::nullopt;
}

MaybeError parse_messages(const Json& body, Json& out) {
  const Json* messages = field(body, "messages");
  if (!messages) return invalid_request("'messages' is required", "messages");
  if (!messages->is_array()) return type_error("messages", "an array", *messages);
  if (messages->empty()) return invalid_request("'messages' must not be empty", "messages");
  out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    Json m;
    HS_API_TRY(parse_message((*messages)[i], i, m));
    out.push_back(std::move(m));
  }
  return std::nullopt;
}

}  // namespace

MaybeError parse_json_body(std::string_view body, Json& out) {
  try {
    out = Json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    return invalid_request(fmt::format("malformed JSON body: {}", e.what()));
  }
  if (!out.is_object()) return invalid_request(fmt::format("the body must be a JSON object, got {}", out.type_name()));
  return std::nullopt;
}

MaybeError parse_chat_request(const Json& body, ChatRequest& out) {
  out = ChatRequest{};
  HS_API_TRY(parse_generation_options(body, /*chat=*/true, out.gen));
  HS_API_TRY(parse_messages(body, out.messages));
  bool logprobs = false;
  HS_API_TRY(read_bool(body, "logprobs", logprobs));
  std::optional<int64_t> top;
  HS_API_TRY(read_int(body, "top_logprobs", 0, kMaxTopLogprobs, top));
  if (top && !logprobs) return invalid_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  out.gen.logprobs = logprobs ? static_cast<int>(top.value_or(0)) : -1;
  HS_API_TRY(read_bool(body, "add_generation_prompt", out.add_generation_prompt));
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return type_error("chat_template_kwargs", "an object", *kw);
    out.template_kwargs = *kw;
  }
  return std::nullopt;
}

MaybeError parse_completion_request(const Json& body, CompletionRequest& out) {
  out = CompletionRequest{};
  HS_API_TRY(parse_generation_options(body, /*chat=*/false, out.gen));
  if (!out.gen.max_tokens) out.gen.max_tokens = kDefaultCompletionMaxTokens;
  std::optional<int64_t> logprobs;
  HS_API_TRY(read_int(body, "logprobs", 0, kMaxTopLogprobs, logprobs));
  out.gen.logprobs = logprobs ? static_cast<int>(*logprobs) : -1;

  const Json* prompt = field(body, "prompt");
  if (!prompt) return invalid_request("'prompt' is required", "prompt");
  if (prompt->is_string()) {
    out.prompt_is_tokens = false;
    out.prompt_text = prompt->get<std::string>();
    return std::nullopt;
  }
  if (!prompt->is_array())
    return type_error("prompt", "a string, an array of token ids, or an array with one string", *prompt);
  if (prompt->empty()) return invalid_request("'prompt' must not be empty", "prompt");
  const Json& first = (*prompt)[0];
  if (first.is_string() || first.is_array()) {  // a batch of prompts: only a batch of one
    if (prompt->size() > 1)
      return invalid_request(fmt::format("only one prompt per request is supported, got {}", prompt->size()),
                             "prompt");
    if (first.is_string()) {
      out.prompt_is_tokens = false;
      out.prompt_text = first.get<std::string>();
      return std::nullopt;
    }
    out.prompt_is_tokens = true;
    HS_API_TRY(read_token_array(first, "prompt[0]", out.prompt_tokens));
    if (out.prompt_tokens.empty()) return invalid_request("'prompt[0]' must not be empty", "prompt");
    return std::nullopt;
  }
  out.prompt_is_tokens = true;
  return read_token_array(*prompt, "prompt", out.prompt_tokens);
}

MaybeError parse_tokenize_request(const Json& body, TokenizeRequest& out) {
  out = TokenizeRequest{};
  HS_API_TRY(read_string(body, "model", out.model));
  const bool has_prompt = field(body, "prompt") != nullptr;
  out.has_messages = field(body, "messages") != nullptr;
  if (has_prompt == out.has_messages)
    return invalid_request("exactly one of 'prompt' and 'messages' is required", has_prompt ? "messages" : "prompt");
  if (has_prompt) {
    HS_API_TRY(read_string(body, "prompt", out.prompt));
  } else {
    HS_API_TRY(parse_messages(body, out.messages));
  }
  bool add_special = false;
  if (field(body, "add_special_tokens")) {
    HS_API_TRY(read_bool(body, "add_special_tokens", add_special));
    out.add_special_tokens = add_special;
  }
  return read_bool(body, "add_generation_prompt", out.add_generation_prompt);
}

MaybeError parse_detokenize_request(const Json& body, DetokenizeRequest& out) {
  out = DetokenizeRequest{};
  HS_API_TRY(read_string(body, "model", out.model));
  const Json* tokens = field(body, "tokens");
  if (!tokens) return invalid_request("'tokens' is required", "tokens");
  return read_token_array(*tokens, "tokens", out.tokens);
}

MaybeError check_model(const std::string& requested, const std::string& served) {
  if (requested.empty() || requested == served) return std::nullopt;
  return not_found(fmt::format("The model '{}' does not exist (this server serves '{}').", requested, served), "model");
}

MaybeError check_token_ids(std::span<const int32_t> ids, int n_vocab, const char* param) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n_vocab)
      return invalid_request(fmt::format("token id {} at {}[{}] is out of range [0, {})", ids[i], param, i, n_vocab),
                             param);
  return std::nullopt;
}

MaybeError resolve_max_tokens(const GenerationOptions& g, int prompt_tokens, int max_model_len, bool chat,
                              int& max_tokens) {
  const char* what = chat ? "messages" : "prompt";
  if (prompt_tokens <= 0) return invalid_request(fmt::format("the {} must contain at least one token", what), what);
  if (!g.max_tokens) {
    if (prompt_tokens >= max_model_len)
      return invalid_request(fmt::format("This model's maximum context length is {} tokens. However, your {} resulted "
                                         "in {} tokens, leaving no room for the completion. Please reduce the length "
                                         "of the {}.",
                                         max_model_len, what, prompt_tokens, what),
                             what);
    max_tokens = max_model_len - prompt_tokens;
    return std::nullopt;
  }
  const int64_t total = static_cast<int64_t>(prompt_tokens) + *g.max_tokens;
  if (total > max_model_len)
    return invalid_request(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                       "tokens ({} in the {}, {} in the completion). Please reduce the length of the "
                                       "{} or completion.",
                                       max_model_len, total, prompt_tokens, what, *g.max_tokens, what),
                           what);
  max_tokens = *g.max_tokens;
  return std::nullopt;
}

RequestParams make_request_params(const GenerationOptions& g, std::vector<int32_t> prompt, int max_tokens, int choice,
                                  double timeout_s) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling = g.sampling;
  if (p.sampling.seed) p.sampling.seed = *p.sampling.seed + static_cast<uint64_t>(choice);
  p.stop = g.stop;
  p.ignore_eos = g.ignore_eos;
  p.logprobs = g.logprobs;
  p.timeout_s = timeout_s;
  return p;
}

}  // namespace hs::server
