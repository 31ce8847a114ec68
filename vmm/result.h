// The one way a function in vmm/ says that it failed without throwing: Result<T> holds a T or an
// Error, Status (Result<void>) holds nothing or an Error. An Error names its kind, which decides
// the process's exit status at its edge (DESIGN §4.6): kUsage for input that cannot work (status
// 2, UsageError), kVmm for a VMM or KVM failure (status 3, VmmError). Code that cannot go on
// turns one into its exception there with value_or_throw() / throw_if_error(). There is no
// conversion to bool: `if (result)` would read as "if it failed" to code that used to return an
// optional error, so every test says ok().
//
// (std::expected is C++23; this is the part of it pmuvm needs.)
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "vmm/vmm_error.h"

namespace vmm {

struct Error {
  enum class Kind : uint8_t { kUsage, kVmm };
  Kind kind = Kind::kUsage;
  std::string message;

  static Error usage(std::string message) { return {Kind::kUsage, std::move(message)}; }
  static Error vmm(std::string message) { return {Kind::kVmm, std::move(message)}; }
  // The same kind with context in front: "the snapshot's vm.kvm state: " + message.
  Error prefixed(const std::string& context) const { return {kind, context + message}; }
  [[noreturn]] void raise() const {
    if (kind == Kind::kUsage) throw UsageError(message);
    throw VmmError(message);
  }
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const { return std::get<1>(v_); }
  // The error's message, or null when it holds a value (for code that passes the text on).
  const std::string* error_message() const { return ok() ? nullptr : &std::get<1>(v_).message; }

  // The value, or the error as its exception (UsageError / VmmError).
  T value_or_throw() && {
    if (!ok()) error().raise();
    return std::get<0>(std::move(v_));
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT

  bool ok() const { return !failed_; }
  const Error& error() const { return error_; }
  const std::string* error_message() const { return failed_ ? &error_.message : nullptr; }
  // The same, with `context` in front of an error's message.
  Result prefixed(const std::string& context) const {
    if (!failed_) return {};
    return error_.prefixed(context);
  }
  void throw_if_error() const {
    if (failed_) error_.raise();
  }

 private:
  Error error_;
  bool failed_ = false;
};

using Status = Result<void>;

}  // namespace vmm
