// Untrusted strings made safe for a terminal (vmm/printable.h; issue 38 item 4).
#include "vmm/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace vmm {
namespace {

TEST(Printable, PlainTextAndUtf8PassAsTheyAre) {
  EXPECT_EQ(printable("amd-lwp 1.0"), "amd-lwp 1.0");
  EXPECT_EQ(printable("Größe ≤ 5 🙂"), "Größe ≤ 5 🙂");
}

TEST(Printable, ControlCharactersAndInvalidUtf8AreEscaped) {
  EXPECT_EQ(printable("a\x1b[2Jb"), "a\\x1b[2Jb");  // ESC: clear the screen
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("\r\n\t\\\x7f"), "\\r\\n\\t\\\\\\x7f");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");           // an overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(printable("\xe2\x89"), "\\xe2\\x89");           // cut short
  EXPECT_EQ(printable("\x9b"
                      "31m"),
            "\\x9b31m");  // C1 CSI
}

TEST(Printable, NewlinesStayWhereMultiLineTextIsAsked) {
  EXPECT_EQ(printable("one\ntwo\x1b", {.keep_newlines = true}), "one\ntwo\\x1b");
}

TEST(Printable, LongTextIsCutAndSaysHowMuchWasLeftOut) {
  const std::string text(64 << 20, 'x');  // a peer's 64 MiB refusal
  const std::string shown = printable(text, {.max_bytes = 10});
  EXPECT_EQ(shown, "xxxxxxxxxx... (67108854 more bytes)");
}

TEST(Printable, QuotedEscapesQuotes) {
  EXPECT_EQ(in_quotes("say \"hi\"\x07"), "\"say \\\"hi\\\"\\x07\"");
  EXPECT_EQ(in_quotes("abcdef", {.max_bytes = 3}), "\"abc\"... (3 more bytes)");
}

}  // namespace
}  // namespace vmm
