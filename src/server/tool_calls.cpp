// server/tool_calls.cpp — see tool_calls.h.
#include "server/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>

namespace hs::server {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";

bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string next_call_id(uint64_t& next_id) {
  return fmt::format("call_{:024x}", next_id++ * 0x9e3779b97f4a7c15ull);
}

// One Hermes block body -> a call, or nullopt when it is not {"name": string, "arguments": ...}.
std::optional<ToolCall> parse_hermes_body(std::string_view body, uint64_t& next_id) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall c;
  c.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");  // Llama 3.1's JSON tool calls
  if (args == j.end() || args->is_null()) {
    c.arguments = "{}";
  } else if (args->is_object()) {
    c.arguments = args->dump();
  } else if (args->is_string()) {  // some models emit the arguments already serialised
    const nlohmann::json inner = nlohmann::json::parse(args->get_ref<const std::string&>(), nullptr, false);
    if (inner.is_discarded() || !inner.is_object()) return std::nullopt;
    c.arguments = inner.dump();
  } else {
    return std::nullopt;
  }
  c.id = next_call_id(next_id);
  return c;
}

// The JSON types a property schema allows, from "type", "enum" / "const" and one level of
// anyOf / oneOf; empty when it says nothing (then any type is taken).
std::vector<std::string> schema_types(const Json* ps) {
  std::vector<std::string> types;
  if (!ps || !ps->is_object()) return types;
  auto add = [&](const std::string& t) {
    if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
  };
  auto add_value = [&](const Json& v) {
    add(v.is_string() ? "string" : v.is_boolean() ? "boolean" : v.is_number() ? "number" : v.is_null() ? "null"
        : v.is_array() ? "array" : "object");
  };
  if (const auto t = ps->find("type"); t != ps->end()) {
    if (t->is_string()) add(t->get<std::string>());
    if (t->is_array())
      for (const auto& x : *t)
        if (x.is_string()) add(x.get<std::string>());
  }
  if (const auto e = ps->find("enum"); e != ps->end() && e->is_array())
    for (const auto& v : *e) add_value(v);
  if (const auto c = ps->find("const"); c != ps->end()) add_value(*c);
  for (const char* k : {"anyOf", "oneOf"})
    if (const auto u = ps->find(k); u != ps->end() && u->is_array())
      for (const auto& sub : *u)
        for (const std::string& t : schema_types(&sub)) add(t);
  return types;
}

// One parameter's text -> its JSON value, by the type its schema gives (ps; null: unknown).
// A string-typed parameter is the text as written (the grammar may put whitespace around an
// enum value: trimmed then); "null" / "None" is null where the schema allows it. Otherwise the
// trimmed text as JSON (numbers, booleans, arrays, objects, null), or as the Python literal
// that the templates' `| string` writes (True, False, None); what parses as neither stays the
// text, a string.
nlohmann::ordered_json xml_parameter_value(std::string_view raw, const Json* ps) {
  const std::vector<std::string> types = schema_types(ps);
  auto has = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
  const std::string_view t = trim(raw);
  const bool is_null_text = t == "null" || t == "None";
  const bool only_strings = has("string") && std::all_of(types.begin(), types.end(), [](const std::string& x) {
                              return x == "string" || x == "null";
                            });
  if (only_strings) {
    if (has("null") && is_null_text) return nullptr;
    if (ps && (ps->contains("enum") || ps->contains("const"))) return std::string(t);
    return std::string(raw);
  }
  nlohmann::ordered_json v = nlohmann::ordered_json::parse(t, nullptr, /*allow_exceptions=*/false);
  if (!v.is_discarded() && !v.is_string()) return v;  // a quoted string is the text, quotes and all
  if (t == "True") return true;
  if (t == "False") return false;
  if (t == "None") return nullptr;
  return std::string(raw);
}

// The property schemas of `name` in the request's tools (null: no tools or no such function).
const Json* properties_of(const Json* tools, const std::string& name) {
  if (!tools || !tools->is_array()) return nullptr;
  for (const auto& t : *tools) {
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object() || fn->value("name", std::string()) != name) continue;
    const auto params = fn->find("parameters");
    if (params == fn->end() || !params->is_object()) return nullptr;
    const auto props = params->find("properties");
    return props != params->end() && props->is_object() ? &*props : nullptr;
  }
  return nullptr;
}

// One Qwen3-Coder / Qwen3.5 block body -> a call:
//   <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>...\n</function>
// VALUE is the text between the tags minus one leading and one trailing newline (as the
// templates write it), typed by the parameter's schema (xml_parameter_value). Anything else
// (no function tag, an unclosed parameter, a parameter given twice) -> nullopt.
std::optional<ToolCall> parse_xml_function_body(std::string_view body, uint64_t& next_id, const Json* tools) {
  body = trim(body);
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kPar = "<parameter=", kParEnd = "</parameter>";
  if (!body.starts_with(kFn)) return std::nullopt;
  const size_t name_end = body.find('>');
  if (name_end == std::string_view::npos) return std::nullopt;
  ToolCall c;
  c.name = std::string(trim(body.substr(kFn.size(), name_end - kFn.size())));
  if (c.name.empty()) return std::nullopt;
  const Json* props = properties_of(tools, c.name);
  std::string_view rest = body.substr(name_end + 1);
  const size_t fn_end = rest.find(kFnEnd);
  if (fn_end != std::string_view::npos) {
    if (!trim(rest.substr(fn_end + kFnEnd.size())).empty()) return std::nullopt;  // text after </function>
    rest = rest.substr(0, fn_end);
  }
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  while (true) {
    rest = trim(rest);
    if (rest.empty()) break;
    if (!rest.starts_with(kPar)) return std::nullopt;
    const size_t key_end = rest.find('>');
    const size_t val_end = rest.find(kParEnd);
    if (key_end == std::string_view::npos || val_end == std::string_view::npos || val_end < key_end)
      return std::nullopt;
    const std::string key(trim(rest.substr(kPar.size(), key_end - kPar.size())));
    if (key.empty() || args.contains(key)) return std::nullopt;
    std::string_view value = rest.substr(key_end + 1, val_end - key_end - 1);
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    const Json* ps = nullptr;
    if (props)
      if (const auto it = props->find(key); it != props->end()) ps = &*it;
    args[key] = xml_parameter_value(value, ps);
    rest = rest.substr(val_end + kParEnd.size());
  }
  c.arguments = args.dump();
  c.id = next_call_id(next_id);
  return c;
}

}  // namespace

MaybeError parse_tools_request(const Json& body, ToolsRequest& out) {
  out = ToolsRequest{};
  const auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null();
  if (has_tools) {
    if (!tools->is_array()) return invalid_request("'tools' must be an array of function tools", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string at = fmt::format("tools[{}]", i);
      if (!t.is_object()) return invalid_request(fmt::format("'{}' must be an object", at), at);
      const auto type = t.find("type");
      if (type == t.end() || !type->is_string() || type->get_ref<const std::string&>() != "function")
        return invalid_request(fmt::format("'{}.type' must be \"function\"", at), at + ".type");
      const auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object())
        return invalid_request(fmt::format("'{}.function' must be an object", at), at + ".function");
      const auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || !valid_function_name(name->get_ref<const std::string&>()))
        return invalid_request(fmt::format("'{}.function.name' must be 1 to 64 letters, digits, '_' or '-'", at),
                               at + ".function.name");
      if (std::find(out.names.begin(), out.names.end(), name->get_ref<const std::string&>()) != out.names.end())
        return invalid_request(fmt::format("'{}.function.name' '{}' is declared twice", at, name->get<std::string>()),
                               at + ".function.name");
      out.names.push_back(name->get<std::string>());
      const auto params = fn->find("parameters");
      if (params != fn->end() && !params->is_null() && !params->is_object())
        return invalid_request(fmt::format("'{}.function.parameters' must be a JSON Schema object", at),
                               at + ".function.parameters");
      const auto desc = fn->find("description");
      if (desc != fn->end() && !desc->is_null() && !desc->is_string())
        return invalid_request(fmt::format("'{}.function.description' must be a string", at),
                               at + ".function.description");
    }
    out.tools = *tools;
    if (out.tools.empty()) out.tools = nullptr;  // names stays empty too
  }
  out.choice = out.tools.is_null() ? ToolChoice::kNone : ToolChoice::kAuto;
  const auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string& c = choice->get_ref<const std::string&>();
      if (c == "none") out.choice = ToolChoice::kNone;
      else if (c == "auto") out.choice = ToolChoice::kAuto;
      else if (c == "required") out.choice = ToolChoice::kRequired;
      else
        return invalid_request(fmt::format("'tool_choice' '{}' is not one of none, auto, required", c), "tool_choice");
    } else if (choice->is_object()) {
      const auto fn = choice->find("function");
      const Json* name = nullptr;
      if (fn != choice->end() && fn->is_object())
        if (const auto it = fn->find("name"); it != fn->end()) name = &*it;
      if (!name || !name->is_string())
        return invalid_request("'tool_choice' must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}",
                               "tool_choice");
      out.choice = ToolChoice::kNamed;
      out.named = name->get<std::string>();
      if (std::find(out.names.begin(), out.names.end(), out.named) == out.names.end())
        return invalid_request(fmt::format("'tool_choice' names '{}', which is not in 'tools'", out.named),
                               "tool_choice");
    } else {
      return invalid_request("'tool_choice' must be a string or an object", "tool_choice");
    }
    if (out.choice != ToolChoice::kNone && out.tools.is_null())
      return invalid_request("'tool_choice' needs 'tools'", "tool_choice");
  }
  const auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) return invalid_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    out.parallel = parallel->get<bool>();
  }
  return std::nullopt;
}

ToolCallFormat tool_call_format_of(std::string_view src) {
  if (src.find("<function=") != std::string_view::npos) return ToolCallFormat::kXmlFunction;  // Qwen3-Coder / 3.5
  if (src.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;         // Qwen2.5 / Qwen3
  if (src.find("<|python_tag|>") != std::string_view::npos || src.find("\"parameters\"") != std::string_view::npos)
    return ToolCallFormat::kJson;  // Llama 3.1+: {"name": ..., "parameters": {...}}
  return ToolCallFormat::kNone;
}


bool may_be_bare_call(std::string_view text) {
  const std::string_view t = trim(text);
  if (t.empty()) return true;  // nothing seen yet
  return t.front() == '{' || t.front() == '[' || std::string_view("```").starts_with(t.substr(0, 3)) ||
         t.starts_with("```");
}

namespace {
// The whole text as bare call objects naming declared functions, or no calls.
std::vector<ToolCall> bare_calls(std::string_view text, const std::vector<std::string>& declared, uint64_t& next_id) {
  std::string_view t = trim(text);
  if (t.starts_with("```")) {  // ```json ... ```
    const size_t nl = t.find('\n');
    if (nl == std::string_view::npos || !t.ends_with("```")) return {};
    t = trim(t.substr(nl + 1, t.size() - 3 - (nl + 1)));
  }
  if (t.empty() || (t.front() != '{' && t.front() != '[')) return {};
  std::vector<nlohmann::json> items;
  const nlohmann::json j = nlohmann::json::parse(t, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    items.push_back(j);
  } else if (j.is_array()) {
    items.assign(j.begin(), j.end());
  } else {  // one call object per line (parallel calls without tags)
    size_t pos = 0;
    while (pos < t.size()) {
      size_t nl = t.find('\n', pos);
      if (nl == std::string_view::npos) nl = t.size();
      const std::string_view line = trim(t.substr(pos, nl - pos));
      pos = nl + 1;
      if (line.empty()) continue;
      nlohmann::json o = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!o.is_object()) return {};
      items.push_back(std::move(o));
    }
  }
  std::vector<ToolCall> calls;
  for (const nlohmann::json& item : items) {
    if (!item.is_object()) return {};
    std::optional<ToolCall> c = parse_hermes_body(item.dump(), next_id);
    if (!c || std::find(declared.begin(), declared.end(), c->name) == declared.end()) return {};
    calls.push_back(std::move(*c));
  }
  return calls;
}
}  // namespace

ParsedToolOutput parse_tool_calls(std::string_view text, ToolCallFormat format, uint64_t& next_id,
                                  const std::vector<std::string>& declared, const Json* tools) {
  ParsedToolOutput out;
  if (format == ToolCallFormat::kNone) {
    out.content = std::string(text);
    return out;
  }
  if (format == ToolCallFormat::kJson) {  // the whole answer is the call(s), after an optional <|python_tag|>
    std::string_view t = trim(text);
    if (t.starts_with("<|python_tag|>")) t.remove_prefix(std::string_view("<|python_tag|>").size());
    out.calls = bare_calls(t, declared, next_id);
    if (out.calls.empty()) out.content = std::string(text);
    return out;
  }
  auto parse_body = [&](std::string_view body) {
    return format == ToolCallFormat::kXmlFunction ? parse_xml_function_body(body, next_id, tools)
                                                  : parse_hermes_body(trim(body), next_id);
  };
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    // An unclosed last block (the model stopped at max_tokens or on </tool_call> as a stop
    // string) is parsed up to the end.
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    std::optional<ToolCall> call = parse_body(text.substr(body, body_end - body));
    const size_t next = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
    if (call) {
      content += text.substr(pos, open - pos);
      out.calls.push_back(std::move(*call));
    } else {
      content += text.substr(pos, next - pos);  // not a call: keep it as the model wrote it
    }
    pos = next;
  }
  if (out.calls.empty() && !declared.empty()) {
    out.calls = bare_calls(text, declared, next_id);
    if (!out.calls.empty()) return out;  // the whole text was the calls: no content
  }
  out.content = out.calls.empty() ? content : std::string(trim(content));
  return out;
}

size_t tool_call_open_prefix(std::string_view text, ToolCallFormat format) {
  if (format != ToolCallFormat::kHermes && format != ToolCallFormat::kXmlFunction) return 0;
  for (size_t n = std::min(text.size(), kHermesOpen.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == kHermesOpen.substr(0, n)) return n;
  return 0;
}

size_t find_tool_call_open(std::string_view text, ToolCallFormat format) {
  if (format != ToolCallFormat::kHermes && format != ToolCallFormat::kXmlFunction) return std::string_view::npos;
  return text.find(kHermesOpen);
}

std::string tool_call_prefix(ToolCallFormat format, const std::string& name) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return name.empty() ? "<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": {";
    case ToolCallFormat::kXmlFunction:
      return name.empty() ? "<tool_call>\n<function=" : "<tool_call>\n<function=" + name + ">\n";
    case ToolCallFormat::kJson:
      return name.empty() ? "{\"name\": \"" : "{\"name\": \"" + name + "\", \"parameters\": {";
    case ToolCallFormat::kNone: break;
  }
  return "";
}

namespace {
// A tool's arguments schema: its parameters, {"type": "object"} when it gives none, and an
// object in any case.
nlohmann::ordered_json arguments_schema(const Json& fn) {
  const auto params = fn.find("parameters");
  nlohmann::ordered_json schema = params == fn.end() || params->is_null() ? nlohmann::ordered_json{{"type", "object"}}
                                                                           : *params;
  if (schema.is_object() && !schema.contains("type")) schema["type"] = "object";
  return schema;
}
}  // namespace

std::optional<ForcedToolCall> forced_tool_call(ToolCallFormat format, const ToolsRequest& tools) {
  if (format == ToolCallFormat::kNone) return std::nullopt;
  const bool named = tools.choice == ToolChoice::kNamed;
  std::string open, lead_end;
  ForcedToolCall fc;
  switch (format) {
    case ToolCallFormat::kHermes:
      open = "<tool_call>\n{\"name\": \"", lead_end = "\", \"arguments\": ", fc.end = "}\n</tool_call>";
      break;
    case ToolCallFormat::kJson:
      open = "{\"name\": \"", lead_end = "\", \"parameters\": ", fc.end = "}";
      break;
    case ToolCallFormat::kXmlFunction:
      open = "<tool_call>\n<function=", lead_end = ">\n", fc.end = "</function>\n</tool_call>", fc.xml = true;
      break;
    case ToolCallFormat::kNone: break;
  }
  for (const auto& t : tools.tools) {
    const auto& fn = t.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (named && name != tools.named) continue;
    fc.alternatives.emplace_back(named ? "" : name + lead_end, arguments_schema(fn));
  }
  fc.prefix = named ? open + tools.named + lead_end : open;
  if (tools.choice == ToolChoice::kRequired && tools.parallel) {
    fc.more = "\n" + open;
    fc.max_calls = kMaxForcedCalls;
  }
  return fc;
}

std::optional<AutoToolCalls> auto_tool_calls(ToolCallFormat format, const ToolsRequest& tools) {
  if (format != ToolCallFormat::kHermes && format != ToolCallFormat::kXmlFunction) return std::nullopt;
  AutoToolCalls a;
  a.trigger = std::string(kHermesOpen);
  a.xml = format == ToolCallFormat::kXmlFunction;
  a.at_most_one = !tools.parallel;
  for (const auto& t : tools.tools) {
    const auto& fn = t.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (a.xml)
      a.calls.push_back({"<tool_call>\n<function=" + name + ">\n", arguments_schema(fn), "</function>\n</tool_call>"});
    else
      a.calls.push_back({"<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ", arguments_schema(fn), "}\n</tool_call>"});
  }
  return a;
}

}  // namespace hs::server
