// tokenizer/chat_template.h — renders a model's chat template into a prompt string,
// byte-identical to transformers' `tokenizer.apply_chat_template(..., tokenize=False)`.
//
// A ChatTemplate is parsed once (typically from the GGUF key `tokenizer.chat_template`) and
// rendered per request. Rendering mirrors transformers' preparation of the inputs: message
// keys whose value is null are dropped, reasoning fields are aliased (`reasoning_content`,
// `thinking`, `reasoning`), `tools`/`documents` default to None, `bos_token`/`eos_token` and
// any extra variables are visible to the template. Templates run in our Jinja interpreter
// (tokenizer/jinja/), with transformers' environment (trim_blocks, lstrip_blocks, loop
// controls, `raise_exception`, `strftime_now`, `tojson` override). Copies share the parsed
// template. Cost: a render is a tree walk, linear in the output for chat-style templates.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja/template.h"

namespace hs {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages;   // [{"role": ..., "content": ...}, ...]
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;  // exposed to the template like transformers does
  nlohmann::ordered_json extra;      // extra context variables (tools, enable_thinking, ...); may be null
};

class ChatTemplate {
 public:
  ChatTemplate() = default;
  // Parses once; unsupported Jinja constructs fail here, naming the construct and line.
  static Result<ChatTemplate> parse(std::string_view source);
  // Errors: kInvalidArgument for bad inputs and for `raise_exception` in the template (the
  // message carries the template's text), kUnsupported for constructs met only at run time.
  Result<std::string> render(const ChatTemplateInputs& in) const;
  Result<std::string> render(const ChatTemplateInputs& in, const jinja::RenderLimits& limits) const;
  const std::string& source() const;

 private:
  Result<std::string> render_checked(const ChatTemplateInputs& in, const jinja::RenderLimits& limits) const;
  jinja::Template template_;
  std::shared_ptr<const std::string> source_;
};

// Built-in templates for models whose GGUF carries no `tokenizer.chat_template` (our Gemma 3
// GGUF has none): "gemma3" gives the official Gemma 3 instruct template. Empty if unknown.
std::string_view builtin_chat_template(std::string_view arch);

namespace gguf { class File; }
// The model's chat template: the GGUF's `tokenizer.chat_template`, else the built-in one for
// its architecture; `origin` (optional) says which. NotFound when neither exists.
Result<ChatTemplate> chat_template_for_model(const gguf::File& file, std::string* origin = nullptr);

}  // namespace hs
