// libFuzzer target for read_json_text (vmm/json/json_text.h), the reader under every JSON input
// from outside the process. nlohmann::json::parse is the oracle: a text we accept must be the
// document nlohmann reads; a text we refuse for its syntax nlohmann must refuse too; refusals for
// depth and duplicate keys must be of texts nlohmann accepts. Every key and element of an
// accepted document must be locatable, at the first byte of its token.
// Seeds (corpus_json_text/): the shipped profiles, manifests, API bodies, a few syntax errors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "vmm/json/json_text.h"

namespace {

constexpr vmm::JsonLimits kLimits{.max_bytes = 1 << 16, .max_depth = 12};

void check(bool ok) {
  if (!ok) std::abort();
}

// Locates the first few keys and elements below `v` (at `path`): each must be found inside the
// text at the first byte of a token: a key's opening quote or a value's first character. (Which
// one is not checked: a key spelt "x[0]" and the element x[0] have one path, the first wins.)
void locate_some(std::string_view text, const nlohmann::json& v, const std::string& path,
                 int& budget) {
  if (budget-- <= 0) return;
  const size_t at = vmm::locate_json_path(text, path);
  check(at < text.size());
  const char c = text[at];
  check(c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' ||
        c == 'f' || c == 'n');
  if (v.is_object())
    for (const auto& [key, child] : v.items())
      locate_some(text, child, vmm::json_child_path(path, key), budget);
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i)
      locate_some(text, v[i], vmm::json_element_path(path, i), budget);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ours = vmm::read_json_text(text, kLimits);
  const bool theirs_ok = nlohmann::json::accept(text);
  if (!ours.ok()) {
    // "LINE:COLUMN: what", at a place within the text (or just after it).
    const std::string& message = ours.error().message;
    const size_t colon = message.find(": ");
    check(colon != std::string::npos);
    const std::string what = message.substr(colon + 2);
    const bool limit = what.starts_with("JSON nests deeper") || what.starts_with("duplicate key") ||
                       what.starts_with("the JSON text is");
    check(limit || !theirs_ok);  // a syntax error of ours is one of nlohmann's
    return 0;
  }
  check(theirs_ok);
  const nlohmann::json& document = ours.value();
  check(document == nlohmann::json::parse(text));
  int budget = 8;  // each locate parses the text again: a few per input keeps the fuzzer fast
  if (!text.empty()) locate_some(text, document, "", budget);
  return 0;
}
