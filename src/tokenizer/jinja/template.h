// tokenizer/jinja/template.h — public face of the Jinja interpreter: parse once, render many.
//
// `Template::parse` lexes and parses (rejecting unsupported tags, filters and tests up
// front); `render` walks the tree with the given context variables. A Template is a shared
// pointer to an immutable AST, so copies are cheap and concurrent renders are safe. Renders
// are bounded by RenderLimits so a hostile template cannot hang or exhaust memory. Errors come
// back as hs::Status naming the construct and template line; nothing throws out of here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/value.h"

namespace hs::jinja {

struct Program;

struct RenderLimits {
  size_t max_output_bytes = size_t{32} << 20;  // any one rendered string (output, macro, block)
  uint64_t max_loop_iterations = 1'000'000;    // summed over all loops of one render
  int max_call_depth = 64;                     // nested macro calls
};

using Context = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  Template() = default;
  static Result<Template> parse(std::string_view source);
  Result<std::string> render(const Context& vars, const RenderLimits& limits = {}) const;
  bool valid() const { return program_ != nullptr; }

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace hs::jinja
