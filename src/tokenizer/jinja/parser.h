// tokenizer/jinja/parser.h — tokens to a Program (ast.h).
//
// A recursive-descent parser with Jinja's grammar and operator precedence (filters and `is`
// tests bind tighter than arithmetic; `not` looser than comparisons). Unknown statement tags,
// filters and tests are rejected here, naming the construct and its line, so a template we
// cannot render fails at load time rather than per request. Nesting depth is capped so a
// hostile template cannot overflow the stack. Cost: O(tokens).
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace hs::jinja {

// Throws jinja::Error on syntax errors and unsupported constructs.
std::shared_ptr<const Program> parse_program(std::string_view source);

// Names the evaluator implements (builtins.cpp).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace hs::jinja
