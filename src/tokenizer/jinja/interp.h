// tokenizer/jinja/interp.h — the tree-walking evaluator (internal to tokenizer/jinja).
//
// Interp executes a Program against a scope chain: the root scope holds the context
// variables and top-level `set`s; every for-loop iteration, macro call and `with` block gets a
// child scope (Jinja's rules: `set` inside a loop body does not leak out of the iteration;
// `if` opens no scope). Builtins (builtins.cpp) implement filters, tests, methods and global
// functions on top of the attribute/item/call primitives exposed here. Costs: one scope
// allocation per loop iteration and macro call; output is appended to a single string.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace hs::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* lookup(std::string_view name) const;
  void set(const std::string& name, Value v);
};

class Interp {
 public:
  explicit Interp(const RenderLimits& limits) : limits_(limits) {}

  void render(const Program& prog, const std::shared_ptr<Scope>& root, std::string& out);
  int line() const { return line_; }

  // Primitives shared with builtins.
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& fn, CallArgs& args);
  Value filter(std::string_view name, const Value& subject, CallArgs& args);
  bool test(std::string_view name, const Value& subject, CallArgs& args);
  // Elements of an iterable (list/tuple items, dict keys, string code points, nothing for
  // undefined); throws for non-iterables.
  ValueList iterate(const Value& v);
  void check_size(size_t bytes) const;
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void assign(Scope& scope, const std::vector<std::string>& targets, const Value& v);
  Value make_macro(const Stmt& def, const std::vector<std::string>& params, size_t first_default,
                   const std::shared_ptr<Scope>& scope, std::string name);
  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_call(const Expr& e, const std::shared_ptr<Scope>& scope, Value* caller);
  Value eval_filter_chain(const Expr& e, const std::shared_ptr<Scope>& scope, const Value& block_input);
  void eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope, CallArgs& out);
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool compare(const std::string& op, const Value& a, const Value& b);
  void append(std::string& out, std::string_view s) const;

  RenderLimits limits_;
  uint64_t iterations_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
};

// builtins.cpp
bool contains(const Value& container, const Value& item);
Value call_method(Interp& in, const Value& self, std::string_view name, CallArgs& args);
// Bound method / unsafe-attribute lookup used by getattr; nullopt when `name` is no method.
std::optional<Value> method_value(Interp& in, const Value& self, std::string_view name);
const Value* lookup_global(std::string_view name);
std::string undefined_attr_hint(const Value& obj, std::string_view name);
std::string undefined_item_hint(const Value& obj, const Value& key);

}  // namespace hs::jinja
