// tokenizer/jinja/params.h — binds call arguments to a Python-style signature (internal).
//
// Filters, tests, methods and globals declare their parameter names; positional arguments
// fill them in order and keywords by name, with Python's error messages for surplus or
// unknown arguments. Cost: O(parameters) per call, no allocation beyond the slot vector.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "tokenizer/jinja/value.h"

namespace hs::jinja {

class Params {
 public:
  Params(const CallArgs& a, std::string_view fn, std::initializer_list<std::string_view> names)
      : fn_(fn), names_(names), slots_(names.size(), nullptr) {
    if (a.positional.size() > names_.size()) {
      fail_runtime(fmt::format("{}() takes at most {} argument(s) ({} given)", fn, names_.size(), a.positional.size()));
    }
    for (size_t i = 0; i < a.positional.size(); ++i) slots_[i] = &a.positional[i];
    for (const auto& [k, v] : a.keyword) {
      size_t i = 0;
      while (i < names_.size() && names_[i] != k) ++i;
      if (i == names_.size()) fail_runtime(fmt::format("{}() got an unexpected keyword argument '{}'", fn, k));
      if (slots_[i]) fail_runtime(fmt::format("{}() got multiple values for argument '{}'", fn, k));
      slots_[i] = &v;
    }
  }

  bool has(size_t i) const { return slots_[i] != nullptr; }
  const Value* get(size_t i) const { return slots_[i]; }
  Value value_or(size_t i, Value dflt) const { return slots_[i] ? *slots_[i] : std::move(dflt); }
  bool bool_or(size_t i, bool dflt) const { return slots_[i] ? slots_[i]->truthy() : dflt; }

  int64_t int_or(size_t i, int64_t dflt) const {
    if (!slots_[i] || slots_[i]->is_none()) return dflt;
    const Value& v = *slots_[i];
    if (v.is_int() || v.is_bool()) return v.as_int();
    if (v.is_float()) return static_cast<int64_t>(v.to_double());
    fail_runtime(fmt::format("{}(): argument '{}' must be an integer, not '{}'", fn_, names_[i], v.type_name()));
  }

  // A string argument; None (or absent) gives nullopt.
  std::optional<std::string> str_opt(size_t i) const {
    if (!slots_[i] || slots_[i]->is_none()) return std::nullopt;
    if (!slots_[i]->is_string()) {
      fail_runtime(fmt::format("{}(): argument '{}' must be a string, not '{}'", fn_, names_[i], slots_[i]->type_name()));
    }
    return slots_[i]->as_string();
  }

  std::string str_req(size_t i) const {
    auto s = str_opt(i);
    if (!s) fail_runtime(fmt::format("{}() missing required argument '{}'", fn_, names_[i]));
    return *s;
  }

 private:
  std::string_view fn_;
  std::vector<std::string_view> names_;
  std::vector<const Value*> slots_;
};

}  // namespace hs::jinja
