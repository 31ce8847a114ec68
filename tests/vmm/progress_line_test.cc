// The terminal's progress line (vmm/progress_line.h): once a second, rewritten in place, taken
// off before other output, and nothing at all where its stream is not a terminal.
#include "vmm/progress_line.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace vmm {
namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  std::fseek(f, 0, SEEK_END);  // later output goes after it
  return out;
}

constexpr uint64_t kSecond = 1'000'000'000;

TEST(ProgressLineTest, OnceASecondInPlaceAndErasedBeforeOtherOutput) {
  std::FILE* f = std::tmpfile();
  ProgressLine line(f, /*force=*/true);
  line.update(5 * kSecond, {0, 0, 1000});                 // the run's start
  line.update(5 * kSecond + kSecond / 2, {10, 1, 2000});  // within the second: nothing
  EXPECT_EQ(contents(f), "");
  line.update(6 * kSecond, {1234567, 12, 1100});
  EXPECT_EQ(contents(f),
            "\rpmuvm: 1 s, 1 234 567 instructions counted, 12 LWP records, 100 exits/s\x1b[K");
  line.erase();
  line.erase();  // once only
  EXPECT_EQ(contents(f),
            "\rpmuvm: 1 s, 1 234 567 instructions counted, 12 LWP records, 100 exits/s\x1b[K"
            "\r\x1b[K");
  std::fclose(f);
}

TEST(ProgressLineTest, NothingWhereTheStreamIsNoTerminal) {
  std::FILE* f = std::tmpfile();
  ProgressLine line(f);
  EXPECT_FALSE(line.enabled());
  line.update(kSecond, {1, 1, 1});
  line.update(3 * kSecond, {2, 2, 2});
  line.erase();
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace vmm
