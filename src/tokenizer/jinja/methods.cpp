// tokenizer/jinja/methods.cpp — Python methods on str/dict/list, Jinja's sandbox rules for
// them, the global functions transformers provides (range, namespace, dict,
// raise_exception, strftime_now), and the messages of undefined values.
//
// As in Jinja's ImmutableSandboxedEnvironment, mutating methods (list.append, dict.update,
// ...) resolve to an undefined value whose use fails with "access to attribute ... is
// unsafe". Methods are looked up by name per access: O(1) small string compares.
#include <algorithm>
#include <ctime>
#include <string_view>

#include <fmt/format.h>

#include "tokenizer/jinja/interp.h"
#include "tokenizer/jinja/params.h"
#include "tokenizer/jinja/pystr.h"

namespace hs::jinja {

namespace {

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool is_str_method(std::string_view n) {
  return one_of(n, {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
                    "upper", "lower", "title", "capitalize", "casefold", "replace", "find", "rfind", "index",
                    "rindex", "count", "join", "isdigit", "isalpha", "isalnum", "isspace", "islower",
                    "isupper", "isnumeric", "isdecimal", "zfill", "center", "ljust", "rjust", "partition",
                    "rpartition", "removeprefix", "removesuffix", "format"});
}

// Python str methods this interpreter does not implement: calling one is "unsupported".
bool is_unimplemented_str_method(std::string_view n) {
  return one_of(n, {"encode", "expandtabs", "format_map", "isascii", "isidentifier", "isprintable", "istitle",
                    "maketrans", "swapcase", "translate"});
}

std::string type_object(const Value& v) { return std::string(v.type_name()) + " object"; }

bool affix_check(const Value& self, CallArgs& a, bool suffix) {
  Params p(a, suffix ? "endswith" : "startswith", {"prefix"});
  if (!p.has(0)) fail_runtime("startswith()/endswith() take exactly one argument");
  const std::string& s = self.as_string();
  auto test = [&](const Value& v) {
    if (!v.is_string()) fail_runtime("startswith()/endswith() first arg must be str or a tuple of str");
    const std::string& x = v.as_string();
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  const Value& arg = *p.get(0);
  if (arg.is_tuple()) {
    for (const auto& v : arg.as_list()) {
      if (test(v)) return true;
    }
    return false;
  }
  return test(arg);
}

Value str_method(Interp& in, const Value& self, std::string_view name, CallArgs& a) {
  const std::string& s = self.as_string();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(a, name, {"chars"});
    return Value(py::strip(s, p.str_opt(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Params p(a, name, {"sep", "maxsplit"});
    auto sep = p.str_opt(0);
    if (sep && sep->empty()) fail_runtime("empty separator");
    ValueList parts;
    for (auto& part : py::split(s, sep, p.int_or(1, -1), name == "rsplit")) parts.emplace_back(std::move(part));
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    Params p(a, name, {});
    ValueList parts;
    for (auto& part : py::splitlines(s)) parts.emplace_back(std::move(part));
    return Value::list(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") return Value(affix_check(self, a, name == "endswith"));
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "casefold") {
    Params p(a, name, {});
    if (name == "upper") return Value(py::upper(s));
    if (name == "title") return Value(py::title(s));
    if (name == "capitalize") return Value(py::capitalize(s));
    return Value(py::lower(s));
  }
  if (name == "replace") {
    Params p(a, name, {"old", "new", "count"});
    std::string to = p.str_req(1);
    return Value(py::replace(s, p.str_req(0), to, p.int_or(2, -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Params p(a, name, {"sub"});
    std::string sub = p.str_req(0);
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(py::length(s) + 1));
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
      return Value(n);
    }
    int64_t r = py::find(s, sub, name[0] == 'r');
    if (r < 0 && (name == "index" || name == "rindex")) fail_runtime("substring not found");
    return Value(r);
  }
  if (name == "join") {
    Params p(a, name, {"iterable"});
    if (!p.has(0)) fail_runtime("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& v : in.iterate(*p.get(0))) {
      if (!v.is_string()) fail_runtime(fmt::format("sequence item: expected str instance, {} found", v.type_name()));
      if (!first) out += s;
      first = false;
      out += v.as_string();
      in.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name.substr(0, 2) == "is") {
    Params p(a, name, {});
    if (name == "islower") return Value(py::is_lower(s));
    if (name == "isupper") return Value(py::is_upper(s));
    std::u32string u = py::decode(s);
    if (u.empty()) return Value(false);
    return Value(std::all_of(u.begin(), u.end(), [&](char32_t c) {
      bool digit = c >= '0' && c <= '9';
      bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && !py::is_space(c));
      if (name == "isspace") return py::is_space(c);
      if (name == "isalpha") return alpha;
      if (name == "isalnum") return alpha || digit;
      return digit;  // isdigit / isnumeric / isdecimal (ASCII digits)
    }));
  }
  if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
    Params p(a, name, {"width", "fillchar"});
    int64_t width = p.int_or(0, 0), len = static_cast<int64_t>(py::length(s));
    std::string fill = p.str_opt(1).value_or(name == "zfill" ? "0" : " ");
    if (width <= len) return Value(s);
    int64_t pad = width - len;
    auto rep = [&](int64_t k) {
      std::string r;
      for (int64_t i = 0; i < k; ++i) r += fill;
      return r;
    };
    if (name == "ljust") return Value(s + rep(pad));
    if (name == "rjust") return Value(rep(pad) + s);
    if (name == "center") {
      int64_t left = pad / 2 + (pad & width & 1);
      return Value(rep(left) + s + rep(pad - left));
    }
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value(s.substr(0, 1) + rep(pad) + s.substr(1));
    return Value(rep(pad) + s);
  }
  if (name == "partition" || name == "rpartition") {
    Params p(a, name, {"sep"});
    std::string sep = p.str_req(0);
    if (sep.empty()) fail_runtime("empty separator");
    size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos) {
      return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")})
                                 : Value::tuple({Value(""), Value(""), Value(s)});
    }
    return Value::tuple({Value(s.substr(0, hit)), Value(sep), Value(s.substr(hit + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(a, name, {"affix"});
    std::string x = p.str_req(0);
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
    if (name == "removesuffix" && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value(s.substr(0, s.size() - x.size()));
    }
    return Value(s);
  }
  if (name == "format") {  // str.format with {} / {0} / {name} fields, no format specs
    std::string out;
    size_t auto_idx = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c == '{' && i + 1 < s.size() && s[i + 1] == '{') {
        out += '{';
        ++i;
      } else if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') {
        out += '}';
        ++i;
      } else if (c == '{') {
        size_t close = s.find('}', i);
        if (close == std::string::npos) fail_runtime("Single '{' encountered in format string");
        std::string field = s.substr(i + 1, close - i - 1);
        if (field.find_first_of(":!.[") != std::string::npos) {
          fail(StatusCode::kUnsupported, fmt::format("str.format(): unsupported field '{{{}}}'", field));
        }
        const Value* v = nullptr;
        if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
          size_t idx = field.empty() ? auto_idx++ : std::stoul(field);
          if (idx >= a.positional.size()) fail_runtime("Replacement index out of range for positional args tuple");
          v = &a.positional[idx];
        } else {
          for (const auto& kv : a.keyword) {
            if (kv.first == field) v = &kv.second;
          }
          if (!v) fail_runtime(fmt::format("KeyError: '{}'", field));
        }
        out += v->str();
        i = close;
      } else if (c == '}') {
        fail_runtime("Single '}' encountered in format string");
      } else {
        out += c;
      }
    }
    return Value(std::move(out));
  }
  fail(StatusCode::kUnsupported, fmt::format("unsupported method 'str.{}'", name));
}

Value dict_method(const Value& self, std::string_view name, CallArgs& a) {
  const Dict& d = self.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    Params p(a, name, {});
    ValueList out;
    for (const auto& [k, v] : d.entries) {
      if (name == "items") out.push_back(Value::tuple({k, v}));
      else out.push_back(name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    Params p(a, name, {"key", "default"});
    if (!p.has(0)) fail_runtime("get expected at least 1 argument, got 0");
    if (const Value* v = d.find(*p.get(0))) return *v;
    return p.value_or(1, Value::none());
  }
  if (name == "copy") {
    Params p(a, name, {});
    return self;  // immutable: sharing is a copy
  }
  fail(StatusCode::kUnsupported, fmt::format("unsupported method 'dict.{}'", name));
}

Value list_method(const Value& self, std::string_view name, CallArgs& a) {
  const ValueList& items = self.as_list();
  if (name == "index" || name == "count") {
    Params p(a, name, {"value"});
    if (!p.has(0)) fail_runtime(fmt::format("{}() takes exactly one argument", name));
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!py_equal(items[i], *p.get(0))) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") fail_runtime(fmt::format("{} is not in list", p.get(0)->repr()));
    return Value(n);
  }
  if (name == "copy") {
    Params p(a, name, {});
    return Value::list(items);
  }
  fail(StatusCode::kUnsupported, fmt::format("unsupported method '{}.{}'", self.type_name(), name));
}

// --- globals ---------------------------------------------------------------------------------

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE

Value g_range(CallArgs& a) {
  Params p(a, "range", {"start", "stop", "step"});
  for (size_t i = 0; i < 3; ++i) {
    if (p.has(i) && !p.get(i)->is_int() && !p.get(i)->is_bool()) {
      fail_runtime(fmt::format("'{}' object cannot be interpreted as an integer", p.get(i)->type_name()));
    }
  }
  if (!p.has(0)) fail_runtime("range expected at least 1 argument, got 0");
  int64_t start = 0, stop, step = p.int_or(2, 1);
  if (p.has(1)) {
    start = p.int_or(0, 0);
    stop = p.int_or(1, 0);
  } else {
    stop = p.int_or(0, 0);
  }
  if (step == 0) fail_runtime("range() arg 3 must not be zero");
  __int128 count = 0;
  if (step > 0 && stop > start) count = (static_cast<__int128>(stop) - start + step - 1) / step;
  if (step < 0 && stop < start) count = (static_cast<__int128>(start) - stop - step - 1) / -step;
  if (count > kMaxRange) {
    fail_runtime("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  ValueList out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0, v = start; i < count; ++i, v += step) out.emplace_back(v);
  return Value::list(std::move(out));
}

// dict(...) and namespace(...): an optional mapping or (key, value) pairs, then keywords.
Dict build_mapping(CallArgs& a, const char* fn) {
  if (a.positional.size() > 1) fail_runtime(fmt::format("{} expected at most 1 argument, got {}", fn, a.positional.size()));
  Dict d;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else if (src.is_sequence()) {
      for (const Value& pair : src.as_list()) {
        if (!pair.is_sequence() || pair.as_list().size() != 2) {
          fail_runtime(fmt::format("{}: sequence elements must be (key, value) pairs", fn));
        }
        d.set(pair.as_list()[0], pair.as_list()[1]);
      }
    } else if (src.is_namespace()) {
      for (const auto& [k, v] : src.as_namespace().attrs) d.set(Value(k), v);
    } else {
      fail_runtime(fmt::format("'{}' object is not iterable", src.type_name()));
    }
  }
  for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
  return d;
}

Value g_namespace(CallArgs& a) {
  auto ns = std::make_shared<Namespace>();
  for (auto& [k, v] : build_mapping(a, "namespace").entries) {
    std::string name = k.str();
    if (!name.empty() && name[0] == '_') {
      fail_runtime(fmt::format("cannot store underscore-prefixed attribute '{}' on a namespace", name));
    }
    ns->set(name, v);
  }
  return Value::ns(std::move(ns));
}

Value g_dict(CallArgs& a) { return Value::dict(build_mapping(a, "dict")); }

Value g_raise_exception(CallArgs& a) {
  std::string msg = a.positional.empty() ? "" : a.positional[0].str();
  fail(StatusCode::kInvalidArgument, "template raised: " + msg);
}

Value g_strftime_now(CallArgs& a) {
  Params p(a, "strftime_now", {"format"});
  std::string f = p.str_req(0);
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string buf(256, '\0');
  for (int tries = 0; tries < 8; ++tries) {
    size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
    if (n > 0 || f.empty()) return Value(buf.substr(0, n));
    buf.resize(buf.size() * 4);
  }
  return Value("");
}

}  // namespace

Value call_method(Interp& in, const Value& self, std::string_view name, CallArgs& args) {
  switch (self.kind()) {
    case Kind::kString: return str_method(in, self, name, args);
    case Kind::kDict: return dict_method(self, name, args);
    case Kind::kList:
    case Kind::kTuple: return list_method(self, name, args);
    default: fail(StatusCode::kUnsupported, fmt::format("unsupported method '{}.{}'", self.type_name(), name));
  }
}

std::optional<Value> method_value(Interp& in, const Value& self, std::string_view name) {
  bool safe = false, unsafe = false;
  switch (self.kind()) {
    case Kind::kString:
      safe = is_str_method(name);
      if (is_unimplemented_str_method(name)) return Value::undefined(fmt::format("unsupported method 'str.{}'", name));
      break;
    case Kind::kDict:
      safe = one_of(name, {"items", "keys", "values", "get", "copy"});
      unsafe = one_of(name, {"clear", "pop", "popitem", "setdefault", "update"});
      break;
    case Kind::kList:
      safe = one_of(name, {"index", "count", "copy"});
      unsafe = one_of(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"});
      break;
    case Kind::kTuple:
      safe = one_of(name, {"index", "count"});
      break;
    default:
      break;
  }
  if (unsafe) {
    return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, self.type_name()));
  }
  if (!safe) return std::nullopt;
  Interp* interp = &in;
  std::string method(name);
  return Value::function(std::string(self.type_name()) + "." + method,
                         [interp, self, method](CallArgs& args) { return call_method(*interp, self, method, args); });
}

const Value* lookup_global(std::string_view name) {
  static const std::vector<std::pair<std::string_view, Value>> kGlobals = {
      {"range", Value::function("range", g_range)},
      {"namespace", Value::function("namespace", g_namespace)},
      {"dict", Value::function("dict", g_dict)},
      {"raise_exception", Value::function("raise_exception", g_raise_exception)},
      {"strftime_now", Value::function("strftime_now", g_strftime_now)},
  };
  for (const auto& [k, v] : kGlobals) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string undefined_attr_hint(const Value& obj, std::string_view name) {
  if (obj.is_none()) return fmt::format("'None' has no attribute {}", py::repr_string(name));
  return fmt::format("'{}' has no attribute {}", type_object(obj), py::repr_string(name));
}

std::string undefined_item_hint(const Value& obj, const Value& key) {
  if (obj.is_none()) return fmt::format("None has no element {}", key.repr());
  return fmt::format("{} has no element {}", type_object(obj), key.repr());
}

}  // namespace hs::jinja
