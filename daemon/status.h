// Errors as values for the daemon and the CLI: a Status carries a message a person can
// act on and the HTTP status the API answers with; Result<T> is a value or a Status.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace gslice {

class Status {
 public:
  Status() = default;  // ok

  static Status Ok() { return Status(); }
  static Status BadRequest(std::string m) { return Status(400, std::move(m)); }
  static Status Unauthorized(std::string m) { return Status(401, std::move(m)); }
  static Status Forbidden(std::string m) { return Status(403, std::move(m)); }
  static Status NotFound(std::string m) { return Status(404, std::move(m)); }
  static Status Conflict(std::string m) { return Status(409, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(503, std::move(m)); }
  static Status NotImplemented(std::string m) { return Status(501, std::move(m)); }
  static Status Internal(std::string m) { return Status(500, std::move(m)); }

  bool ok() const { return code_ == 0; }
  // HTTP status the API answers with (0 when ok).
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}
  int code_ = 0;
  std::string message_;
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace gslice
