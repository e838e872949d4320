// core/status.h — error values for hindsight.
//
// No exceptions cross module boundaries: functions that can fail return `Status` or
// `Result<T>`. A Status carries a code and a human-readable message that names what went
// wrong (the field, the byte offset, the value). Cost: one small string on the error path,
// nothing on success.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace hs {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from a user (flags, JSON, parameters)
  kNotFound,         // file, key, tensor or model missing
  kCorrupt,          // malformed file contents (truncated, out of bounds, bad magic)
  kUnsupported,      // valid input we do not implement (tensor type, Jinja construct)
  kIoError,          // the OS refused (open, mmap, read)
  kInternal,         // a bug in hindsight
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status make_error(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).is_ok() && "Result built from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hs

// Propagate a non-ok Status from an expression returning Status.
#define HS_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::hs::Status hs_status_ = (expr);       \
    if (!hs_status_.is_ok()) return hs_status_; \
  } while (0)

#define HS_CONCAT_INNER_(a, b) a##b
#define HS_CONCAT_(a, b) HS_CONCAT_INNER_(a, b)
// Declare `lhs` from a Result<T> expression, or return its Status.
#define HS_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto HS_CONCAT_(hs_result_, __LINE__) = (expr);                        \
  if (!HS_CONCAT_(hs_result_, __LINE__).is_ok())                         \
    return HS_CONCAT_(hs_result_, __LINE__).status();                    \
  lhs = std::move(HS_CONCAT_(hs_result_, __LINE__)).value()
