// What the profile's tables (profile_schema.h) drive: reading a section's numbers and flags with
// FILE:LINE:COLUMN errors, writing them in file order, the baseline's minimum and the migration
// check's reasons. Custom rows are left to the section's code everywhere.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "vmm/cpu/profile_fields.h"
#include "vmm/cpu/profile_schema.h"

namespace vmm::profile_schema {

using WrittenJson = nlohmann::ordered_json;

struct NoCustom {
  void operator()(std::string_view /*key*/) const {}
};

// Calls number(row, member) or flag(row, member) for each row of the table, in order, and
// custom(key) for the custom ones.
template <class S, size_t N, class OnNumber, class OnFlag, class OnCustom = NoCustom>
void for_each_value(const Field<S> (&table)[N], OnNumber&& number, OnFlag&& flag,
                    OnCustom&& custom = NoCustom{}) {
  for (const Field<S>& row : table)
    std::visit(
        [&](auto member) {
          using M = decltype(member);
          if constexpr (std::is_same_v<M, bool S::*>)
            flag(row, member);
          else if constexpr (std::is_same_v<M, Custom>)
            custom(row.key);
          else
            number(row, member);
        },
        row.member);
}

// The table's keys in file order: the keys a section may have.
template <class S, size_t N>
std::vector<std::string_view> keys(const Field<S> (&table)[N]) {
  std::vector<std::string_view> out;
  for (const Field<S>& row : table) out.push_back(row.key);
  return out;
}

// Reads the numbers and flags of `obj` (the object at `path`) into `out`: a required key that is
// absent fails, an optional one keeps `out`'s value.
// custom(key) reads the custom rows at their place, so errors come in the table's order.
template <class S, size_t N, class OnCustom = NoCustom>
void read(const ProfileFields& r, const nlohmann::json& obj, std::string_view path,
          const Field<S> (&table)[N], S& out, OnCustom&& custom = NoCustom{}) {
  auto value = [&](const Field<S>& row) -> const nlohmann::json* {
    return row.required ? &r.required(obj, path, row.key) : ProfileFields::optional(obj, row.key);
  };
  for_each_value(
      table,
      [&](const Field<S>& row, auto member) {
        if (const nlohmann::json* v = value(row))
          out.*member = static_cast<std::remove_reference_t<decltype(out.*member)>>(
              r.unsigned_value(*v, ProfileFields::child(path, row.key), row.lo, row.hi,
                               row.style != Style::kDecimal));
      },
      [&](const Field<S>& row, bool S::*member) {
        if (const nlohmann::json* v = value(row))
          out.*member = r.boolean(*v, ProfileFields::child(path, row.key));
      },
      custom);
}

// An object holding every key of the table in order, each unset (discarded) until the writer
// gives it a value; drop_unset() then removes what stayed unset.
template <class S, size_t N>
WrittenJson skeleton(const Field<S> (&table)[N]) {
  WrittenJson out = WrittenJson::object();
  for (const Field<S>& row : table) out[std::string(row.key)] = WrittenJson::value_t::discarded;
  return out;
}

inline void drop_unset(WrittenJson& object) {
  for (auto it = object.begin(); it != object.end();)
    it = it->is_discarded() ? object.erase(it) : std::next(it);
}

// Sets the table's numbers and flags of `s` in `out` (a skeleton of the same table). Values read
// in hex are written as "0x…" strings, as in the shipped profiles.
template <class S, size_t N>
void write(WrittenJson& out, const Field<S> (&table)[N], const S& s) {
  static const S defaults{};
  for_each_value(
      table,
      [&](const Field<S>& row, auto member) {
        if (!row.written_when_default && s.*member == defaults.*member) return;
        const uint64_t v = s.*member;
        out[std::string(row.key)] =
            row.style == Style::kHex ? WrittenJson(ProfileFields::hex(v)) : WrittenJson(v);
      },
      [&](const Field<S>& row, bool S::*member) {
        if (!row.written_when_default && s.*member == defaults.*member) return;
        out[std::string(row.key)] = s.*member;
      });
}

// A baseline's values (proposal §5.1): with `acc` starting as the first member, each later member
// lowers the kMinimum numbers and clears the kMinimum flags it lacks.
template <class S, size_t N>
void take_minimum(const Field<S> (&table)[N], S& acc, const S& member) {
  for_each_value(
      table,
      [&](const Field<S>& row, auto m) {
        if (row.baseline == Baseline::kMinimum) acc.*m = std::min(acc.*m, member.*m);
      },
      [&](const Field<S>& row, bool S::*m) {
        if (row.baseline == Baseline::kMinimum) acc.*m = acc.*m && member.*m;
      });
}

// "counters 18, counter_bits 40, threads_per_core 1": the numbers and flags as `pmuvm profiles
// NAME` shows them, by their keys, hex where the profile writes hex.
template <class S, size_t N>
std::string describe(const Field<S> (&table)[N], const S& s) {
  std::string out;
  auto add = [&](std::string_view key, const std::string& value) {
    out += (out.empty() ? "" : ", ") + std::string(key) + " " + value;
  };
  for_each_value(
      table,
      [&](const Field<S>& row, auto m) {
        const uint64_t v = s.*m;
        add(row.key, row.style == Style::kHex ? ProfileFields::hex(v) : std::to_string(v));
      },
      [&](const Field<S>& row, bool S::*m) { add(row.key, s.*m ? "true" : "false"); });
  return out;
}

// Why a destination `has` cannot run a guest that `saw` this section, one reason per row, each
// prefixed with `label`: "NetBurst counters 8 < 18", "family 0x15 != 0xf", "LWP feature
// interrupt missing", "LWP branch_prediction true != false". custom(key) adds the custom rows'
// reasons at their place.
template <class S, size_t N, class OnCustom = NoCustom>
void refuse(std::vector<std::string>& out, std::string_view label, const Field<S> (&table)[N],
            const S& saw, const S& has, OnCustom&& custom = NoCustom{}) {
  const std::string prefix(label);
  for_each_value(
      table,
      [&](const Field<S>& row, auto m) {
        const uint64_t a = saw.*m, b = has.*m;
        auto show = [&](uint64_t v) {
          return row.style == Style::kDecimal ? std::to_string(v) : ProfileFields::hex(v);
        };
        if (row.destination == Destination::kAtLeast && b < a)
          out.push_back(prefix + std::string(row.key) + " " + show(b) + " < " + show(a));
        if (row.destination == Destination::kSame && b != a)
          out.push_back(prefix + std::string(row.key) + " " + show(a) + " != " + show(b));
      },
      [&](const Field<S>& row, bool S::*m) {
        const bool a = saw.*m, b = has.*m;
        if (row.destination == Destination::kAtLeast && a && !b)
          out.push_back(prefix + "feature " + std::string(row.key) + " missing");
        if (row.destination == Destination::kSame && a != b)
          out.push_back(prefix + std::string(row.key) + " " + (a ? "true" : "false") +
                        " != " + (b ? "true" : "false"));
      },
      custom);
}

}  // namespace vmm::profile_schema
