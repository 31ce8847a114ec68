// A tiny binary archive for the in-flight state of models that snapshots and migrations carry
// beyond the architectural save areas (cache and branch-predictor contents, stepper bookkeeping,
// report counters). One member function lists a class's fields once and serves both directions:
//
//   template <class Archive> void archive(Archive& a) { a(field1_, field2_, map_); }
//
// StateWriter appends each field little-endian; StateReader reads them back in the same order.
// The form is pmuvm's own (not an architectural format): it is versioned as a whole by the
// snapshot that contains it, and its blobs are checksummed there, so the reader's checks are a
// second line of defence: every length is checked against the bytes left, a short or oversized
// blob throws StateFormatError (one line), and nothing is ever read out of bounds.
// Elements: every map entry and every element of a vector of other than integers is one element
// of the archive's budget (set_element_budget): the reader refuses a count over what is left of
// it *before* it allocates (a crafted 1 GiB blob would otherwise become gigabytes of map nodes
// before any model could check its limits), and the writer refuses to write what the reader
// would refuse (DESIGN §4.12: never a snapshot pmuvm cannot read back). Strings and vectors of
// integers are their bytes and count only against the blob's length.
//
// Supported: integers, bool, enums, std::string, std::array, std::vector, std::map,
// std::optional, and any class with an archive() member. Other trivially copyable structs (plain
// register blocks) go in with raw_bytes().
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <climits>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace pmu {

// Integers other than bool go in as their little-endian bytes; on a little-endian host a vector
// of them is one block copy (the element-wise path writes the same bytes).
static_assert(std::endian::native == std::endian::little);
template <typename T>
inline constexpr bool kBulk = std::is_integral_v<T> && !std::is_same_v<T, bool>;

struct StateFormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A trivially copyable value stored as its bytes (register blocks such as kvm_regs).
template <typename T>
struct RawBytes {
  static_assert(std::is_trivially_copyable_v<T>);
  T& value;
};
template <typename T>
RawBytes<T> raw_bytes(T& value) {
  return RawBytes<T>{value};
}

// The element budget of a type's archive: its kMaxArchivedElements when it declares one, else
// kDefaultElementBudget.
inline constexpr uint64_t kDefaultElementBudget = uint64_t{1} << 20;
template <typename T>
constexpr uint64_t element_budget_of() {
  if constexpr (requires { T::kMaxArchivedElements; })
    return T::kMaxArchivedElements;
  else
    return kDefaultElementBudget;
}

// Shared by writer and reader: what is left of the budget, and the one-line refusal.
class ElementBudget {
 public:
  void set(uint64_t n) { left_ = total_ = n; }
  void spend(uint64_t n) {
    if (n > left_)
      throw StateFormatError("more than " + std::to_string(total_) +
                             " elements (maps and lists) in one state blob");
    left_ -= n;
  }

 private:
  uint64_t left_ = UINT64_MAX, total_ = UINT64_MAX;
};

class StateWriter {
 public:
  static constexpr bool kLoading = false;
  void set_element_budget(uint64_t n) { budget_.set(n); }
  template <typename... T>
  void operator()(const T&... fields) {
    (put(fields), ...);
  }
  const std::vector<std::byte>& bytes() const { return out_; }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  void put_u64(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  template <typename T>
  void put(const T& v) {
    if constexpr (std::is_same_v<T, bool>) {
      put_u64(v ? 1 : 0, 1);
    } else if constexpr (std::is_enum_v<T>) {
      put(static_cast<std::underlying_type_t<T>>(v));
    } else if constexpr (std::is_integral_v<T>) {
      put_u64(static_cast<uint64_t>(v), sizeof(T));
    } else if constexpr (requires(T & t, StateWriter & w) { t.archive(w); }) {
      const_cast<T&>(v).archive(*this);  // archive() only reads its fields when writing
    } else {
      put_other(v);
    }
  }
  void put_other(const std::string& s) {
    put_u64(s.size(), 8);
    for (char c : s) out_.push_back(static_cast<std::byte>(c));
  }
  template <typename T, size_t N>
  void put_other(const std::array<T, N>& a) {
    for (const T& x : a) put(x);
  }
  template <typename T>
  void put_other(const std::vector<T>& v) {
    put_u64(v.size(), 8);
    if constexpr (kBulk<T>) {  // cache tags and stamps: megabytes, one copy
      const auto* p = reinterpret_cast<const std::byte*>(v.data());
      out_.insert(out_.end(), p, p + v.size() * sizeof(T));
    } else {
      budget_.spend(v.size());
      for (const T& x : v) put(x);
    }
  }
  template <typename K, typename V, typename C>
  void put_other(const std::map<K, V, C>& m) {
    budget_.spend(m.size());
    put_u64(m.size(), 8);
    for (const auto& [k, v] : m) put(k), put(v);
  }
  template <typename T>
  void put_other(const std::optional<T>& o) {
    put(o.has_value());
    if (o) put(*o);
  }
  template <typename T>
  void put_other(const RawBytes<T>& r) {
    const auto* p = reinterpret_cast<const std::byte*>(&r.value);
    out_.insert(out_.end(), p, p + sizeof(T));
  }

  std::vector<std::byte> out_;
  ElementBudget budget_;
};

class StateReader {
 public:
  // archive() members check what they loaded against what they may hold (indices within their
  // arrays, sizes as the profile gives them) under `if constexpr (Archive::kLoading)`: a crafted
  // blob with a recomputed checksum is refused there, before any field is used.
  static constexpr bool kLoading = true;
  explicit StateReader(std::span<const std::byte> in) : in_(in) {}
  void set_element_budget(uint64_t n) { budget_.set(n); }

  template <typename... T>
  void operator()(T&&... fields) {
    (get(fields), ...);
  }
  // Every byte must have been consumed: a longer blob is another layout, not this one.
  void expect_end() const {
    if (pos_ != in_.size())
      throw StateFormatError(std::to_string(in_.size() - pos_) + " unexpected bytes at the end");
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  uint64_t get_u64(int n) {
    need(n);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  void need(uint64_t n) const {
    if (n > in_.size() - pos_) throw StateFormatError("state blob is truncated");
  }
  // A container length: each element takes at least one byte, so more than the bytes left is
  // corruption (and must not become a huge allocation).
  size_t get_count() {
    const uint64_t n = get_u64(8);
    need(n);
    return static_cast<size_t>(n);
  }
  template <typename T>
  void get(T& v) {
    if constexpr (std::is_same_v<T, bool>) {
      const uint64_t b = get_u64(1);
      if (b > 1) throw StateFormatError("bad boolean in state blob");
      v = b == 1;
    } else if constexpr (std::is_enum_v<T>) {
      std::underlying_type_t<T> u{};
      get(u);
      v = static_cast<T>(u);
    } else if constexpr (std::is_integral_v<T>) {
      v = static_cast<T>(get_u64(sizeof(T)));
    } else if constexpr (requires(T & t, StateReader & r) { t.archive(r); }) {
      v.archive(*this);
    } else {
      get_other(v);
    }
  }
  void get_other(std::string& s) {
    const size_t n = get_count();
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
  }
  template <typename T, size_t N>
  void get_other(std::array<T, N>& a) {
    for (T& x : a) get(x);
  }
  template <typename T>
  void get_other(std::vector<T>& v) {
    const size_t n = get_count();
    v.clear();
    if constexpr (kBulk<T>) {
      if (n > remaining() / sizeof(T)) throw StateFormatError("state blob is truncated");
      v.resize(n);
      if (n != 0)  // an empty vector's data() may be null, which memcpy may not get
        std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));
      pos_ += n * sizeof(T);
    } else {
      budget_.spend(n);
      v.reserve(n);
      for (size_t i = 0; i < n; ++i) get(v.emplace_back());
    }
  }
  template <typename K, typename V, typename C>
  void get_other(std::map<K, V, C>& m) {
    const size_t n = get_count();
    budget_.spend(n);
    m.clear();
    for (size_t i = 0; i < n; ++i) {
      K k{};
      get(k);
      // The writer puts a map's keys in the map's order, each once; anything else is a state
      // pmuvm never writes (a repeated key would silently lose a value).
      if (!m.empty() && !m.key_comp()(std::prev(m.end())->first, k))
        throw StateFormatError("a map's keys are out of order or repeated");
      get(m.emplace_hint(m.end(), std::move(k), V{})->second);
    }
  }
  template <typename T>
  void get_other(std::optional<T>& o) {
    bool present = false;
    get(present);
    if (!present) {
      o.reset();
      return;
    }
    get(o.emplace());
  }
  template <typename T>
  void get_other(RawBytes<T>& r) {
    need(sizeof(T));
    std::memcpy(&r.value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  ElementBudget budget_;
};

}  // namespace pmu
