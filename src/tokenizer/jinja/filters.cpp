// tokenizer/jinja/filters.cpp — Jinja's builtin filters and tests, as transformers sees them
// (its `tojson` override included: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False)), plus iteration and membership.
//
// Filters that return generators in Jinja (map, select, reverse, unique, ...) return lists
// here: templates only iterate, join or `|list` them. Costs are those of the Python
// originals: O(n) per pass, O(n log n) for sorts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include <fmt/format.h>

#include "tokenizer/jinja/interp.h"
#include "tokenizer/jinja/params.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/pystr.h"

namespace hs::jinja {

ValueList Interp::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kList:
    case Kind::kTuple:
      return v.as_list();
    case Kind::kDict: {
      ValueList keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& kv : v.as_dict().entries) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      for (char32_t c : py::decode(v.as_string())) chars.emplace_back(py::encode(std::u32string(1, c)));
      return chars;
    }
    case Kind::kUndefined:
      return {};
    default:
      fail_runtime(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is_string()) {
        fail_runtime(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple:
      for (const auto& v : container.as_list()) {
        if (py_equal(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      fail_runtime(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

namespace {

using FilterFn = Value (*)(Interp&, const Value&, CallArgs&);
using TestFn = bool (*)(Interp&, const Value&, CallArgs&);

// Jinja's attribute getter: "a.b.0" walks items (ints for digit parts), like make_attrgetter.
Value attr_path(Interp& in, Value item, const Value& attribute) {
  if (!attribute.is_string()) return in.getitem(item, attribute);
  for (const std::string& part : py::split(attribute.as_string(), std::string("."), -1, false)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    item = in.getitem(item, digits ? Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10))) : Value(part));
  }
  return item;
}

// Sort/compare key: lower-cased strings unless case-sensitive.
Value fold(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py::lower(v.as_string()));
  return v;
}

Value f_length(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "length", {});
  switch (v.kind()) {
    case Kind::kString: return Value(static_cast<int64_t>(py::length(v.as_string())));
    case Kind::kList:
    case Kind::kTuple: return Value(static_cast<int64_t>(v.as_list().size()));
    case Kind::kDict: return Value(static_cast<int64_t>(v.as_dict().entries.size()));
    case Kind::kUndefined: return Value(int64_t{0});
    default: fail_runtime(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

Value f_first(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "first", {});
  ValueList items = in.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "last", {});
  if (v.is_undefined()) fail_runtime("'Undefined' object is not reversible");
  ValueList items = in.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_join(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "join", {"d", "attribute"});
  std::string sep = p.has(0) ? p.get(0)->str() : "";
  std::string out;
  bool first = true;
  for (Value item : in.iterate(v)) {
    if (p.has(1) && !p.get(1)->is_none()) item = attr_path(in, item, *p.get(1));
    if (!first) out += sep;
    first = false;
    out += item.str();
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_default(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "default", {"default_value", "boolean"});
  bool use_default = p.bool_or(1, false) ? !v.truthy() : v.is_undefined();
  return use_default ? p.value_or(0, Value("")) : v;
}

Value f_trim(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "trim", {"chars"});
  return Value(py::strip(v.str(), p.str_opt(0), true, true));
}

Value f_upper(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "upper", {});
  return Value(py::upper(v.str()));
}
Value f_lower(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "lower", {});
  return Value(py::lower(v.str()));
}
Value f_title(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "title", {});
  return Value(py::title(v.str()));
}
Value f_capitalize(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "capitalize", {});
  return Value(py::capitalize(v.str()));
}
Value f_string(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "string", {});
  return Value(v.str());
}
Value f_safe(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "safe", {});
  return v;
}

Value f_escape(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "escape", {});
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_tojson(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = p.bool_or(0, false);
  if (p.has(1) && !p.get(1)->is_none()) {
    const Value& ind = *p.get(1);
    if (ind.is_string()) o.indent = ind.as_string();
    else if (ind.is_int() || ind.is_bool()) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind.as_int())), ' ');
    else fail_runtime("tojson(): indent must be an int or a string");
  }
  if (p.has(2) && !p.get(2)->is_none()) {
    ValueList seps = in.iterate(*p.get(2));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      fail_runtime("tojson(): separators must be a pair of strings");
    }
    o.item_sep = seps[0].as_string();
    o.key_sep = seps[1].as_string();
  }
  o.sort_keys = p.bool_or(3, false);
  std::string out = to_json(v, o);
  in.check_size(out.size());
  return Value(std::move(out));
}

// Python int(str, base): optional whitespace and sign, digits with single underscores.
std::optional<int64_t> parse_py_int(const std::string& text, int base) {
  std::string s = py::strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || s[i - 1] == '_' || s[i + 1] == '_') return std::nullopt;
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(clean.c_str(), &end, base);
  if (errno == ERANGE || *end != '\0' || end == clean.c_str()) return std::nullopt;
  if (clean[0] == ' ' || clean[0] == '\t') return std::nullopt;
  return v;
}

std::optional<double> parse_py_float(const std::string& text) {
  std::string s = py::strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty() || clean.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (*end != '\0' || end == clean.c_str()) return std::nullopt;
  return d;
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "int", {"default", "base"});
  Value dflt = p.value_or(0, Value(int64_t{0}));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double d = v.to_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_py_int(v.as_string(), static_cast<int>(p.int_or(1, 10)))) return Value(*i);
    if (auto d = parse_py_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
      return Value(static_cast<int64_t>(*d));
    }
  }
  return dflt;
}

Value f_float(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "float", {"default"});
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    if (auto d = parse_py_float(v.as_string())) return Value(*d);
  }
  return p.value_or(0, Value(0.0));
}

Value f_list(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "list", {});
  return Value::list(in.iterate(v));
}

Value f_reverse(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "reverse", {});
  if (v.is_string()) {
    std::u32string u = py::decode(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value(py::encode(u));
  }
  ValueList items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_replace(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "replace", {"old", "new", "count"});
  std::string from = p.has(0) ? p.get(0)->str() : "";
  std::string to = p.has(1) ? p.get(1)->str() : "";
  return Value(py::replace(v.str(), from, to, p.int_or(2, -1)));
}

Value f_indent(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "indent", {"width", "first", "blank"});
  std::string pad;
  if (p.has(0) && p.get(0)->is_string()) pad = p.get(0)->as_string();
  else pad = std::string(static_cast<size_t>(std::max<int64_t>(0, p.int_or(0, 4))), ' ');
  std::vector<std::string> lines = py::splitlines(v.str() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (p.bool_or(2, false) || !lines[i].empty()) out += pad;
    }
    out += lines[i];
  }
  if (p.bool_or(1, false)) out = pad + out;
  return Value(std::move(out));
}

Value f_abs(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "abs", {});
  if (v.is_float()) return Value(std::fabs(v.to_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) fail_runtime("integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  fail_runtime(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_round(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "round", {"precision", "method"});
  int64_t prec = p.int_or(0, 0);
  std::string method = p.str_opt(1).value_or("common");
  if (!v.is_number()) fail_runtime(fmt::format("type {} doesn't define __round__ method", v.type_name()));
  if (method != "common" && method != "ceil" && method != "floor") {
    fail_runtime("method must be 'common', 'ceil' or 'floor'");
  }
  if (!v.is_float() && method == "common") return Value(v.as_int());  // round(int, n) stays an int
  double d = v.to_double();
  if (method == "common") {
    if (!std::isfinite(d)) return Value(d);
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(prec, 0, 300)), d);
    double r = std::strtod(buf, nullptr);
    if (prec < 0) {
      double scale = std::pow(10.0, static_cast<double>(-prec));
      r = std::nearbyint(d / scale) * scale;
    }
    return Value(r);
  }
  double scale = std::pow(10.0, static_cast<double>(prec));
  double r = method == "ceil" ? std::ceil(d * scale) / scale : std::floor(d * scale) / scale;
  return Value(r);
}

Value f_sum(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "sum", {"attribute", "start"});
  Value total = p.value_or(1, Value(int64_t{0}));
  for (Value item : in.iterate(v)) {
    if (p.has(0) && !p.get(0)->is_none()) item = attr_path(in, item, *p.get(0));
    if (total.is_number() && item.is_number()) {
      total = (total.is_float() || item.is_float()) ? Value(total.to_double() + item.to_double())
                                                    : Value(total.as_int() + item.as_int());
    } else {
      fail_runtime(fmt::format("unsupported operand type(s) for +: '{}' and '{}'", total.type_name(), item.type_name()));
    }
  }
  return total;
}

Value min_max(Interp& in, const Value& v, CallArgs& a, bool want_max) {
  Params p(a, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  bool cs = p.bool_or(0, false);
  ValueList items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    return fold(p.has(1) && !p.get(1)->is_none() ? attr_path(in, x, *p.get(1)) : x, cs);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    int c = py_compare(k, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Value f_min(Interp& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interp& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_wordcount(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "wordcount", {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : py::decode(v.str())) {
    bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                (c >= 0x80 && !py::is_space(c));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value f_center(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "center", {"width"});
  std::string s = v.str();
  int64_t width = p.int_or(0, 80), len = static_cast<int64_t>(py::length(s));
  if (width <= len) return Value(s);
  int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
  return Value(std::string(left, ' ') + s + std::string(pad - left, ' '));
}

Value f_items(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "items", {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail_runtime("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Value f_dictsort(Interp&, const Value& v, CallArgs& a) {
  Params p(a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) fail_runtime("dictsort(): argument must be a mapping");
  bool cs = p.bool_or(0, false);
  std::string by = p.str_opt(1).value_or("key");
  if (by != "key" && by != "value") fail_runtime("You can only sort by either \"key\" or \"value\"");
  size_t pos = by == "key" ? 0 : 1;
  ValueList pairs;
  for (const auto& [k, val] : v.as_dict().entries) pairs.push_back(Value::tuple({k, val}));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    return py_compare(fold(x.as_list()[pos], cs), fold(y.as_list()[pos], cs), "<") < 0;
  });
  if (p.bool_or(2, false)) std::reverse(pairs.begin(), pairs.end());
  return Value::list(std::move(pairs));
}

Value f_sort(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "sort", {"reverse", "case_sensitive", "attribute"});
  bool rev = p.bool_or(0, false), cs = p.bool_or(1, false);
  ValueList items = in.iterate(v);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = p.has(2) && !p.get(2)->is_none() ? attr_path(in, items[i], *p.get(2)) : items[i];
    keyed.emplace_back(fold(k, cs), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? py_compare(y.first, x.first, "<") < 0 : py_compare(x.first, y.first, "<") < 0;
  });
  ValueList out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_unique(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "unique", {"case_sensitive", "attribute"});
  bool cs = p.bool_or(0, false);
  ValueList out, seen;
  for (const Value& item : in.iterate(v)) {
    Value k = fold(p.has(1) && !p.get(1)->is_none() ? attr_path(in, item, *p.get(1)) : item, cs);
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); });
    if (dup) continue;
    seen.push_back(std::move(k));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_attr(Interp& in, const Value& v, CallArgs& a) {
  Params p(a, "attr", {"name"});
  return in.getattr(v, p.str_req(0));
}

Value f_map(Interp& in, const Value& v, CallArgs& a) {
  ValueList out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, val] : a.keyword) {
    if (k == "attribute") attribute = &val;
    else if (k == "default") dflt = &val;
  }
  if (attribute) {
    for (const Value& item : in.iterate(v)) {
      Value r = attr_path(in, item, *attribute);
      if (r.is_undefined() && dflt) r = *dflt;
      out.push_back(std::move(r));
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) fail_runtime("map(): expected a filter name or attribute=");
  std::string name = a.positional[0].as_string();
  if (!is_known_filter(name)) fail(StatusCode::kUnsupported, fmt::format("unsupported filter '{}' in map()", name));
  for (const Value& item : in.iterate(v)) {
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    out.push_back(in.filter(name, item, rest));
  }
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr share this: `args` = [attribute,] [test name, test args...].
Value select_impl(Interp& in, const Value& v, CallArgs& a, bool by_attr, bool keep_when) {
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (a.positional.empty()) fail_runtime("selectattr()/rejectattr() need an attribute name");
    attribute = a.positional[next++];
  }
  std::string test_name;
  if (next < a.positional.size()) {
    if (!a.positional[next].is_string()) fail_runtime("select(): test name must be a string");
    test_name = a.positional[next++].as_string();
    if (!is_known_test(test_name)) fail(StatusCode::kUnsupported, fmt::format("unsupported test '{}'", test_name));
  }
  ValueList out;
  for (const Value& item : in.iterate(v)) {
    Value subject = by_attr ? attr_path(in, item, attribute) : item;
    bool ok;
    if (test_name.empty()) {
      ok = subject.truthy();
    } else {
      CallArgs targs;
      targs.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end());
      targs.keyword = a.keyword;
      ok = in.test(test_name, subject, targs);
    }
    if (ok == keep_when) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

// printf-style `"%s, %d" | format(a, b)`: %s %r %d %i %% only.
Value f_format(Interp&, const Value& v, CallArgs& a) {
  std::string fmt_str = v.str(), out;
  size_t next = 0;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    if (fmt_str[i] != '%') {
      out += fmt_str[i];
      continue;
    }
    if (++i >= fmt_str.size()) fail_runtime("incomplete format");
    char c = fmt_str[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= a.positional.size()) fail_runtime("not enough arguments for format string");
    const Value& arg = a.positional[next++];
    if (c == 's') out += arg.str();
    else if (c == 'r') out += arg.repr();
    else if ((c == 'd' || c == 'i') && arg.is_number()) out += std::to_string(arg.is_float() ? static_cast<int64_t>(arg.to_double()) : arg.as_int());
    else fail(StatusCode::kUnsupported, fmt::format("format(): unsupported conversion '%{}'", c));
  }
  if (next < a.positional.size()) fail_runtime("not all arguments converted during string formatting");
  return Value(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", f_abs},         {"attr", f_attr},           {"capitalize", f_capitalize}, {"center", f_center},
      {"count", f_length},    {"d", f_default},           {"default", f_default},       {"dictsort", f_dictsort},
      {"e", f_escape},        {"escape", f_escape},       {"first", f_first},           {"float", f_float},
      {"format", f_format},   {"indent", f_indent},       {"int", f_int},               {"items", f_items},
      {"join", f_join},       {"last", f_last},           {"length", f_length},         {"list", f_list},
      {"lower", f_lower},     {"map", f_map},             {"max", f_max},               {"min", f_min},
      {"reject", f_reject},   {"rejectattr", f_rejectattr}, {"replace", f_replace},     {"reverse", f_reverse},
      {"round", f_round},     {"safe", f_safe},           {"select", f_select},         {"selectattr", f_selectattr},
      {"sort", f_sort},       {"string", f_string},       {"sum", f_sum},               {"title", f_title},
      {"tojson", f_tojson},   {"trim", f_trim},           {"unique", f_unique},         {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return kFilters;
}

// --- tests -----------------------------------------------------------------------------------

const Value& arg0(CallArgs& a, const char* name) {
  if (a.positional.empty()) {
    for (const auto& kv : a.keyword) return kv.second;
    fail_runtime(fmt::format("test '{}' needs an argument", name));
  }
  return a.positional[0];
}

int64_t int_subject(const Value& v) {
  if (v.is_undefined()) fail_runtime(v.undefined_message());
  if (v.is_int() || v.is_bool()) return v.as_int();
  fail_runtime(fmt::format("unsupported operand type for %: '{}'", v.type_name()));
}

bool t_defined(Interp&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interp&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interp&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interp&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interp&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interp&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interp&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_iterable(Interp&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Interp&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool t_callable(Interp&, const Value& v, CallArgs&) { return v.is_function(); }
bool t_odd(Interp&, const Value& v, CallArgs&) { return int_subject(v) % 2 != 0; }
bool t_even(Interp&, const Value& v, CallArgs&) { return int_subject(v) % 2 == 0; }
bool t_divisibleby(Interp&, const Value& v, CallArgs& a) {
  int64_t d = int_subject(arg0(a, "divisibleby"));
  if (d == 0) fail_runtime("integer division or modulo by zero");
  return int_subject(v) % d == 0;
}
bool t_eq(Interp&, const Value& v, CallArgs& a) { return py_equal(v, arg0(a, "eq")); }
bool t_ne(Interp&, const Value& v, CallArgs& a) { return !py_equal(v, arg0(a, "ne")); }
bool t_lt(Interp&, const Value& v, CallArgs& a) { return py_compare(v, arg0(a, "lt"), "<") < 0; }
bool t_le(Interp&, const Value& v, CallArgs& a) { return py_compare(v, arg0(a, "le"), "<=") <= 0; }
bool t_gt(Interp&, const Value& v, CallArgs& a) { return py_compare(v, arg0(a, "gt"), ">") > 0; }
bool t_ge(Interp&, const Value& v, CallArgs& a) { return py_compare(v, arg0(a, "ge"), ">=") >= 0; }
bool t_in(Interp&, const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.identity() != nullptr) return v.identity() == o.identity();
  return py_equal(v, o);
}
bool t_lower(Interp&, const Value& v, CallArgs&) { return py::is_lower(v.str()); }
bool t_upper(Interp&, const Value& v, CallArgs&) { return py::is_upper(v.str()); }
bool t_escaped(Interp&, const Value&, CallArgs&) { return false; }
bool t_filter(Interp&, const Value& v, CallArgs&) { return v.is_string() && is_known_filter(v.as_string()); }
bool t_test(Interp&, const Value& v, CallArgs&) { return v.is_string() && is_known_test(v.as_string()); }

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},   {"divisibleby", t_divisibleby},
      {"eq", t_eq},           {"equalto", t_eq},        {"escaped", t_escaped},   {"even", t_even},
      {"false", t_false},     {"filter", t_filter},     {"float", t_float},       {"ge", t_ge},
      {"greaterthan", t_gt},  {"gt", t_gt},             {"in", t_in},             {"integer", t_integer},
      {"iterable", t_iterable}, {"le", t_le},           {"lessthan", t_lt},       {"lower", t_lower},
      {"lt", t_lt},           {"mapping", t_mapping},   {"ne", t_ne},             {"none", t_none},
      {"number", t_number},   {"odd", t_odd},           {"sameas", t_sameas},     {"sequence", t_sequence},
      {"string", t_string},   {"test", t_test},         {"true", t_true},         {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return kTests;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filters().count(name) > 0; }
bool is_known_test(std::string_view name) { return tests().count(name) > 0; }

Value Interp::filter(std::string_view name, const Value& subject, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail(StatusCode::kUnsupported, fmt::format("unsupported filter '{}'", name));
  return it->second(*this, subject, args);
}

bool Interp::test(std::string_view name, const Value& subject, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail(StatusCode::kUnsupported, fmt::format("unsupported test '{}'", name));
  return it->second(*this, subject, args);
}

}  // namespace hs::jinja
