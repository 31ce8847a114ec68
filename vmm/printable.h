// Strings from outside the process (a snapshot's manifest and section names, a profile, a
// migration peer's refusal) reach the terminal only escaped (DESIGN §4.12: "untrusted strings are
// printed escaped"): control characters, DEL and bytes that are not UTF-8 would otherwise move
// the cursor, clear the screen or change a terminal's settings, and a long one would flood it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vmm {

struct PrintableOptions {
  size_t max_bytes = 200;      // of the input; the rest is said as "... (N more bytes)"
  bool keep_newlines = false;  // multi-line text (a refusal's reasons): '\n' passes as it is
};

// `text` with every byte a terminal would act on written as an escape: \n, \r, \t, \\, \xNN
// (C0 controls, DEL, bytes of invalid UTF-8); well-formed UTF-8 passes as it is.
std::string printable(std::string_view text, PrintableOptions options = {});

// printable(text) in double quotes (a quote inside is \").
std::string in_quotes(std::string_view text, PrintableOptions options = {});

}  // namespace vmm
