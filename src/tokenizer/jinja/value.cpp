// tokenizer/jinja/value.cpp — Value construction, Python str()/repr()/==/ordering, and the
// JSON bridge (nlohmann input, Python json.dumps output).
//
// Costs: repr/str/to_json are O(size of the printed value); equality on containers is
// element-wise; dict equality is O(n*m) (linear lookups), fine for chat-sized dicts.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/pystr.h"

namespace hs::jinja {

namespace {
constexpr int kMaxReprDepth = 200;  // only namespaces can form cycles; stop before the stack does
}  // namespace

void fail(StatusCode code, std::string message, int line) {
  throw Error{code, std::move(message), line};
}

Value Value::undefined(std::string hint) {
  Value v;
  v.v_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), v_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), v_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), v_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), v_(std::move(s)) {}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.v_ = std::shared_ptr<const ValueList>(std::make_shared<ValueList>(std::move(items)));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.v_ = std::shared_ptr<const Dict>(std::make_shared<Dict>(std::move(d)));
  return v;
}

Value Value::ns(std::shared_ptr<Namespace> n) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.v_ = std::move(n);
  return v;
}

Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.v_ = std::shared_ptr<const Function>(std::make_shared<Function>(Function{std::move(name), std::move(fn)}));
  return v;
}

double Value::to_double() const {
  if (kind_ == Kind::kFloat) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::kList:
    case Kind::kTuple:
      return std::get<std::shared_ptr<const ValueList>>(v_).get();
    case Kind::kDict:
      return std::get<std::shared_ptr<const Dict>>(v_).get();
    case Kind::kNamespace:
      return std::get<std::shared_ptr<Namespace>>(v_).get();
    case Kind::kFunction:
      return std::get<std::shared_ptr<const Function>>(v_).get();
    default:
      return nullptr;
  }
}

std::string Value::undefined_message() const {
  const auto* hint = std::get_if<std::string>(&v_);
  if (hint && !hint->empty()) return *hint;
  return "value is undefined";
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return to_double() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().entries.empty();
    default:
      return true;
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kFunction: return "function";
  }
  return "object";
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: {
      std::string out;
      append_repr(out, 0);
      return out;
    }
  }
}

std::string Value::repr() const {
  std::string out;
  append_repr(out, 0);
  return out;
}

void Value::append_repr(std::string& out, int depth) const {
  if (depth > kMaxReprDepth) fail_runtime("maximum recursion depth exceeded while printing a value");
  switch (kind_) {
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += as_bool() ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(as_int()); return;
    case Kind::kFloat: out += py::float_repr(to_double()); return;
    case Kind::kString: out += py::repr_string(as_string()); return;
    case Kind::kList:
    case Kind::kTuple: {
      const ValueList& items = as_list();
      out += kind_ == Kind::kList ? '[' : '(';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        items[i].append_repr(out, depth + 1);
      }
      if (kind_ == Kind::kTuple && items.size() == 1) out += ',';
      out += kind_ == Kind::kList ? ']' : ')';
      return;
    }
    case Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        k.append_repr(out, depth + 1);
        out += ": ";
        v.append_repr(out, depth + 1);
      }
      out += '}';
      return;
    }
    case Kind::kNamespace: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : as_namespace().attrs) {
        if (!first) out += ", ";
        first = false;
        out += py::repr_string(k);
        out += ": ";
        v.append_repr(out, depth + 1);
      }
      out += "}>";
      return;
    }
    case Kind::kFunction:
      out += "<function " + as_function().name + ">";
      return;
  }
}

// --- Dict / Namespace --------------------------------------------------------------------------

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries) {
    if (py_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value* Namespace::find(std::string_view name) {
  for (auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Namespace::set(const std::string& name, Value value) {
  if (Value* v = find(name)) {
    *v = std::move(value);
  } else {
    attrs.emplace_back(name, std::move(value));
  }
}

// --- equality and ordering ---------------------------------------------------------------------

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.as_string() == b.as_string();
    case Kind::kList:
    case Kind::kTuple: {
      const ValueList& x = a.as_list();
      const ValueList& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!py_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int py_compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_undefined()) fail_runtime(a.undefined_message());
  if (b.is_undefined()) fail_runtime(b.undefined_message());
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail_runtime(std::string("'") + op + "' not supported between instances of '" + a.type_name() +
               "' and '" + b.type_name() + "'");
}

// --- JSON --------------------------------------------------------------------------------------

namespace {
constexpr int kMaxJsonDepth = 512;  // recursion guard for hostile request JSON
}  // namespace

static Value from_json_at(const nlohmann::ordered_json& j, int depth);

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

static Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) fail_runtime("JSON input is nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (const auto& [k, v] : j.items()) d.entries.emplace_back(Value(k), from_json_at(v, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();  // binary/discarded never come from a parsed request
  }
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  auto escape_cp = [&](unsigned cp) {
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    out += buf;
  };
  auto put_ascii = [&](unsigned char c) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) escape_cp(c);
        else out += static_cast<char>(c);
    }
  };
  if (!ensure_ascii || py::is_ascii(s)) {
    // Bytes >= 0x80 pass through: with ensure_ascii=False Python writes them as they are.
    for (char ch : s) put_ascii(static_cast<unsigned char>(ch));
  } else {
    for (char32_t c : py::decode(s)) {
      if (c < 0x80) {
        put_ascii(static_cast<unsigned char>(c));
      } else if (c >= 0x10000) {
        unsigned v = c - 0x10000;
        escape_cp(0xD800 + (v >> 10));
        escape_cp(0xDC00 + (v & 0x3FF));
      } else {
        escape_cp(c);
      }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py::float_repr(d);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::kString: return k.as_string();
    case Kind::kInt: return std::to_string(k.as_int());
    case Kind::kFloat: return json_float(k.to_double());
    case Kind::kBool: return k.as_bool() ? "true" : "false";
    case Kind::kNone: return "null";
    default:
      fail_runtime(std::string("keys must be str, int, float, bool or None, not ") + k.type_name());
  }
}

void dump(std::string& out, const Value& v, const JsonOptions& o, const std::string& item_sep,
          int level) {
  if (level > kMaxReprDepth) fail_runtime("maximum recursion depth exceeded in tojson");
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += json_float(v.to_double()); return;
    case Kind::kString: json_string(out, v.as_string(), o.ensure_ascii); return;
    case Kind::kList:
    case Kind::kTuple: {
      const ValueList& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent) newline(level + 1);
        dump(out, items[i], o, item_sep, level + 1);
      }
      if (o.indent) newline(level);
      out += ']';
      return;
    }
    case Kind::kDict: {
      const Dict& d = v.as_dict();
      if (d.entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> kv;
      kv.reserve(d.entries.size());
      bool all_str = true;
      for (const auto& [k, val] : d.entries) {
        all_str = all_str && k.is_string();
        kv.emplace_back(json_key(k), &val);
      }
      if (o.sort_keys) {
        if (!all_str) fail_runtime("tojson: sort_keys needs string keys");
        std::stable_sort(kv.begin(), kv.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t i = 0; i < kv.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent) newline(level + 1);
        json_string(out, kv[i].first, o.ensure_ascii);
        out += o.key_sep;
        dump(out, *kv[i].second, o, item_sep, level + 1);
      }
      if (o.indent) newline(level);
      out += '}';
      return;
    }
    default:
      fail_runtime(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string item_sep = opts.item_sep ? *opts.item_sep : (opts.indent ? "," : ", ");
  std::string out;
  dump(out, v, opts, item_sep, 0);
  return out;
}

}  // namespace hs::jinja
