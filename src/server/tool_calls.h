// server/tool_calls.h — OpenAI tool calling: the request's `tools` / `tool_choice` /
// `parallel_tool_calls`, validated, and the model's tool-call text parsed back into calls.
//
// Request side: `tools` must be an array of {"type": "function", "function": {"name",
// "description"?, "parameters"? (a JSON-Schema object), "strict"?}}; names are 1..64 of
// [A-Za-z0-9_-] and unique. `tool_choice` is "auto" (default with tools), "none" (default
// without), "required", or {"type": "function", "function": {"name": ...}} naming a declared
// tool (the last two start the answer with a call's opening, and a grammar holds the rest of
// the call to the tool's schema: forced_tool_call; under "auto" a grammar holds each call the
// model opens: auto_tool_calls). Errors are 400s naming the field (server/api_error.h).
// Output side, per template family (ToolCallFormat; three so far, below), e.g. Hermes-style blocks
// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (Qwen2.5 / Qwen3 templates,
// detected by "<tool_call>" in the template source). Every block whose body parses as a JSON
// object with a string "name" (an object or a JSON-string "arguments") becomes a call with a
// fresh id and the arguments re-serialised as a JSON string; a block that does not parse stays
// in the content, verbatim, so malformed model output is text, never an error. Text outside
// the blocks is the content (trimmed of the whitespace between blocks).
// Cost: one linear scan of the generated text plus a JSON parse per block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_protocol.h"

namespace hs::server {

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolsRequest {
  nlohmann::ordered_json tools = nullptr;  // the validated array, as given (null: none)
  ToolChoice choice = ToolChoice::kNone;
  std::string named;                       // kNamed: the function's name
  std::vector<std::string> names;          // the declared functions' names, in order
  bool parallel = true;                    // parallel_tool_calls
  bool active() const { return choice != ToolChoice::kNone && !tools.is_null(); }
};

// Reads tools, tool_choice and parallel_tool_calls of a chat request body.
MaybeError parse_tools_request(const Json& body, ToolsRequest& out);

// kHermes: <tool_call>{"name", "arguments"}</tool_call> (Qwen2.5 / Qwen3); kXmlFunction:
// <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call> (Qwen3-Coder,
// Qwen3.5; template source has "<function="); kJson: the answer is {"name", "parameters"}
// objects, optionally after <|python_tag|> (Llama 3.1+; "<|python_tag|>" or "parameters" in the
// template), names must be declared.
enum class ToolCallFormat { kNone, kHermes, kXmlFunction, kJson };
// The format a chat template's tool calls take (from its source text).
ToolCallFormat tool_call_format_of(std::string_view template_source);

struct ToolCall {
  std::string id;         // "call_<24 hex>"
  std::string name;
  std::string arguments;  // a JSON object, serialised
};

struct ParsedToolOutput {
  std::string content;          // the text outside well-formed call blocks
  std::vector<ToolCall> calls;  // in order
};

// `next_id` makes the call ids. `declared`: the request's function names; when the text has no
// call blocks, a text that is as a whole one JSON call object (or an array of them, optionally in
// a ``` fence) naming a declared function is taken as calls too — small models (Qwen2.5-Coder
// 0.5B) often drop the <tool_call> tags; requiring a declared name keeps plain JSON answers
// content.
// `tools`: the request's validated tools array (ToolsRequest::tools); the XML format types each
// parameter's text by its property schema (a string parameter "123" stays a string, a boolean
// "True" — what the templates' `| string` writes — is true); without it values are typed by
// their text (JSON, else Python's True / False / None, else a string).
ParsedToolOutput parse_tool_calls(std::string_view text, ToolCallFormat format, uint64_t& next_id,
                                  const std::vector<std::string>& declared = {}, const Json* tools = nullptr);
// True when a stream's first text may be a bare call object (starts with '{', '[' or "```" after
// whitespace): the stream holds its content back until the end.
bool may_be_bare_call(std::string_view text_so_far);

// The opening of a call in `format` up to where the model's choice starts: with `name`, the
// call of that function into its arguments object (Hermes `<tool_call>\n{"name": "NAME", "arguments": {`,
// XML `<tool_call>\n<function=NAME>\n`, JSON `{"name": "NAME", "parameters": {`); without, up to
// the name (`<tool_call>\n{"name": "`, `<tool_call>\n<function=`, `{"name": "`).
std::string tool_call_prefix(ToolCallFormat format, const std::string& name);

// tool_choice "required" / named under a grammar (structured_output.h): the prompt ends with
// `prefix`, then the grammar allows one of `alternatives` — its lead text (the rest of the
// function's name and the key of the arguments), then arguments of its parameters' schema
// ({"type": "object"} where a tool gives none) — then `end` (the call's closing), and then only
// the end of generation: calls whose arguments always parse and validate. Hermes:
// prefix `<tool_call>\n{"name": "` (named: through `"arguments": `), end `}\n</tool_call>`;
// JSON (Llama 3.1): `{"name": "` ... `"parameters": `, end `}`; XML (Qwen3-Coder / Qwen3.5,
// `xml`: the arguments are `<parameter=KEY>` items, not one JSON value): `<tool_call>\n<function=`
// (named: through `NAME>\n`), lead `NAME>\n`, end `</function>\n</tool_call>`. nullopt for kNone.
// tool_choice "required" with parallel_tool_calls (the default) allows up to kMaxForcedCalls
// calls, each after the first opened by `more` (the format's opening again, after a newline);
// a named function or parallel_tool_calls false: exactly one.
constexpr int kMaxForcedCalls = 4;
struct ForcedToolCall {
  std::string prefix;
  std::vector<std::pair<std::string, nlohmann::ordered_json>> alternatives;  // (lead, schema)
  std::string end;
  std::string more;   // the opening of each further call (empty: one call only)
  int max_calls = 1;
  bool xml = false;   // arguments as XML parameters (else one JSON object)
};
std::optional<ForcedToolCall> forced_tool_call(ToolCallFormat format, const ToolsRequest& tools);

// tool_choice "auto" under a grammar: the text is free until the format's opening tag
// (`trigger`, "<tool_call>"); from there the grammar holds the call to one of `calls` — its
// whole opening through the function's name (`begin`), arguments of its schema, `end` — and
// then the text is free again (parallel_tool_calls false: only the end of generation follows
// the first call). Hermes: begin `<tool_call>\n{"name": "NAME", "arguments": `, end
// `}\n</tool_call>`; XML: `<tool_call>\n<function=NAME>\n`, end `</function>\n</tool_call>`.
// nullopt for the JSON format (Llama 3.1): its calls open with no tag, so there is nothing to
// trigger on and its auto answers stay unconstrained. A call written without its opening tag
// (bare JSON, which small models write) is free text too, parsed as before but not held.
struct AutoToolCalls {
  std::string trigger;
  struct Call {
    std::string begin;
    nlohmann::ordered_json schema;
    std::string end;
  };
  std::vector<Call> calls;
  bool at_most_one = false;
  bool xml = false;
};
std::optional<AutoToolCalls> auto_tool_calls(ToolCallFormat format, const ToolsRequest& tools);

// The length of the longest suffix of `text` that is a proper prefix of the format's opening
// tag ("<tool_call>"): what a stream must hold back before it knows whether a call starts.
size_t tool_call_open_prefix(std::string_view text, ToolCallFormat format);
// Where the first opening tag starts in `text`, or npos.
size_t find_tool_call_open(std::string_view text, ToolCallFormat format);

}  // namespace hs::server
