// tokenizer/jinja/value.h — the dynamic values a Jinja template computes with.
//
// A Value is what a Python object is to Jinja: undefined, None, bool, int (int64), float,
// str (UTF-8), list, tuple, dict (insertion-ordered, Python key equality), namespace (the only
// mutable object: `{% set ns.x = ... %}`), or a function (globals, bound methods, macros).
// Lists, tuples and dicts are immutable once built (transformers renders in Jinja's
// *immutable* sandbox), so they are shared by pointer and copying a Value is O(1) except for
// strings, which are copied. Dict lookup is a linear scan: chat-template dicts (messages,
// tool schemas) have a handful of keys. Errors are thrown as `jinja::Error` and turned into
// hs::Status at the public API (template.h); they never leave this module.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace hs::jinja {

// Thrown inside the interpreter; `line` is 0 when the thrower does not know it (the evaluator
// fills in the line of the expression being evaluated).
struct Error {
  StatusCode code = StatusCode::kInvalidArgument;
  std::string message;
  int line = 0;
};

[[noreturn]] void fail(StatusCode code, std::string message, int line = 0);
// A template-level runtime error (Python's TypeError, UndefinedError, ...).
[[noreturn]] inline void fail_runtime(std::string message) {
  fail(StatusCode::kInvalidArgument, std::move(message));
}

class Value;
using ValueList = std::vector<Value>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFn = std::function<Value(CallArgs&)>;

struct Function {
  std::string name;
  NativeFn fn;
};

struct Dict;
struct Namespace;

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kTuple,
  kDict,
  kNamespace,
  kFunction,
};

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint);
  static Value none();
  Value(bool b);  // NOLINT(google-explicit-constructor)
  Value(int64_t i);  // NOLINT(google-explicit-constructor)
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT(google-explicit-constructor)
  Value(double d);  // NOLINT(google-explicit-constructor)
  Value(std::string s);  // NOLINT(google-explicit-constructor)
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT(google-explicit-constructor)
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT(google-explicit-constructor)
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(Dict d);
  static Value ns(std::shared_ptr<Namespace> n);
  static Value function(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return kind_ == Kind::kBool ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double to_double() const;  // int, bool or float
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ValueList& as_list() const { return *std::get<std::shared_ptr<const ValueList>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(v_); }
  const void* identity() const;  // for `is sameas` on shared objects
  // Message describing why this is undefined, e.g. "'foo' is undefined".
  std::string undefined_message() const;

  bool truthy() const;
  std::string str() const;   // Python str(): what `{{ x }}` prints
  std::string repr() const;  // Python repr(): how x prints inside a list or dict
  const char* type_name() const;  // Python type name: 'str', 'int', 'NoneType', ...

 private:
  using Storage = std::variant<std::monostate, bool, int64_t, double, std::string,
                               std::shared_ptr<const ValueList>, std::shared_ptr<const Dict>,
                               std::shared_ptr<Namespace>, std::shared_ptr<const Function>>;
  void append_repr(std::string& out, int depth) const;
  Kind kind_ = Kind::kUndefined;
  Storage v_;  // the undefined hint lives in the string slot
};

struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces an equal key in place, else appends
};

struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  Value* find(std::string_view name);
  void set(const std::string& name, Value value);
};

// Python == and ordering (<0, 0, >0). py_compare throws a TypeError-like Error when the types
// cannot be ordered; `op` names the operator for the message.
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b, const char* op);

// JSON <-> Value. Objects keep their key order. Throws jinja::Error past 512 levels of nesting.
Value from_json(const nlohmann::ordered_json& j);

// Python json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::optional<std::string> item_sep;  // default ", " (or "," when indented)
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& opts);

}  // namespace hs::jinja
