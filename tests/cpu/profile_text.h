// Builds small profile texts for tests whose line numbers are obvious: the fixed header is
// lines 1-6, the caller's extra lines start at line 7 (each written with its trailing comma),
// and the cache section is the last line before "}".
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace vmm::testing {

inline std::string Lines(std::initializer_list<std::string_view> lines) {
  std::string s;
  for (std::string_view l : lines) {
    s += l;
    s += '\n';
  }
  return s;
}

inline constexpr int kFirstExtraLine = 7;

inline std::string ProfileWith(std::initializer_list<std::string_view> extra) {
  std::string s = Lines({
      "{",                                // 1
      "  \"name\": \"t\",",               // 2
      "  \"description\": \"test\",",     // 3
      "  \"vendor\": \"AuthenticAMD\",",  // 4
      "  \"family\": \"0x15\",",          // 5
      "  \"model\": 1,",                  // 6
  });
  for (std::string_view l : extra) {
    s += l;
    s += '\n';
  }
  s += Lines({
      "  \"cache\": {\"l1d\": {\"size_kib\": 16, \"ways\": 4, \"latency_cycles\": 4}, "
      "\"l2\": {\"size_kib\": 1024, \"ways\": 16, \"latency_cycles\": 20}, "
      "\"dram_latency_cycles\": 200}",
      "}",
  });
  return s;
}

}  // namespace vmm::testing
