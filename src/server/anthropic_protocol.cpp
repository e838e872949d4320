// server/anthropic_protocol.cpp — see anthropic_protocol.h.
#include "server/anthropic_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "server/json_fields.h"

namespace hs::server {
namespace {

// cache_control: {"type": "ephemeral", "ttl"?: "5m" | "1h"}. Accepted as a marker: the prefix
// cache keeps every prompt's prefix anyway (server/anthropic_protocol.h, docs/serving.md).
MaybeError check_cache_control(const Json& obj, const std::string& at) {
  const Json* cc = field(obj, "cache_control");
  if (!cc) return std::nullopt;
  const std::string p = at_key(at, "cache_control");
  if (!cc->is_object()) return type_error(p, "an object", *cc);
  HS_API_TRY(only_keys(*cc, {"type", "ttl"}, p));
  const Json* type = field(*cc, "type");
  if (!type || !type->is_string() || type->get_ref<const std::string&>() != "ephemeral")
    return invalid_request(fmt::format("'{}.type' must be \"ephemeral\"", p), p + ".type");
  if (const Json* ttl = field(*cc, "ttl")) {
    if (!ttl->is_string() || (*ttl != "5m" && *ttl != "1h"))
      return invalid_request(fmt::format("'{}.ttl' must be \"5m\" or \"1h\"", p), p + ".ttl");
  }
  return std::nullopt;
}

// A {"type": "text", "text", "cache_control"?, "citations"?: null | []} block → its text.
MaybeError text_block(const Json& b, const std::string& at, std::string& out) {
  HS_API_TRY(only_keys(b, {"type", "text", "cache_control", "citations"}, at));
  const Json* text = field(b, "text");
  if (!text || !text->is_string()) return invalid_request(fmt::format("'{}.text' must be a string", at), at + ".text");
  if (const Json* c = field(b, "citations"); c && !(c->is_array() && c->empty()))
    return invalid_request(fmt::format("'{}.citations' is not supported", at), at + ".citations");
  HS_API_TRY(check_cache_control(b, at));
  out = text->get<std::string>();
  return std::nullopt;
}

// The `type` of content block `b` at `at` (400 unless an object with a string type).
MaybeError block_type(const Json& b, const std::string& at, std::string& type) {
  if (!b.is_object()) return type_error(at, "a content block object", b);
  const Json* t = field(b, "type");
  if (!t || !t->is_string()) return invalid_request(fmt::format("'{}.type' must be a string", at), at + ".type");
  type = t->get<std::string>();
  return std::nullopt;
}

ApiError unsupported_block(const std::string& at, const std::string& type, const char* allowed) {
  return invalid_request(fmt::format("content block type '{}' is not supported here ({})",
                                     type.size() > 64 ? type.substr(0, 64) + "..." : type, allowed),
                         at + ".type");
}

void append_text(std::string& acc, bool& has, const std::string& t) {
  if (has) acc += '\n';
  acc += t;
  has = true;
}

// string | [text blocks] → the text (blocks joined by "\n").
MaybeError text_content(const Json& c, const std::string& at, std::string& out) {
  out.clear();
  if (c.is_string()) {
    out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return type_error(at, "a string or an array of text blocks", c);
  bool has = false;
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string bat = fmt::format("{}[{}]", at, k);
    std::string type, t;
    HS_API_TRY(block_type(c[k], bat, type));
    if (type != "text") return unsupported_block(bat, type, "text only");
    HS_API_TRY(text_block(c[k], bat, t));
    append_text(out, has, t);
  }
  return std::nullopt;
}

struct Converted {
  Json messages = Json::array();       // OpenAI-shaped
  std::vector<std::string> tool_uses;  // the tool_use ids seen so far
};

MaybeError convert_user(const Json& content, const std::string& at, Converted& cv) {
  if (content.is_string()) {
    cv.messages.push_back(Json{{"role", "user"}, {"content", content}});
    return std::nullopt;
  }
  std::string text;
  bool has_text = false;
  auto flush = [&] {
    if (!has_text) return;
    cv.messages.push_back(Json{{"role", "user"}, {"content", std::move(text)}});
    text.clear();
    has_text = false;
  };
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string bat = fmt::format("{}.content[{}]", at, j);
    const Json& b = content[j];
    std::string type;
    HS_API_TRY(block_type(b, bat, type));
    if (type == "text") {
      std::string t;
      HS_API_TRY(text_block(b, bat, t));
      append_text(text, has_text, t);
    } else if (type == "tool_result") {
      HS_API_TRY(only_keys(b, {"type", "tool_use_id", "content", "is_error", "cache_control"}, bat));
      const Json* id = field(b, "tool_use_id");
      if (!id || !id->is_string())
        return invalid_request(fmt::format("'{}.tool_use_id' must be a string", bat), bat + ".tool_use_id");
      if (std::find(cv.tool_uses.begin(), cv.tool_uses.end(), id->get_ref<const std::string&>()) == cv.tool_uses.end())
        return invalid_request(
            fmt::format("'{}.tool_use_id' '{}' answers no earlier tool_use block", bat, id->get<std::string>()),
            bat + ".tool_use_id");
      std::string result;
      if (const Json* c = field(b, "content")) HS_API_TRY(text_content(*c, bat + ".content", result));
      if (const Json* err = field(b, "is_error")) {
        if (!err->is_boolean()) return type_error(bat + ".is_error", "a boolean", *err);
        if (err->get<bool>()) result = "Error: " + result;  // the templates have no error flag: say it
      }
      HS_API_TRY(check_cache_control(b, bat));
      flush();
      cv.messages.push_back(Json{{"role", "tool"}, {"tool_call_id", *id}, {"content", std::move(result)}});
    } else if (type == "tool_use") {
      return invalid_request(fmt::format("'{}' is a tool_use block in a user message (they belong in assistant "
                                         "messages)",
                                         bat),
                             bat + ".type");
    } else {
      return unsupported_block(bat, type, "user messages take text and tool_result blocks");
    }
  }
  flush();
  return std::nullopt;
}

// An assistant message → {"role": "assistant", "content", "tool_calls"?}; `text` and `calls`
// report what it held (a final one without calls becomes the prefill).
MaybeError convert_assistant(const Json& content, const std::string& at, Converted& cv, std::string& text,
                             bool& has_calls) {
  text.clear();
  has_calls = false;
  Json calls = Json::array();
  if (content.is_string()) {
    text = content.get<std::string>();
  } else {
    bool has_text = false;
    for (size_t j = 0; j < content.size(); ++j) {
      const std::string bat = fmt::format("{}.content[{}]", at, j);
      const Json& b = content[j];
      std::string type;
      HS_API_TRY(block_type(b, bat, type));
      if (type == "text") {
        std::string t;
        HS_API_TRY(text_block(b, bat, t));
        append_text(text, has_text, t);
      } else if (type == "tool_use") {
        HS_API_TRY(only_keys(b, {"type", "id", "name", "input", "cache_control"}, bat));
        const Json* id = field(b, "id");
        const Json* name = field(b, "name");
        const Json* input = field(b, "input");
        if (!id || !id->is_string() || id->get_ref<const std::string&>().empty())
          return invalid_request(fmt::format("'{}.id' must be a non-empty string", bat), bat + ".id");
        if (!name || !name->is_string())
          return invalid_request(fmt::format("'{}.name' must be a string", bat), bat + ".name");
        if (!input || !input->is_object())
          return invalid_request(fmt::format("'{}.input' must be an object", bat), bat + ".input");
        HS_API_TRY(check_cache_control(b, bat));
        cv.tool_uses.push_back(id->get<std::string>());
        calls.push_back(Json{
            {"id", *id}, {"type", "function"}, {"function", Json{{"name", *name}, {"arguments", dump_json(*input)}}}});
      } else if (type == "tool_result") {
        return invalid_request(fmt::format("'{}' is a tool_result block in an assistant message (they belong in "
                                           "user messages)",
                                           bat),
                               bat + ".type");
      } else {
        return unsupported_block(bat, type, "assistant messages take text and tool_use blocks");
      }
    }
  }
  has_calls = !calls.empty();
  Json m{{"role", "assistant"}, {"content", text}};
  if (has_calls) m["tool_calls"] = std::move(calls);
  cv.messages.push_back(std::move(m));
  return std::nullopt;
}

MaybeError convert_messages(const Json& body, Converted& cv, std::string& prefill) {
  const Json* messages = field(body, "messages");
  if (!messages) return invalid_request("'messages' is required", "messages");
  if (!messages->is_array()) return type_error("messages", "an array", *messages);
  if (messages->empty()) return invalid_request("'messages' must not be empty", "messages");
  prefill.clear();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) return type_error(at, "an object", m);
    HS_API_TRY(only_keys(m, {"role", "content"}, at));
    const Json* role = field(m, "role");
    if (!role || !role->is_string())
      return invalid_request(fmt::format("'{}.role' must be \"user\" or \"assistant\"", at), at + ".role");
    const std::string& r = role->get_ref<const std::string&>();
    const Json* content = field(m, "content");
    if (!content) return invalid_request(fmt::format("'{}.content' is required", at), at + ".content");
    if (!content->is_string() && !content->is_array())
      return type_error(at + ".content", "a string or an array of content blocks", *content);
    const bool last = i + 1 == messages->size();
    if (r == "user") {
      if (content->is_array() && content->empty())
        return invalid_request(fmt::format("'{}.content' must not be empty", at), at + ".content");
      HS_API_TRY(convert_user(*content, at, cv));
    } else if (r == "assistant") {
      std::string text;
      bool has_calls = false;
      HS_API_TRY(convert_assistant(*content, at, cv, text, has_calls));
      if (last) {
        if (has_calls)
          return invalid_request(fmt::format("'{}' is a final assistant message with tool_use blocks: send their "
                                             "tool_result blocks in a user message after it",
                                             at),
                                 at + ".content");
        cv.messages.erase(cv.messages.size() - 1);  // the answer continues it
        prefill = std::move(text);
      }
    } else {
      return invalid_request(fmt::format("'{}.role' is '{}': expected \"user\" or \"assistant\" (a system prompt "
                                         "goes in the top-level 'system')",
                                         at, r.size() > 64 ? r.substr(0, 64) + "..." : r),
                             at + ".role");
    }
  }
  if (cv.messages.empty())
    return invalid_request(
        "'messages' holds only a final assistant message: a prefilled answer needs a user message "
        "before it",
        "messages");
  return std::nullopt;
}

MaybeError convert_system(const Json& body, Json& messages) {
  const Json* sys = field(body, "system");
  if (!sys) return std::nullopt;
  std::string text;
  if (!sys->is_string() && !sys->is_array()) return type_error("system", "a string or an array of text blocks", *sys);
  HS_API_TRY(text_content(*sys, "system", text));
  if (sys->is_array() && sys->empty()) return std::nullopt;
  messages.insert(messages.begin(), Json{{"role", "system"}, {"content", std::move(text)}});
  return std::nullopt;
}

// tools → OpenAI function tools; names collected for tool_choice.
MaybeError convert_tools(const Json& body, Json& openai, std::vector<std::string>& names) {
  const Json* tools = field(body, "tools");
  if (!tools) return std::nullopt;
  if (!tools->is_array()) return type_error("tools", "an array of tools", *tools);
  Json out = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) return type_error(at, "an object", t);
    if (const Json* type = field(t, "type"); type && *type != "custom") {
      const std::string shown = type->is_string() ? type->get<std::string>() : dump_json(*type);
      return invalid_request(fmt::format("tool type '{}' is not supported (server tools are not available; only "
                                         "custom tools with name, description and input_schema)",
                                         shown.size() > 64 ? shown.substr(0, 64) + "..." : shown),
                             at + ".type");
    }
    HS_API_TRY(only_keys(t, {"type", "name", "description", "input_schema", "cache_control", "strict"}, at));
    const Json* name = field(t, "name");
    if (!name || !name->is_string())
      return invalid_request(fmt::format("'{}.name' must be a string", at), at + ".name");
    const Json* schema = field(t, "input_schema");
    if (!schema) return invalid_request(fmt::format("'{}.input_schema' is required", at), at + ".input_schema");
    if (!schema->is_object()) return type_error(at + ".input_schema", "a JSON Schema object", *schema);
    if (const Json* strict = field(t, "strict")) {
      if (!strict->is_boolean()) return type_error(at + ".strict", "a boolean", *strict);
      if (strict->get<bool>())
        return invalid_request(fmt::format("'{}.strict' true is not supported: only a forced call (tool_choice any "
                                           "or tool) is held to its input_schema",
                                           at),
                               at + ".strict");
    }
    HS_API_TRY(check_cache_control(t, at));
    Json fn{{"name", *name}};
    if (const Json* d = field(t, "description")) fn["description"] = *d;  // its type: parse_tools_request
    fn["parameters"] = *schema;
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
    names.push_back(name->get<std::string>());
  }
  openai["tools"] = std::move(out);
  return std::nullopt;
}

MaybeError convert_tool_choice(const Json& body, const std::vector<std::string>& names, Json& openai) {
  const Json* tc = field(body, "tool_choice");
  if (!tc) return std::nullopt;
  if (!tc->is_object()) return type_error("tool_choice", "an object", *tc);
  const Json* type = field(*tc, "type");
  if (!type || !type->is_string())
    return invalid_request("'tool_choice.type' must be one of auto, any, tool, none", "tool_choice.type");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "none") {
    HS_API_TRY(only_keys(*tc, {"type"}, "tool_choice"));
    openai["tool_choice"] = "none";
    return std::nullopt;
  }
  if (t == "auto" || t == "any") {
    HS_API_TRY(only_keys(*tc, {"type", "disable_parallel_tool_use"}, "tool_choice"));
    openai["tool_choice"] = t == "auto" ? "auto" : "required";
  } else if (t == "tool") {
    HS_API_TRY(only_keys(*tc, {"type", "name", "disable_parallel_tool_use"}, "tool_choice"));
    const Json* name = field(*tc, "name");
    if (!name || !name->is_string())
      return invalid_request("'tool_choice.name' must be a string naming a tool", "tool_choice.name");
    if (std::find(names.begin(), names.end(), name->get_ref<const std::string&>()) == names.end())
      return invalid_request(
          fmt::format("'tool_choice.name' names '{}', which is not in 'tools'", name->get<std::string>()),
          "tool_choice.name");
    openai["tool_choice"] = Json{{"type", "function"}, {"function", Json{{"name", *name}}}};
  } else {
    return invalid_request(fmt::format("'tool_choice.type' '{}' is not one of auto, any, tool, none",
                                       t.size() > 64 ? t.substr(0, 64) + "..." : t),
                           "tool_choice.type");
  }
  if (const Json* dp = field(*tc, "disable_parallel_tool_use")) {
    if (!dp->is_boolean()) return type_error("tool_choice.disable_parallel_tool_use", "a boolean", *dp);
    openai["parallel_tool_calls"] = !dp->get<bool>();
  }
  return std::nullopt;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// An error of the OpenAI parsers, in the Anthropic body's names.
ApiError anthropic_names(ApiError e) {
  for (std::string* s : {&e.param, &e.message}) {
    replace_all(*s, ".function.parameters", ".input_schema");
    replace_all(*s, ".function.description", ".description");
    replace_all(*s, ".function.name", ".name");
    replace_all(*s, "parallel_tool_calls", "tool_choice.disable_parallel_tool_use");
  }
  if (e.param == "stop" || e.param.starts_with("stop[")) e.param = "stop_sequences" + e.param.substr(4);
  replace_all(e.message, "'stop'", "'stop_sequences'");
  replace_all(e.message, "'stop[", "'stop_sequences[");
  return e;
}

}  // namespace

MaybeError anthropic_to_openai_body(const Json& body, MessagesEndpoint ep, Json& openai, std::string& prefill) {
  const bool create = ep == MessagesEndpoint::kCreate;
  if (const Json* th = field(body, "thinking")) {
    if (!th->is_object() || field(*th, "type") == nullptr || (*th)["type"] != "disabled")
      return invalid_request("extended thinking is not supported ('thinking' may only be {\"type\": \"disabled\"})",
                             "thinking");
    HS_API_TRY(only_keys(*th, {"type"}, "thinking"));
  }
  if (create) {
    HS_API_TRY(
        only_keys(body,
                  {"model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p", "top_k",
                   "stream", "metadata", "tools", "tool_choice", "service_tier", "thinking", "cache_control"},
                  ""));
  } else {
    HS_API_TRY(
        only_keys(body, {"model", "messages", "system", "tools", "tool_choice", "thinking", "cache_control"}, ""));
  }
  HS_API_TRY(check_cache_control(body, ""));
  openai = Json::object();
  if (const Json* m = field(body, "model")) openai["model"] = *m;
  if (create) {
    const Json* mt = field(body, "max_tokens");
    if (!mt) return invalid_request("'max_tokens' is required", "max_tokens");
    openai["max_tokens"] = *mt;  // an integer >= 1: parse_chat_request
    for (const char* k : {"temperature", "top_p", "top_k", "stream"})
      if (const Json* v = field(body, k)) openai[k] = *v;
    if (const Json* st = field(body, "stop_sequences")) {
      if (!st->is_array()) return type_error("stop_sequences", "an array of strings", *st);
      for (size_t i = 0; i < st->size(); ++i)
        if (!(*st)[i].is_string()) return type_error(fmt::format("stop_sequences[{}]", i), "a string", (*st)[i]);
      openai["stop"] = *st;
    }
    if (const Json* md = field(body, "metadata")) {  // informational (user_id): nothing to do with it
      if (!md->is_object()) return type_error("metadata", "an object", *md);
      HS_API_TRY(only_keys(*md, {"user_id"}, "metadata"));
      if (const Json* uid = field(*md, "user_id"); uid && !uid->is_string())
        return type_error("metadata.user_id", "a string", *uid);
    }
    if (const Json* tier = field(body, "service_tier")) {
      if (!tier->is_string() || (*tier != "auto" && *tier != "standard_only"))
        return invalid_request("'service_tier' must be \"auto\" or \"standard_only\"", "service_tier");
    }
  }
  Converted cv;
  HS_API_TRY(convert_messages(body, cv, prefill));
  HS_API_TRY(convert_system(body, cv.messages));
  openai["messages"] = std::move(cv.messages);
  std::vector<std::string> names;
  HS_API_TRY(convert_tools(body, openai, names));
  HS_API_TRY(convert_tool_choice(body, names, openai));
  return std::nullopt;
}

MaybeError parse_messages_request(const Json& body, MessagesEndpoint ep, MessagesRequest& out) {
  out = MessagesRequest{};
  Json openai;
  std::string prefill;
  HS_API_TRY(anthropic_to_openai_body(body, ep, openai, prefill));
  if (auto e = parse_chat_request(openai, out.chat)) return anthropic_names(std::move(*e));
  if (auto e = parse_tools_request(openai, out.tools)) return anthropic_names(std::move(*e));
  out.chat.assistant_prefill = std::move(prefill);
  return std::nullopt;
}

std::string anthropic_tool_id(std::string_view call_id) {
  if (call_id.starts_with("call_")) call_id.remove_prefix(5);
  return "toolu_" + std::string(call_id);
}

const char* anthropic_stop_reason(EventFinish f, bool has_tool_calls) {
  switch (f) {
    case EventFinish::kEos:
      return has_tool_calls ? "tool_use" : "end_turn";
    case EventFinish::kStop:
      return has_tool_calls ? "tool_use" : "stop_sequence";
    case EventFinish::kLength:
      return "max_tokens";
    default:
      return "end_turn";  // failures never reach a Message
  }
}

Json anthropic_usage_json(const UsageTotals& u) {
  Json j;
  j["input_tokens"] = std::max(0, u.prompt_tokens - u.cached_tokens);
  j["output_tokens"] = u.completion_tokens;
  j["cache_read_input_tokens"] = u.cached_tokens;
  j["cache_creation_input_tokens"] = 0;
  return j;
}

namespace {

Json stop_sequence_json(const char* reason, std::string_view stop) {
  return std::string_view(reason) == "stop_sequence" && !stop.empty() ? Json(std::string(stop)) : Json(nullptr);
}

Json tool_use_block(const ToolCall& c, bool with_input) {
  Json input = Json::object();
  if (with_input) {
    input = Json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (input.is_discarded() || !input.is_object()) input = Json::object();  // the parser writes objects
  }
  return Json{{"type", "tool_use"}, {"id", anthropic_tool_id(c.id)}, {"name", c.name}, {"input", std::move(input)}};
}

}  // namespace

Json anthropic_message_json(const ResponseMeta& meta, const ChoiceResult& r, const UsageTotals& u) {
  Json j;
  j["id"] = meta.id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = meta.model;
  Json content = Json::array();
  if (!r.text.empty()) content.push_back(Json{{"type", "text"}, {"text", r.text}});
  for (const ToolCall& c : r.tool_calls) content.push_back(tool_use_block(c, true));
  j["content"] = std::move(content);
  const char* reason = anthropic_stop_reason(r.finish, !r.tool_calls.empty());
  j["stop_reason"] = reason;
  j["stop_sequence"] = stop_sequence_json(reason, r.stop_sequence);
  j["usage"] = anthropic_usage_json(u);
  return j;
}

const char* anthropic_error_type(const ApiError& e) {
  switch (e.status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 500:
      return "api_error";
    case 503:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      return e.status < 500 ? "invalid_request_error" : "api_error";
  }
}

Json anthropic_error_json(const ApiError& e, std::string_view request_id) {
  Json j;
  j["type"] = "error";
  // The body has no `param`: a message that does not name the field gets it in front, as
  // Anthropic writes its own validation errors ("messages.0.content: ...").
  std::string message = e.message;
  if (!e.param.empty() && message.find(e.param) == std::string::npos) message = e.param + ": " + message;
  j["error"] = Json{{"type", anthropic_error_type(e)}, {"message", std::move(message)}};
  if (!request_id.empty()) j["request_id"] = std::string(request_id);
  return j;
}

std::string sse_named_event(std::string_view type, const Json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", type, dump_json(data));
}

void MessageStreamEvents::start(std::string& out, int prompt_tokens) {
  Json msg;
  msg["id"] = meta_.id;
  msg["type"] = "message";
  msg["role"] = "assistant";
  msg["content"] = Json::array();
  msg["model"] = meta_.model;
  msg["stop_reason"] = nullptr;
  msg["stop_sequence"] = nullptr;
  msg["usage"] = Json{{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
  out += sse_named_event("message_start", Json{{"type", "message_start"}, {"message", std::move(msg)}});
}

void MessageStreamEvents::text(std::string& out, std::string_view text) {
  if (text.empty()) return;
  if (!text_open_) {
    text_open_ = true;
    out += sse_named_event("content_block_start", Json{{"type", "content_block_start"},
                                                       {"index", next_index_},
                                                       {"content_block", Json{{"type", "text"}, {"text", ""}}}});
  }
  out += sse_named_event("content_block_delta",
                         Json{{"type", "content_block_delta"},
                              {"index", next_index_},
                              {"delta", Json{{"type", "text_delta"}, {"text", std::string(text)}}}});
}

void MessageStreamEvents::close_block(std::string& out) {
  if (!text_open_) return;
  out += sse_named_event("content_block_stop", Json{{"type", "content_block_stop"}, {"index", next_index_}});
  text_open_ = false;
  ++next_index_;
}

void MessageStreamEvents::tool_calls(std::string& out, const std::vector<ToolCall>& calls) {
  if (calls.empty()) return;
  close_block(out);
  for (const ToolCall& c : calls) {
    const int index = next_index_++;
    out += sse_named_event(
        "content_block_start",
        Json{{"type", "content_block_start"}, {"index", index}, {"content_block", tool_use_block(c, false)}});
    out += sse_named_event("content_block_delta",
                           Json{{"type", "content_block_delta"},
                                {"index", index},
                                {"delta", Json{{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
    out += sse_named_event("content_block_stop", Json{{"type", "content_block_stop"}, {"index", index}});
  }
}

void MessageStreamEvents::stop(std::string& out, const char* stop_reason, std::string_view stop_sequence,
                               const UsageTotals& u) {
  close_block(out);
  out += sse_named_event("message_delta",
                         Json{{"type", "message_delta"},
                              {"delta", Json{{"stop_reason", stop_reason},
                                             {"stop_sequence", stop_sequence_json(stop_reason, stop_sequence)}}},
                              {"usage", anthropic_usage_json(u)}});
  out += sse_named_event("message_stop", Json{{"type", "message_stop"}});
}

void MessageStreamEvents::error(std::string& out, const ApiError& e) {
  out += sse_named_event("error", anthropic_error_json(e));
}

}  // namespace hs::server
