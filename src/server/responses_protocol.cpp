// server/responses_protocol.cpp — see responses_protocol.h.
#include "server/responses_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "server/anthropic_protocol.h"  // sse_named_event

#include "server/json_fields.h"

namespace hs::server {
namespace {

std::string cut(const std::string& s) { return s.size() > 64 ? s.substr(0, 64) + "..." : s; }

// A value as text for a message (strings without quotes).
std::string shown(const Json& v) { return cut(v.is_string() ? v.get<std::string>() : dump_json(v)); }

ApiError unsupported(const std::string& param, std::string_view why) {
  return invalid_request(fmt::format("'{}' is not supported by this server{}{}", param, why.empty() ? "" : ": ", why),
                         param);
}

MaybeError string_field(const Json& obj, std::string_view key, const std::string& at, std::string& out,
                        bool non_empty = true) {
  const std::string p = at_key(at, key);
  const Json* v = field(obj, key);
  if (!v) return invalid_request(fmt::format("'{}' is required", p), p);
  if (!v->is_string()) return type_error(p, "a string", *v);
  if (non_empty && v->get_ref<const std::string&>().empty())
    return invalid_request(fmt::format("'{}' must not be empty", p), p);
  out = v->get<std::string>();
  return std::nullopt;
}

// ---- input ----

struct Converted {
  Json messages = Json::array();      // OpenAI-shaped
  std::vector<std::string> call_ids;  // the function_call call_ids seen so far
};

// A content array → its text (parts joined by "\n"). `refusal`: assistant messages may hold
// refusal parts (their text is the turn's text).
MaybeError text_parts(const Json& content, const std::string& at, bool refusal, std::string& out) {
  out.clear();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string pat = fmt::format("{}[{}]", at, j);
    const Json& part = content[j];
    if (!part.is_object()) return type_error(pat, "a content part object", part);
    const Json* type = field(part, "type");
    if (!type || !type->is_string())
      return invalid_request(fmt::format("'{}.type' must be a string", pat), pat + ".type");
    const std::string& t = type->get_ref<const std::string&>();
    std::string text;
    if (t == "input_text") {
      HS_API_TRY(only_keys(part, {"type", "text"}, pat));
      HS_API_TRY(string_field(part, "text", pat, text, false));
    } else if (t == "output_text") {  // an earlier answer sent back; its annotations and logprobs are records
      HS_API_TRY(only_keys(part, {"type", "text", "annotations", "logprobs"}, pat));
      HS_API_TRY(string_field(part, "text", pat, text, false));
      for (const char* k : {"annotations", "logprobs"})
        if (const Json* a = field(part, k); a && !a->is_array()) return type_error(at_key(pat, k), "an array", *a);
    } else if (t == "refusal" && refusal) {
      HS_API_TRY(only_keys(part, {"type", "refusal"}, pat));
      HS_API_TRY(string_field(part, "refusal", pat, text, false));
    } else {
      return invalid_request(fmt::format("'{}.type' '{}' is not supported here (text only: input_text, "
                                         "output_text{})",
                                         pat, cut(t), refusal ? ", refusal" : ""),
                             pat + ".type");
    }
    if (j > 0) out += '\n';
    out += text;
  }
  return std::nullopt;
}

MaybeError convert_message(const Json& item, const std::string& at, Converted& cv) {
  HS_API_TRY(only_keys(item, {"type", "role", "content", "id", "status", "phase"}, at));
  const Json* role = field(item, "role");
  if (!role || !role->is_string())
    return invalid_request(fmt::format("'{}.role' must be one of user, assistant, system, developer", at),
                           at + ".role");
  std::string r = role->get<std::string>();
  if (r != "user" && r != "assistant" && r != "system" && r != "developer")
    return invalid_request(fmt::format("'{}.role' is '{}': expected user, assistant, system or developer", at, cut(r)),
                           at + ".role");
  if (r == "developer") r = "system";  // OpenAI's newer name for it; the chat templates know "system"
  const Json* content = field(item, "content");
  if (!content) return invalid_request(fmt::format("'{}.content' is required", at), at + ".content");
  std::string text;
  if (content->is_string()) {
    text = content->get<std::string>();
  } else if (content->is_array()) {
    HS_API_TRY(text_parts(*content, at + ".content", r == "assistant", text));
  } else {
    return type_error(at + ".content", "a string or an array of content parts", *content);
  }
  cv.messages.push_back(Json{{"role", std::move(r)}, {"content", std::move(text)}});
  return std::nullopt;
}

MaybeError convert_function_call(const Json& item, const std::string& at, Converted& cv) {
  HS_API_TRY(only_keys(item, {"type", "call_id", "name", "arguments", "id", "status"}, at));
  std::string call_id, name, arguments;
  HS_API_TRY(string_field(item, "call_id", at, call_id));
  HS_API_TRY(string_field(item, "name", at, name));
  HS_API_TRY(string_field(item, "arguments", at, arguments, false));
  const Json args = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded() || !args.is_object())
    return invalid_request(fmt::format("'{}.arguments' must be a JSON object serialised as a string", at),
                           at + ".arguments");
  cv.call_ids.push_back(call_id);
  Json call{{"id", std::move(call_id)},
            {"type", "function"},
            {"function", Json{{"name", std::move(name)}, {"arguments", std::move(arguments)}}}};
  // The calls of one turn follow its text (or each other): one assistant message holds them.
  if (!cv.messages.empty() && cv.messages.back()["role"] == "assistant") {
    Json& m = cv.messages.back();
    if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
    m["tool_calls"].push_back(std::move(call));
  } else {
    cv.messages.push_back(Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({std::move(call)})}});
  }
  return std::nullopt;
}

MaybeError convert_function_call_output(const Json& item, const std::string& at, Converted& cv) {
  HS_API_TRY(only_keys(item, {"type", "call_id", "output", "id", "status"}, at));
  std::string call_id;
  HS_API_TRY(string_field(item, "call_id", at, call_id));
  if (std::find(cv.call_ids.begin(), cv.call_ids.end(), call_id) == cv.call_ids.end())
    return invalid_request(fmt::format("'{}.call_id' '{}' answers no earlier function_call item", at, cut(call_id)),
                           at + ".call_id");
  const Json* output = field(item, "output");
  if (!output) return invalid_request(fmt::format("'{}.output' is required", at), at + ".output");
  std::string text;
  if (output->is_string()) {
    text = output->get<std::string>();
  } else if (output->is_array()) {
    HS_API_TRY(text_parts(*output, at + ".output", false, text));
  } else {
    return type_error(at + ".output", "a string or an array of input_text parts", *output);
  }
  cv.messages.push_back(Json{{"role", "tool"}, {"tool_call_id", std::move(call_id)}, {"content", std::move(text)}});
  return std::nullopt;
}

MaybeError convert_input(const Json& body, Converted& cv) {
  const Json* input = field(body, "input");
  if (!input) return invalid_request("'input' is required", "input");
  if (input->is_string()) {
    cv.messages.push_back(Json{{"role", "user"}, {"content", *input}});
    return std::nullopt;
  }
  if (!input->is_array()) return type_error("input", "a string or an array of input items", *input);
  if (input->empty()) return invalid_request("'input' must not be empty", "input");
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string at = fmt::format("input[{}]", i);
    if (!item.is_object()) return type_error(at, "an input item object", item);
    const Json* type = field(item, "type");
    if (type && !type->is_string()) return type_error(at + ".type", "a string", *type);
    const std::string t = type ? type->get<std::string>() : "message";
    if (t == "message") {
      HS_API_TRY(convert_message(item, at, cv));
    } else if (t == "function_call") {
      HS_API_TRY(convert_function_call(item, at, cv));
    } else if (t == "function_call_output") {
      HS_API_TRY(convert_function_call_output(item, at, cv));
    } else if (t == "item_reference") {
      return invalid_request(fmt::format("'{}.type' item_reference is not supported: this server stores no items; "
                                         "send the item itself",
                                         at),
                             at + ".type");
    } else {
      return invalid_request(fmt::format("'{}.type' '{}' is not supported (message, function_call and "
                                         "function_call_output items only)",
                                         at, cut(t)),
                             at + ".type");
    }
  }
  return std::nullopt;
}

// ---- tools, tool_choice, text ----

MaybeError convert_tools(const Json& body, Json& chat, Json& echo, std::vector<std::string>& names) {
  echo["tools"] = Json::array();
  const Json* tools = field(body, "tools");
  if (!tools) return std::nullopt;
  if (!tools->is_array()) return type_error("tools", "an array of tools", *tools);
  Json out = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) return type_error(at, "a tool object", t);
    const Json* type = field(t, "type");
    if (!type || !type->is_string())
      return invalid_request(fmt::format("'{}.type' must be \"function\"", at), at + ".type");
    if (*type != "function")
      return invalid_request(fmt::format("'{}.type' '{}' is not supported: built-in tools (web search, file "
                                         "search, computer use, code interpreter, MCP, image generation, shell, ...) "
                                         "do not run on this server; only function tools",
                                         at, shown(*type)),
                             at + ".type");
    HS_API_TRY(only_keys(t, {"type", "name", "description", "parameters", "strict", "defer_loading",
                              "allowed_callers"},
                          at));
    std::string name;
    HS_API_TRY(string_field(t, "name", at, name));  // the characters: parse_tools_request
    const Json* desc = field(t, "description");
    if (desc && !desc->is_string()) return type_error(at + ".description", "a string", *desc);
    const Json* params = field(t, "parameters");
    if (params && !params->is_object()) return type_error(at + ".parameters", "a JSON Schema object", *params);
    const Json* strict = field(t, "strict");
    if (strict && !strict->is_boolean()) return type_error(at + ".strict", "a boolean", *strict);
    if (const Json* dl = field(t, "defer_loading")) {
      if (!dl->is_boolean()) return type_error(at + ".defer_loading", "a boolean", *dl);
      if (dl->get<bool>()) return unsupported(at + ".defer_loading", "tool search is not available; send the tool");
    }
    if (const Json* ac = field(t, "allowed_callers"); ac && *ac != Json::array({"direct"}))
      return unsupported(at + ".allowed_callers", "the model is the only caller (only [\"direct\"])");
    Json fn{{"name", name}};
    if (desc) fn["description"] = *desc;
    if (params) fn["parameters"] = *params;
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
    echo["tools"].push_back(Json{{"type", "function"},
                                 {"name", name},
                                 {"description", desc ? *desc : Json(nullptr)},
                                 {"parameters", params ? *params : Json(nullptr)},
                                 {"strict", strict ? *strict : Json(nullptr)}});
    names.push_back(std::move(name));
  }
  chat["tools"] = std::move(out);
  return std::nullopt;
}

MaybeError convert_tool_choice(const Json& body, const std::vector<std::string>& names, Json& chat, Json& echo) {
  echo["tool_choice"] = "auto";
  const Json* tc = field(body, "tool_choice");
  if (!tc) return std::nullopt;
  if (tc->is_string()) {
    const std::string& c = tc->get_ref<const std::string&>();
    if (c != "auto" && c != "none" && c != "required")
      return invalid_request(fmt::format("'tool_choice' '{}' is not one of auto, none, required", cut(c)),
                             "tool_choice");
    echo["tool_choice"] = c;
    if (c == "auto" && names.empty()) return std::nullopt;  // nothing to choose from: means nothing
    if (c == "required" && names.empty())
      return invalid_request("'tool_choice' \"required\" needs function 'tools'", "tool_choice");
    chat["tool_choice"] = c;
    return std::nullopt;
  }
  if (!tc->is_object()) return type_error("tool_choice", "a string or an object", *tc);
  const Json* type = field(*tc, "type");
  if (!type || !type->is_string())
    return invalid_request("'tool_choice.type' must be \"function\"", "tool_choice.type");
  if (*type != "function")
    return invalid_request(fmt::format("'tool_choice.type' '{}' is not supported (only function tools: "
                                       "{{\"type\": \"function\", \"name\": ...}}, or auto / none / required)",
                                       shown(*type)),
                           "tool_choice.type");
  HS_API_TRY(only_keys(*tc, {"type", "name"}, "tool_choice"));
  std::string name;
  HS_API_TRY(string_field(*tc, "name", "tool_choice", name));
  if (std::find(names.begin(), names.end(), name) == names.end())
    return invalid_request(fmt::format("'tool_choice.name' names '{}', which is not in 'tools'", cut(name)),
                           "tool_choice.name");
  chat["tool_choice"] = Json{{"type", "function"}, {"function", Json{{"name", name}}}};
  echo["tool_choice"] = Json{{"type", "function"}, {"name", name}};
  return std::nullopt;
}

MaybeError convert_text(const Json& body, Json& chat, Json& echo) {
  echo["text"] = Json{{"format", Json{{"type", "text"}}}, {"verbosity", "medium"}};
  const Json* text = field(body, "text");
  if (!text) return std::nullopt;
  if (!text->is_object()) return type_error("text", "an object", *text);
  HS_API_TRY(only_keys(*text, {"format", "verbosity"}, "text"));
  if (const Json* v = field(*text, "verbosity"); v && *v != "medium")
    return invalid_request(fmt::format("'text.verbosity' '{}' is not supported (only \"medium\": the model's own "
                                       "length)",
                                       shown(*v)),
                           "text.verbosity");
  const Json* format = field(*text, "format");
  if (!format) return std::nullopt;
  if (!format->is_object()) return type_error("text.format", "an object", *format);
  const Json* type = field(*format, "type");
  if (!type || !type->is_string())
    return invalid_request("'text.format.type' must be 'text', 'json_object' or 'json_schema'", "text.format.type");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text" || t == "json_object") {
    HS_API_TRY(only_keys(*format, {"type"}, "text.format"));
    chat["response_format"] = Json{{"type", t}};
    echo["text"]["format"] = Json{{"type", t}};
    return std::nullopt;
  }
  if (t != "json_schema")
    return invalid_request(
        fmt::format("'text.format.type' is '{}': expected 'text', 'json_object' or 'json_schema'", cut(t)),
        "text.format.type");
  HS_API_TRY(only_keys(*format, {"type", "name", "schema", "strict", "description"}, "text.format"));
  std::string name;
  HS_API_TRY(string_field(*format, "name", "text.format", name));
  if (const Json* d = field(*format, "description"); d && !d->is_string())
    return type_error("text.format.description", "a string", *d);
  Json js = Json::object();  // the chat shape; schema and strict are checked by parse_response_format
  for (const char* k : {"name", "description", "schema", "strict"})
    if (const Json* v = field(*format, k)) js[k] = *v;
  chat["response_format"] = Json{{"type", "json_schema"}, {"json_schema", js}};
  Json echoed{{"type", "json_schema"}};
  for (const auto& [k, v] : js.items()) echoed[k] = v;
  echo["text"]["format"] = std::move(echoed);
  return std::nullopt;
}

// ---- the other top-level fields ----

// Fields with no meaning on a server that stores nothing and runs one local model: a 400
// saying why (before the generic "not supported" of only_keys).
MaybeError check_unsupported(const Json& body) {
  if (field(body, "previous_response_id"))
    return unsupported("previous_response_id",
                       "it stores no responses; send the whole conversation in 'input' (the earlier output items, "
                       "then the new input)");
  if (field(body, "conversation"))
    return unsupported("conversation", "it stores no conversations; send the whole conversation in 'input'");
  if (field(body, "prompt"))
    return unsupported("prompt", "there are no stored prompt templates; send the text in 'instructions' and 'input'");
  if (field(body, "context_management")) return unsupported("context_management", "there is no server-side compaction");
  if (const Json* bg = field(body, "background")) {
    if (!bg->is_boolean()) return type_error("background", "a boolean", *bg);
    if (bg->get<bool>())
      return invalid_request("'background' true is not supported: a response runs within its request (use 'stream')",
                             "background");
  }
  if (field(body, "top_logprobs"))
    return unsupported("top_logprobs", "use /v1/chat/completions with 'logprobs' and 'top_logprobs'");
  if (const Json* inc = field(body, "include")) {
    if (!inc->is_array()) return type_error("include", "an array", *inc);
    if (!inc->empty())
      return invalid_request(fmt::format("'include[0]' value '{}' is not supported (no built-in tools, images, "
                                         "reasoning or logprobs here)",
                                         shown((*inc)[0])),
                             "include[0]");
  }
  if (const Json* tr = field(body, "truncation"); tr && *tr != "disabled")
    return invalid_request(fmt::format("'truncation' '{}' is not supported: an input longer than the context is a 400 "
                                       "(only \"disabled\")",
                                       shown(*tr)),
                           "truncation");
  if (const Json* rs = field(body, "reasoning")) {
    if (!rs->is_object()) return type_error("reasoning", "an object", *rs);
    HS_API_TRY(only_keys(*rs, {"effort", "summary", "generate_summary"}, "reasoning"));
    if (const Json* e = field(*rs, "effort"); e && *e != "none")
      return invalid_request(
          fmt::format("'reasoning.effort' '{}' is not supported: this server runs no reasoning (only \"none\")",
                      shown(*e)),
          "reasoning.effort");
    for (const char* k : {"summary", "generate_summary"})
      if (field(*rs, k)) return unsupported(at_key("reasoning", k), "this server runs no reasoning");
  }
  return std::nullopt;
}

MaybeError convert_markers(const Json& body, Json& echo) {
  echo["metadata"] = Json::object();
  if (const Json* md = field(body, "metadata")) {
    if (!md->is_object()) return type_error("metadata", "an object of strings", *md);
    if (md->size() > 16) return invalid_request("'metadata' may hold at most 16 keys", "metadata");
    for (const auto& [k, v] : md->items()) {
      const std::string p = "metadata." + cut(k);
      if (k.size() > 64) return invalid_request(fmt::format("'{}': keys are at most 64 characters", p), "metadata");
      if (!v.is_string()) return type_error(p, "a string", v);
      if (v.get_ref<const std::string&>().size() > 512)
        return invalid_request(fmt::format("'{}' is longer than 512 characters", p), p);
    }
    echo["metadata"] = *md;
  }
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key"}) {
    echo[k] = nullptr;
    if (const Json* v = field(body, k)) {
      if (!v->is_string()) return type_error(k, "a string", *v);
      echo[k] = *v;
    }
  }
  echo["prompt_cache_retention"] = nullptr;
  if (const Json* r = field(body, "prompt_cache_retention")) {
    if (*r != "in_memory")
      return invalid_request(fmt::format("'prompt_cache_retention' '{}' is not supported (only \"in_memory\": the "
                                         "prefix cache keeps pages in memory until they are evicted)",
                                         shown(*r)),
                             "prompt_cache_retention");
    echo["prompt_cache_retention"] = *r;
  }
  if (const Json* st = field(body, "store"); st && !st->is_boolean()) return type_error("store", "a boolean", *st);
  if (const Json* tier = field(body, "service_tier"); tier && *tier != "auto" && *tier != "default")
    return invalid_request(fmt::format("'service_tier' '{}' is not supported (\"auto\" or \"default\": there is one "
                                       "tier)",
                                       shown(*tier)),
                           "service_tier");
  echo["max_tool_calls"] = nullptr;
  if (const Json* mtc = field(body, "max_tool_calls")) {
    if (!mtc->is_number_integer() || mtc->get<int64_t>() < 0)
      return type_error("max_tool_calls", "a non-negative integer", *mtc);
    echo["max_tool_calls"] = *mtc;  // it bounds built-in tool calls, and none run here
  }
  return std::nullopt;
}

MaybeError convert_stream_options(const Json& body) {
  const Json* so = field(body, "stream_options");
  if (!so) return std::nullopt;
  if (!so->is_object()) return type_error("stream_options", "an object", *so);
  const Json* stream = field(body, "stream");
  if (!stream || *stream != true)
    return invalid_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
  HS_API_TRY(only_keys(*so, {"include_obfuscation"}, "stream_options"));
  if (const Json* ob = field(*so, "include_obfuscation")) {
    if (!ob->is_boolean()) return type_error("stream_options.include_obfuscation", "a boolean", *ob);
    if (ob->get<bool>())
      return invalid_request("'stream_options.include_obfuscation' true is not supported (events are not padded)",
                             "stream_options.include_obfuscation");
  }
  return std::nullopt;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

Json get_or(const Json& obj, const char* key, Json fallback) {
  auto it = obj.find(key);
  return it == obj.end() ? std::move(fallback) : *it;
}

}  // namespace

MaybeError responses_to_chat_body(const Json& body, Json& chat, Json& echo) {
  HS_API_TRY(check_unsupported(body));
  HS_API_TRY(only_keys(body,
                        {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
                         "stream_options", "tools", "tool_choice", "parallel_tool_calls", "text", "metadata", "user",
                         "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "store", "service_tier",
                         "max_tool_calls", "include", "truncation", "reasoning", "background"},
                        ""));
  chat = Json::object();
  echo = Json::object();
  if (const Json* m = field(body, "model")) chat["model"] = *m;
  echo["max_output_tokens"] = nullptr;
  if (const Json* mt = field(body, "max_output_tokens")) {
    chat["max_tokens"] = *mt;  // an integer >= 1: parse_chat_request
    echo["max_output_tokens"] = *mt;
  }
  echo["temperature"] = 1.0;
  echo["top_p"] = 1.0;
  for (const char* k : {"temperature", "top_p"})
    if (const Json* v = field(body, k)) chat[k] = echo[k] = *v;
  if (const Json* s = field(body, "stream")) chat["stream"] = *s;
  HS_API_TRY(convert_stream_options(body));

  Converted cv;
  echo["instructions"] = nullptr;
  if (const Json* ins = field(body, "instructions")) {
    if (!ins->is_string()) return type_error("instructions", "a string", *ins);
    echo["instructions"] = *ins;
    if (!ins->get_ref<const std::string&>().empty())
      cv.messages.push_back(Json{{"role", "system"}, {"content", *ins}});
  }
  HS_API_TRY(convert_input(body, cv));
  chat["messages"] = std::move(cv.messages);

  std::vector<std::string> names;
  HS_API_TRY(convert_tools(body, chat, echo, names));
  HS_API_TRY(convert_tool_choice(body, names, chat, echo));
  echo["parallel_tool_calls"] = true;
  if (const Json* p = field(body, "parallel_tool_calls")) chat["parallel_tool_calls"] = echo["parallel_tool_calls"] = *p;
  HS_API_TRY(convert_text(body, chat, echo));
  HS_API_TRY(convert_markers(body, echo));
  echo["reasoning"] = Json{{"effort", nullptr}, {"summary", nullptr}};
  if (const Json* rs = field(body, "reasoning"); rs && field(*rs, "effort")) echo["reasoning"]["effort"] = "none";
  return std::nullopt;
}

ApiError responses_names(ApiError e) {
  for (std::string* s : {&e.param, &e.message}) {
    replace_all(*s, ".function.parameters", ".parameters");
    replace_all(*s, ".function.description", ".description");
    replace_all(*s, ".function.name", ".name");
    replace_all(*s, "response_format.json_schema", "text.format");
    replace_all(*s, "response_format", "text.format");
    replace_all(*s, "max_tokens", "max_output_tokens");
  }
  if (e.param == "messages" || e.param.starts_with("messages[")) {
    e.param = "input";
    for (std::string_view w : {"'messages'", "your messages", "the messages"}) {
      std::string to(w);
      replace_all(to, "messages", "input");
      replace_all(e.message, w, to);
    }
  }
  return e;
}

MaybeError parse_responses_request(const Json& body, ResponsesRequest& out) {
  out = ResponsesRequest{};
  Json chat;
  HS_API_TRY(responses_to_chat_body(body, chat, out.echo));
  if (auto e = parse_chat_request(chat, out.chat)) return responses_names(std::move(*e));
  if (auto e = parse_tools_request(chat, out.tools)) return responses_names(std::move(*e));
  if (auto e = parse_response_format(chat, out.format)) return responses_names(std::move(*e));
  return std::nullopt;
}

std::string function_call_item_id(std::string_view call_id) {
  if (call_id.starts_with("call_")) call_id.remove_prefix(5);
  return "fc_" + std::string(call_id);
}

Json responses_usage_json(const UsageTotals& u) {
  Json j;
  j["input_tokens"] = u.prompt_tokens;
  j["input_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}, {"cache_write_tokens", 0}};
  j["output_tokens"] = u.completion_tokens;
  j["output_tokens_details"] = Json{{"reasoning_tokens", 0}};
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

const char* response_status(EventFinish f) { return f == EventFinish::kLength ? "incomplete" : "completed"; }

Json message_item_json(const std::string& id, const std::string& text, const char* status) {
  Json part{{"type", "output_text"}, {"annotations", Json::array()}, {"logprobs", Json::array()}, {"text", text}};
  return Json{{"id", id},
              {"type", "message"},
              {"status", status},
              {"content", Json::array({std::move(part)})},
              {"role", "assistant"}};
}

Json function_call_item_json(const ToolCall& c, const char* status, bool with_arguments) {
  return Json{{"id", function_call_item_id(c.id)},
              {"type", "function_call"},
              {"status", status},
              {"arguments", with_arguments ? c.arguments : std::string()},
              {"call_id", c.id},
              {"name", c.name}};
}

Json response_object_json(const ResponseMeta& meta, const Json& echo, std::string_view status, Json output, Json usage,
                          Json error) {
  Json j;
  j["id"] = meta.id;
  j["object"] = "response";
  j["created_at"] = meta.created;
  j["status"] = std::string(status);
  j["background"] = false;
  j["completed_at"] = status == "completed" ? Json(unix_seconds_now()) : Json(nullptr);
  j["error"] = std::move(error);
  j["incomplete_details"] = status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
  j["instructions"] = get_or(echo, "instructions", nullptr);
  j["max_output_tokens"] = get_or(echo, "max_output_tokens", nullptr);
  j["max_tool_calls"] = get_or(echo, "max_tool_calls", nullptr);
  j["model"] = meta.model;
  j["output"] = std::move(output);
  j["parallel_tool_calls"] = get_or(echo, "parallel_tool_calls", true);
  j["previous_response_id"] = nullptr;
  j["prompt_cache_key"] = get_or(echo, "prompt_cache_key", nullptr);
  j["prompt_cache_retention"] = get_or(echo, "prompt_cache_retention", nullptr);
  j["reasoning"] = get_or(echo, "reasoning", Json{{"effort", nullptr}, {"summary", nullptr}});
  j["safety_identifier"] = get_or(echo, "safety_identifier", nullptr);
  j["service_tier"] = "default";
  j["store"] = false;  // nothing is stored, whatever the request said (docs/serving.md)
  j["temperature"] = get_or(echo, "temperature", 1.0);
  j["text"] = get_or(echo, "text", Json{{"format", Json{{"type", "text"}}}, {"verbosity", "medium"}});
  j["tool_choice"] = get_or(echo, "tool_choice", "auto");
  j["tools"] = get_or(echo, "tools", Json::array());
  j["top_logprobs"] = 0;
  j["top_p"] = get_or(echo, "top_p", 1.0);
  j["truncation"] = "disabled";
  j["usage"] = std::move(usage);
  j["user"] = get_or(echo, "user", nullptr);
  j["metadata"] = get_or(echo, "metadata", Json::object());
  return j;
}

Json response_json(const ResponseMeta& meta, const Json& echo, const ChoiceResult& r, const UsageTotals& u,
                   const std::string& message_id) {
  const char* status = response_status(r.finish);
  Json output = Json::array();
  if (!r.text.empty() || r.tool_calls.empty()) output.push_back(message_item_json(message_id, r.text, status));
  for (const ToolCall& c : r.tool_calls) output.push_back(function_call_item_json(c, "completed"));
  return response_object_json(meta, echo, status, std::move(output), responses_usage_json(u));
}

void ResponseStreamEvents::emit(std::string& out, const char* type, Json data) {
  Json j;
  j["type"] = type;
  j["sequence_number"] = seq_++;
  for (auto& [k, v] : data.items()) j[k] = std::move(v);
  out += sse_named_event(type, j);
}

void ResponseStreamEvents::start(std::string& out) {
  for (const char* type : {"response.created", "response.in_progress"})
    emit(out, type, Json{{"response", response_object_json(meta_, echo_, "in_progress", Json::array(), nullptr)}});
}

void ResponseStreamEvents::open_message(std::string& out) {
  message_open_ = true;
  Json item{{"id", message_id_},
            {"type", "message"},
            {"status", "in_progress"},
            {"content", Json::array()},
            {"role", "assistant"}};
  const int index = static_cast<int>(output_.size());
  emit(out, "response.output_item.added", Json{{"output_index", index}, {"item", std::move(item)}});
  emit(out, "response.content_part.added",
       Json{{"item_id", message_id_},
            {"output_index", index},
            {"content_index", 0},
            {"part", Json{{"type", "output_text"}, {"annotations", Json::array()}, {"logprobs", Json::array()},
                          {"text", ""}}}});
}

void ResponseStreamEvents::text(std::string& out, std::string_view delta) {
  if (delta.empty()) return;
  if (!message_open_) open_message(out);
  text_ += delta;
  emit(out, "response.output_text.delta",
       Json{{"item_id", message_id_},
            {"output_index", static_cast<int>(output_.size())},
            {"content_index", 0},
            {"delta", std::string(delta)},
            {"logprobs", Json::array()}});
}

void ResponseStreamEvents::finish(std::string& out, const std::vector<ToolCall>& calls, EventFinish f) {
  status_ = response_status(f);
  if (!message_open_ && calls.empty()) open_message(out);
  if (message_open_) {
    const int index = static_cast<int>(output_.size());
    emit(out, "response.output_text.done",
         Json{{"item_id", message_id_},
              {"output_index", index},
              {"content_index", 0},
              {"text", text_},
              {"logprobs", Json::array()}});
    Json item = message_item_json(message_id_, text_, status_);
    emit(out, "response.content_part.done",
         Json{{"item_id", message_id_}, {"output_index", index}, {"content_index", 0}, {"part", item["content"][0]}});
    emit(out, "response.output_item.done", Json{{"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
    message_open_ = false;
  }
  for (const ToolCall& c : calls) {
    const int index = static_cast<int>(output_.size());
    const std::string id = function_call_item_id(c.id);
    emit(out, "response.output_item.added",
         Json{{"output_index", index}, {"item", function_call_item_json(c, "in_progress", false)}});
    emit(out, "response.function_call_arguments.delta",
         Json{{"item_id", id}, {"output_index", index}, {"delta", c.arguments}});
    emit(out, "response.function_call_arguments.done",
         Json{{"item_id", id}, {"output_index", index}, {"arguments", c.arguments}});
    Json item = function_call_item_json(c, "completed");
    emit(out, "response.output_item.done", Json{{"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
  }
}

void ResponseStreamEvents::end(std::string& out, const UsageTotals& u) {
  const bool incomplete = std::string_view(status_) == "incomplete";
  emit(out, incomplete ? "response.incomplete" : "response.completed",
       Json{{"response", response_object_json(meta_, echo_, status_, output_, responses_usage_json(u))}});
}

void ResponseStreamEvents::failure(std::string& out, const ApiError& e) {
  const char* code = e.status == 429 ? "rate_limit_exceeded" : "server_error";
  emit(out, "error",
       Json{{"code", code}, {"message", e.message}, {"param", e.param.empty() ? Json(nullptr) : Json(e.param)}});
  emit(out, "response.failed",
       Json{{"response", response_object_json(meta_, echo_, "failed", output_, nullptr,
                                              Json{{"code", code}, {"message", e.message}})}});
}

}  // namespace hs::server
