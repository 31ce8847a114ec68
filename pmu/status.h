// How pmu/ says it refuses something it was given (a configuration, a saved state): Status holds
// nothing or a one-line reason, Result<T> a T or a reason. pmu/ knows nothing of vmm/'s
// Result; vmm/ turns a reason into its own error where it has the context to word it. There is
// no conversion to bool (`if (status)` would read either way); every test says ok().
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace pmu {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status refused(std::string reason) {
    Status s;
    s.refused_ = true;
    s.reason_ = std::move(reason);
    return s;
  }
  bool ok() const { return !refused_; }
  const std::string& reason() const { return reason_; }  // "" when ok

 private:
  bool refused_ = false;
  std::string reason_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status refused) : v_(std::in_place_index<1>, refused.reason()) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const std::string& reason() const { return std::get<1>(v_); }

 private:
  std::variant<T, std::string> v_;
};

}  // namespace pmu
