// tokenizer/jinja/interp.cpp — statement execution, expression evaluation, attribute/item
// access and arithmetic with Python semantics (see interp.h), plus jinja::Template.
//
// Arithmetic is 64-bit: where Python would grow a big integer we report an overflow error.
// Every loop iteration, macro call and produced string is checked against RenderLimits.
#include "tokenizer/jinja/interp.h"

#include <cmath>
#include <new>

#include <fmt/format.h>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/pystr.h"

namespace hs::jinja {

const Value* Scope::lookup(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    for (const auto& [k, v] : s->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

namespace {

std::shared_ptr<Scope> child_of(const std::shared_ptr<Scope>& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

[[noreturn]] void overflow() { fail_runtime("integer overflow (templates are evaluated with 64-bit integers)"); }

int64_t add_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

}  // namespace

void Interp::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    fail_runtime(fmt::format("rendered text exceeds the limit of {} bytes", limits_.max_output_bytes));
  }
}

void Interp::append(std::string& out, std::string_view s) const {
  check_size(out.size() + s.size());
  out.append(s);
}

void Interp::render(const Program& prog, const std::shared_ptr<Scope>& root, std::string& out) {
  exec_body(prog.body, root, out);
}

Interp::Flow Interp::exec_body(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interp::Flow Interp::exec(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  line_ = s.line;
  switch (s.op) {
    case StmtOp::kData:
      append(out, s.text);
      return Flow::kNormal;
    case StmtOp::kOutput: {
      Value v = eval(*s.exprs[0], scope);
      if (v.is_string()) append(out, v.as_string());
      else append(out, v.str());
      return Flow::kNormal;
    }
    case StmtOp::kIf:
      for (size_t i = 0; i < s.exprs.size(); ++i) {
        if (eval(*s.exprs[i], scope).truthy()) return exec_body(s.bodies[i], scope, out);
      }
      if (s.bodies.size() > s.exprs.size()) return exec_body(s.bodies.back(), scope, out);
      return Flow::kNormal;
    case StmtOp::kFor:
      exec_for(s, scope, out);
      return Flow::kNormal;
    case StmtOp::kSet:
      assign(*scope, s.targets, eval(*s.exprs[0], scope));
      return Flow::kNormal;
    case StmtOp::kSetAttr: {
      const Value* ns = scope->lookup(s.text);
      if (!ns || !ns->is_namespace()) fail_runtime("cannot assign attribute on non-namespace object");
      if (!s.attr.empty() && s.attr[0] == '_') {
        fail_runtime(fmt::format("cannot store underscore-prefixed attribute '{}' on a namespace", s.attr));
      }
      ns->as_namespace().set(s.attr, eval(*s.exprs[0], scope));
      return Flow::kNormal;
    }
    case StmtOp::kSetBlock: {
      std::string body;
      exec_body(s.bodies[0], scope, body);
      Value v(std::move(body));
      if (s.exprs[0]) v = eval_filter_chain(*s.exprs[0], scope, v);
      scope->set(s.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case StmtOp::kMacro:
      scope->set(s.text, make_macro(s, s.targets, 0, scope, s.text));
      return Flow::kNormal;
    case StmtOp::kCallBlock: {
      Value caller = make_macro(s, s.targets, 1, scope, "caller");
      Value v = eval_call(*s.exprs[0], scope, &caller);
      append(out, v.str());
      return Flow::kNormal;
    }
    case StmtOp::kFilterBlock: {
      std::string body;
      exec_body(s.bodies[0], child_of(scope), body);
      append(out, eval_filter_chain(*s.exprs[0], scope, Value(std::move(body))).str());
      return Flow::kNormal;
    }
    case StmtOp::kWith: {
      auto inner = child_of(scope);
      for (size_t i = 0; i < s.targets.size(); ++i) inner->set(s.targets[i], eval(*s.exprs[i], scope));
      return exec_body(s.bodies[0], inner, out);
    }
    case StmtOp::kScope:
      return exec_body(s.bodies[0], child_of(scope), out);
    case StmtOp::kBreak:
      return Flow::kBreak;
    case StmtOp::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interp::assign(Scope& scope, const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    scope.set(targets[0], v);
    return;
  }
  ValueList items = iterate(v);
  if (items.size() != targets.size()) {
    if (items.size() > targets.size()) fail_runtime(fmt::format("too many values to unpack (expected {})", targets.size()));
    fail_runtime(fmt::format("not enough values to unpack (expected {}, got {})", targets.size(), items.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
}

void Interp::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  ValueList items = iterate(eval(*s.exprs[0], scope));
  if (s.exprs[1]) {
    ValueList kept;
    for (auto& item : items) {
      auto tmp = child_of(scope);
      assign(*tmp, s.targets, item);
      if (eval(*s.exprs[1], tmp).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      fail_runtime(fmt::format("loop iteration limit ({}) exceeded", limits_.max_loop_iterations));
    }
    auto it = child_of(scope);
    assign(*it, s.targets, items[i]);
    Dict loop;
    loop.entries.reserve(12);
    loop.entries.emplace_back(Value("index"), Value(i + 1));
    loop.entries.emplace_back(Value("index0"), Value(i));
    loop.entries.emplace_back(Value("revindex"), Value(n - i));
    loop.entries.emplace_back(Value("revindex0"), Value(n - i - 1));
    loop.entries.emplace_back(Value("first"), Value(i == 0));
    loop.entries.emplace_back(Value("last"), Value(i == n - 1));
    loop.entries.emplace_back(Value("length"), Value(n));
    loop.entries.emplace_back(Value("depth"), Value(1));
    loop.entries.emplace_back(Value("depth0"), Value(0));
    if (i > 0) loop.entries.emplace_back(Value("previtem"), items[i - 1]);
    if (i + 1 < n) loop.entries.emplace_back(Value("nextitem"), items[i + 1]);
    loop.entries.emplace_back(Value("cycle"), Value::function("cycle", [i](CallArgs& a) -> Value {
                                if (a.positional.empty()) fail_runtime("no items for cycling given");
                                return a.positional[static_cast<size_t>(i) % a.positional.size()];
                              }));
    it->set("loop", Value::dict(std::move(loop)));
    Flow f = exec_body(s.bodies[0], it, out);
    if (f == Flow::kBreak) break;
  }
  if (n == 0 && !s.bodies[1].empty()) exec_body(s.bodies[1], child_of(scope), out);
}

Value Interp::make_macro(const Stmt& def, const std::vector<std::string>& params, size_t first_default,
                         const std::shared_ptr<Scope>& scope, std::string name) {
  const Stmt* d = &def;
  const std::vector<std::string>* p = &params;
  // A weak pointer: the macro usually lives in the very scope it captures.
  std::weak_ptr<Scope> weak_scope = scope;
  return Value::function(name, [this, d, p, first_default, weak_scope, name](CallArgs& args) -> Value {
    std::shared_ptr<Scope> scope = weak_scope.lock();
    if (!scope) fail_runtime(fmt::format("macro '{}' was called after its defining block ended", name));
    if (call_depth_ >= limits_.max_call_depth) {
      fail_runtime(fmt::format("macro call depth limit ({}) exceeded in '{}'", limits_.max_call_depth, name));
    }
    struct DepthGuard {
      int& depth;
      explicit DepthGuard(int& d) : depth(++d) {}
      ~DepthGuard() { --depth; }
    } guard(call_depth_);
    int saved_line = line_;
    auto local = child_of(scope);
    std::vector<bool> bound(p->size(), false);
    ValueList extra;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < p->size()) {
        local->set((*p)[i], args.positional[i]);
        bound[i] = true;
      } else {
        extra.push_back(args.positional[i]);
      }
    }
    Dict kwargs;
    for (auto& [k, v] : args.keyword) {
      size_t idx = 0;
      while (idx < p->size() && (*p)[idx] != k) ++idx;
      if (idx < p->size()) {
        if (bound[idx]) fail_runtime(fmt::format("macro '{}' got multiple values for argument '{}'", name, k));
        local->set(k, v);
        bound[idx] = true;
      } else if (k == "caller") {
        local->set("caller", v);
      } else {
        kwargs.set(Value(k), v);
      }
    }
    for (size_t i = 0; i < p->size(); ++i) {
      if (bound[i]) continue;
      const ExprPtr& dflt = d->exprs[first_default + i];
      local->set((*p)[i], dflt ? eval(*dflt, local)
                               : Value::undefined(fmt::format("parameter '{}' was not provided", (*p)[i])));
    }
    local->set("varargs", Value::tuple(std::move(extra)));
    local->set("kwargs", Value::dict(std::move(kwargs)));
    std::string out;
    exec_body(d->bodies[0], local, out);
    line_ = saved_line;
    return Value(std::move(out));
  });
}

void Interp::eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope, CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) out.positional.push_back(eval(*e.args[i], scope));
  for (size_t i = 0; i < e.kw_names.size(); ++i) out.keyword.emplace_back(e.kw_names[i], eval(*e.kw_values[i], scope));
}

Value Interp::eval_call(const Expr& e, const std::shared_ptr<Scope>& scope, Value* caller) {
  Value fn = eval(*e.args[0], scope);
  CallArgs args;
  eval_args(e, 1, scope, args);
  if (caller) args.keyword.emplace_back("caller", *caller);
  line_ = e.line;
  return call(fn, args);
}

Value Interp::call(const Value& fn, CallArgs& args) {
  if (fn.is_function()) return fn.as_function().fn(args);
  if (fn.is_undefined()) {
    std::string msg = fn.undefined_message();
    bool unsupported = msg.rfind("unsupported", 0) == 0;
    fail(unsupported ? StatusCode::kUnsupported : StatusCode::kInvalidArgument, std::move(msg));
  }
  fail_runtime(fmt::format("'{}' object is not callable", fn.type_name()));
}

Value Interp::eval_filter_chain(const Expr& e, const std::shared_ptr<Scope>& scope, const Value& block_input) {
  Value subject;
  if (!e.args[0]) subject = block_input;
  else if (e.args[0]->op == ExprOp::kFilter) subject = eval_filter_chain(*e.args[0], scope, block_input);
  else subject = eval(*e.args[0], scope);
  CallArgs args;
  eval_args(e, 1, scope, args);
  line_ = e.line;
  return filter(e.name, subject, args);
}

Value Interp::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  line_ = e.line;
  switch (e.op) {
    case ExprOp::kLiteral:
      return e.literal;
    case ExprOp::kName: {
      if (const Value* v = scope->lookup(e.name)) return *v;
      if (const Value* g = lookup_global(e.name)) return *g;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprOp::kList:
    case ExprOp::kTuple: {
      ValueList items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return e.op == ExprOp::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprOp::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        if (k.is_list() || k.is_dict() || k.is_undefined()) {
          fail_runtime(fmt::format("unhashable type: '{}'", k.type_name()));
        }
        d.set(std::move(k), eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprOp::kGetattr:
      return getattr(eval(*e.args[0], scope), e.name);
    case ExprOp::kGetitem: {
      Value obj = eval(*e.args[0], scope);
      return getitem(obj, eval(*e.args[1], scope));
    }
    case ExprOp::kSlice: {
      Value obj = eval(*e.args[0], scope);
      std::optional<int64_t> parts[3];
      for (int i = 0; i < 3; ++i) {
        if (!e.args[i + 1]) continue;
        Value v = eval(*e.args[i + 1], scope);
        if (v.is_none()) continue;
        if (!v.is_int() && !v.is_bool()) fail_runtime("slice indices must be integers or None");
        parts[i] = v.as_int();
      }
      int64_t step = parts[2].value_or(1);
      if (step == 0) fail_runtime("slice step cannot be zero");
      if (obj.is_undefined()) fail_runtime(obj.undefined_message());
      if (obj.is_sequence()) {
        const ValueList& items = obj.as_list();
        ValueList sel;
        for (int64_t i : py::slice_indices(static_cast<int64_t>(items.size()), parts[0], parts[1], step)) sel.push_back(items[i]);
        return obj.is_list() ? Value::list(std::move(sel)) : Value::tuple(std::move(sel));
      }
      if (obj.is_string()) {
        const std::string& s = obj.as_string();
        std::string r;
        if (py::is_ascii(s)) {
          for (int64_t i : py::slice_indices(static_cast<int64_t>(s.size()), parts[0], parts[1], step)) r.push_back(s[i]);
        } else {
          std::u32string u = py::decode(s);
          for (int64_t i : py::slice_indices(static_cast<int64_t>(u.size()), parts[0], parts[1], step)) py::append_utf8(r, u[i]);
        }
        return Value(std::move(r));
      }
      return Value::undefined(fmt::format("{} object cannot be sliced", obj.type_name()));
    }
    case ExprOp::kCall:
      return eval_call(e, scope, nullptr);
    case ExprOp::kFilter:
      return eval_filter_chain(e, scope, Value());
    case ExprOp::kTest: {
      Value subject = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, args);
      line_ = e.line;
      return Value(test(e.name, subject, args));
    }
    case ExprOp::kNeg:
    case ExprOp::kPos: {
      Value v = eval(*e.args[0], scope);
      if (v.is_undefined()) fail_runtime(v.undefined_message());
      bool neg = e.op == ExprOp::kNeg;
      if (v.is_float()) return Value(neg ? -v.to_double() : v.to_double());
      if (v.is_int() || v.is_bool()) {
        int64_t x = v.as_int();
        if (neg && x == INT64_MIN) overflow();
        return Value(neg ? -x : x);
      }
      fail_runtime(fmt::format("bad operand type for unary {}: '{}'", neg ? '-' : '+', v.type_name()));
    }
    case ExprOp::kNot:
      return Value(!eval(*e.args[0], scope).truthy());
    case ExprOp::kAnd: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? eval(*e.args[1], scope) : a;
    }
    case ExprOp::kOr: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? a : eval(*e.args[1], scope);
    }
    case ExprOp::kBinary: {
      Value a = eval(*e.args[0], scope);
      Value b = eval(*e.args[1], scope);
      line_ = e.line;
      return binary(e.name, a, b);
    }
    case ExprOp::kConcat: {
      std::string s;
      for (const auto& part : e.args) {
        Value v = eval(*part, scope);
        append(s, v.is_string() ? v.as_string() : v.str());
      }
      return Value(std::move(s));
    }
    case ExprOp::kCompare: {
      Value left = eval(*e.args[0], scope);
      for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        line_ = e.line;
        if (!compare(e.cmp_ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprOp::kCond:
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", e.line));
  }
  return Value();
}

bool Interp::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  int c = py_compare(a, b, op.c_str());
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value Interp::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_runtime(a.undefined_message());
  if (b.is_undefined()) fail_runtime(b.undefined_message());
  auto unsupported = [&]() -> Value {
    fail_runtime(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
  };
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return Value(add_checked(a.as_int(), b.as_int()));
    if (nums) return Value(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_sequence() && a.kind() == b.kind()) {
      ValueList items = a.as_list();
      items.insert(items.end(), b.as_list().begin(), b.as_list().end());
      return a.is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (a.is_string() || a.is_sequence()) {
      fail_runtime(fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name()));
    }
    return unsupported();
  }
  if (op == "-") {
    if (ints) return Value(sub_checked(a.as_int(), b.as_int()));
    if (nums) return Value(a.to_double() - b.to_double());
    return unsupported();
  }
  if (op == "*") {
    if (ints) return Value(mul_checked(a.as_int(), b.as_int()));
    if (nums) return Value(a.to_double() * b.to_double());
    const Value* seq = (a.is_string() || a.is_sequence()) ? &a : (b.is_string() || b.is_sequence()) ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->is_int() || count->is_bool())) {
      int64_t n = std::max<int64_t>(0, count->as_int());
      if (seq->is_string()) {
        const std::string& s = seq->as_string();
        if (n > 0 && s.size() > limits_.max_output_bytes / static_cast<uint64_t>(n)) check_size(SIZE_MAX);
        std::string r;
        r.reserve(s.size() * n);
        for (int64_t i = 0; i < n; ++i) r += s;
        return Value(std::move(r));
      }
      const ValueList& items = seq->as_list();
      if (n > 0 && items.size() > limits_.max_output_bytes / static_cast<uint64_t>(n)) check_size(SIZE_MAX);
      ValueList r;
      for (int64_t i = 0; i < n; ++i) r.insert(r.end(), items.begin(), items.end());
      return seq->is_list() ? Value::list(std::move(r)) : Value::tuple(std::move(r));
    }
    if (seq) fail_runtime(fmt::format("can't multiply sequence by non-int of type '{}'", count->type_name()));
    return unsupported();
  }
  if (op == "/") {
    if (!nums) return unsupported();
    if (b.to_double() == 0.0) fail_runtime("division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") fail(StatusCode::kUnsupported, "printf-style string formatting ('%' on a string) is not supported");
    if (!nums) return unsupported();
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) fail_runtime("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return Value(op == "//" ? q : m);
    }
    double x = a.to_double(), y = b.to_double();
    if (y == 0.0) fail_runtime("float division by zero");
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0.0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return Value(mod);
    double floordiv;
    if (div != 0.0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value(floordiv);
  }
  if (op == "**") {
    if (!nums) return unsupported();
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), exp = b.as_int(), r = 1;
      while (exp > 0) {
        if (exp & 1) r = mul_checked(r, base);
        exp >>= 1;
        if (exp > 0) base = mul_checked(base, base);
      }
      return Value(r);
    }
    if (a.to_double() == 0.0 && b.to_double() < 0) fail_runtime("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.to_double(), b.to_double()));
  }
  return unsupported();
}

Value Interp::getattr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      fail_runtime(obj.undefined_message());
    case Kind::kNamespace:
      if (Value* v = obj.as_namespace().find(name)) return *v;
      return Value::undefined(undefined_attr_hint(obj, name));
    case Kind::kDict: {
      // Python attribute first (dict methods), then the key, as Jinja's getattr does.
      if (auto m = method_value(*this, obj, name)) return *m;
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return Value::undefined(undefined_attr_hint(obj, name));
    }
    default:
      if (auto m = method_value(*this, obj, name)) return *m;
      return Value::undefined(undefined_attr_hint(obj, name));
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_runtime(obj.undefined_message());
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if (obj.is_namespace() && key.is_string()) {
    return getattr(obj, key.as_string());
  } else if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_sequence()) {
      const ValueList& items = obj.as_list();
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[i];
    } else {
      const std::string& s = obj.as_string();
      if (py::is_ascii(s)) {
        int64_t n = static_cast<int64_t>(s.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(std::string(1, s[i]));
      } else {
        std::u32string u = py::decode(s);
        int64_t n = static_cast<int64_t>(u.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(py::encode(std::u32string_view(u).substr(i, 1)));
      }
    }
    return Value::undefined(undefined_item_hint(obj, key));
  }
  if (key.is_string()) {  // Jinja falls back to attribute lookup for string keys
    if (!obj.is_namespace()) {
      if (auto m = method_value(*this, obj, key.as_string())) return *m;
    }
    return Value::undefined(undefined_attr_hint(obj, key.as_string()));
  }
  return Value::undefined(undefined_item_hint(obj, key));
}

// --- Template ------------------------------------------------------------------------------------

namespace {

Status to_status(const Error& e, int fallback_line) {
  if (e.message.rfind("jinja", 0) == 0) return Status(e.code, e.message);
  int line = e.line ? e.line : fallback_line;
  return Status(e.code, fmt::format("jinja: {} (template line {})", e.message, line));
}

}  // namespace

Result<Template> Template::parse(std::string_view source) {
  try {
    Template t;
    t.program_ = parse_program(source);
    return t;
  } catch (const Error& e) {
    return to_status(e, 0);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kInvalidArgument, "jinja: out of memory while parsing the template");
  }
}

Result<std::string> Template::render(const Context& vars, const RenderLimits& limits) const {
  if (!program_) return Status(StatusCode::kInvalidArgument, "jinja: render on an empty template");
  auto root = std::make_shared<Scope>();
  root->vars = vars;
  Interp interp(limits);
  std::string out;
  try {
    interp.render(*program_, root, out);
  } catch (const Error& e) {
    return to_status(e, interp.line());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("jinja: out of memory while rendering (template line {})", interp.line()));
  }
  return out;
}

}  // namespace hs::jinja
