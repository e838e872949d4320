// tokenizer/jinja/lexer.h — template source to tokens, with Jinja's whitespace rules.
//
// Owns the surface syntax: `{{ }}`, `{% %}`, `{# #}`, `{% raw %}`, the `-`/`+` modifiers,
// and the environment transformers renders with: trim_blocks=True (drop the first newline
// after a block or comment tag), lstrip_blocks=True (drop spaces/tabs before a block or
// comment tag on its own line), keep_trailing_newline=False (drop one final newline).
// Newlines are normalized to "\n" first. Expression tokens (names, numbers, strings with
// Python escapes, operators) are produced inside tags; `}}`/`%}` only close a tag when
// brackets are balanced, as in Jinja. Cost: one pass over the source, O(n).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hs::jinja {

enum class TokType : uint8_t {
  kData,        // literal template text (already whitespace-processed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the unescaped value
  kInt,
  kFloat,
  kOp,          // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEof,
};

struct Token {
  TokType type = TokType::kEof;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Throws jinja::Error (kInvalidArgument) on malformed input: unterminated tags, comments or
// strings, unbalanced brackets, characters that start no token.
std::vector<Token> tokenize(std::string_view source);

}  // namespace hs::jinja
