// tokenizer/chat_template.cpp — see chat_template.h. Prepares transformers-equivalent inputs
// (null-dropping, reasoning aliases, default variables) and runs the Jinja template.
//
// Cost: converting the request JSON to template values copies every string once per render.
#include "tokenizer/chat_template.h"

#include "formats/gguf.h"

#include <fmt/format.h>

namespace hs {

namespace {

// The official Gemma 3 instruct template (google/gemma-3-*-it tokenizer_config.json
// `chat_template`), verbatim; tests/fixtures/chat/templates/gemma3.jinja holds the same bytes.
constexpr std::string_view kGemma3Template = R"gemma3({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
)gemma3";

const char* const kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

// transformers' _normalize_chat_messages + _alias_reasoning_fields for one message.
Result<jinja::Value> prepare_message(const nlohmann::ordered_json& m, size_t index) {
  if (!m.is_object()) {
    return make_error(StatusCode::kInvalidArgument, "chat message {} is not a JSON object", index);
  }
  jinja::Dict d;
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    auto it = m.find(field);
    if (it != m.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning) d.set(jinja::Value("thinking"), jinja::from_json(*reasoning));
  for (const auto& [k, v] : m.items()) {
    if (v.is_null()) continue;  // transformers drops None-valued keys
    d.set(jinja::Value(k), jinja::from_json(v));
  }
  if (reasoning) d.set(jinja::Value("reasoning_content"), jinja::from_json(*reasoning));
  return jinja::Value::dict(std::move(d));
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  HS_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(source));
  ChatTemplate ct;
  ct.template_ = std::move(t);
  ct.source_ = std::make_shared<const std::string>(source);
  return ct;
}

const std::string& ChatTemplate::source() const {
  static const std::string kEmpty;
  return source_ ? *source_ : kEmpty;
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& in) const {
  return render(in, jinja::RenderLimits{});
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& in, const jinja::RenderLimits& limits) const {
  if (!template_.valid()) return Status(StatusCode::kInvalidArgument, "chat template: not parsed");
  if (!in.messages.is_array()) {
    return Status(StatusCode::kInvalidArgument, "chat template: messages must be a JSON array");
  }
  if (in.messages.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "chat template: cannot apply a chat template to an empty conversation");
  }
  if (!in.extra.is_null() && !in.extra.is_object()) {
    return Status(StatusCode::kInvalidArgument, "chat template: extra variables must be a JSON object");
  }
  try {
    return render_checked(in, limits);
  } catch (const jinja::Error& e) {  // from_json on hostile input
    return Status(e.code, "chat template: " + e.message);
  }
}

Result<std::string> ChatTemplate::render_checked(const ChatTemplateInputs& in,
                                                 const jinja::RenderLimits& limits) const {
  jinja::ValueList messages;
  messages.reserve(in.messages.size());
  for (size_t i = 0; i < in.messages.size(); ++i) {
    HS_ASSIGN_OR_RETURN(jinja::Value m, prepare_message(in.messages[i], i));
    messages.push_back(std::move(m));
  }
  jinja::Context ctx;
  ctx.emplace_back("messages", jinja::Value::list(std::move(messages)));
  ctx.emplace_back("tools", jinja::Value::none());
  ctx.emplace_back("documents", jinja::Value::none());
  ctx.emplace_back("add_generation_prompt", jinja::Value(in.add_generation_prompt));
  ctx.emplace_back("bos_token", jinja::Value(in.bos_token));
  ctx.emplace_back("eos_token", jinja::Value(in.eos_token));
  if (in.extra.is_object()) {
    for (const auto& [k, v] : in.extra.items()) {
      if (k == "messages" || k == "add_generation_prompt") {
        return make_error(StatusCode::kInvalidArgument, "chat template: extra variable '{}' is reserved", k);
      }
      jinja::Value value = jinja::from_json(v);
      bool replaced = false;
      for (auto& [name, old] : ctx) {
        if (name == k) {
          old = value;
          replaced = true;
        }
      }
      if (!replaced) ctx.emplace_back(k, std::move(value));
    }
  }
  return template_.render(ctx, limits);
}

std::string_view builtin_chat_template(std::string_view arch) {
  if (arch == "gemma3") return kGemma3Template;
  return {};
}

Result<ChatTemplate> chat_template_for_model(const gguf::File& f, std::string* origin) {
  if (auto stored = f.get_string("tokenizer.chat_template"); stored.is_ok()) {
    if (origin) *origin = "tokenizer.chat_template";
    return ChatTemplate::parse(*stored);
  }
  HS_ASSIGN_OR_RETURN(std::string_view arch, f.get_string("general.architecture"));
  std::string_view builtin = builtin_chat_template(arch);
  if (builtin.empty())
    return make_error(StatusCode::kNotFound, "the model has no chat template and '{}' has no built-in one", arch);
  if (origin) *origin = fmt::format("built-in template for '{}' (the file has none)", arch);
  return ChatTemplate::parse(builtin);
}

}  // namespace hs
