// ProgressPauses: the points where `run --pause-on-output` / `--pause-at-instructions` pause the
// VM fire exactly once, at the line or the count they name, whichever vCPU gets there.
#include "vmm/progress_pauses.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace vmm {
namespace {

TEST(ProgressPauses, NothingArmedNeverPauses) {
  ProgressPauses p;
  EXPECT_EQ(p.on_console_line("anything"), std::nullopt);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(p.on_counted_instruction(), std::nullopt);
  EXPECT_EQ(p.counted(), 1000u);
}

TEST(ProgressPauses, AConsoleLineContainingTheTextPausesOnce) {
  ProgressPauses p({"round 4"}, std::nullopt);
  EXPECT_EQ(p.on_console_line("round 3 done"), std::nullopt);
  EXPECT_EQ(p.on_console_line("netburst: round 4 done"),
            "the guest printed a line containing \"round 4\" (--pause-on-output)");
  EXPECT_EQ(p.on_console_line("netburst: round 4 done"), std::nullopt) << "each text once";
}

TEST(ProgressPauses, SeveralTextsFireInTheOrderTheGuestPrintsThem) {
  ProgressPauses p({"late", "early"}, std::nullopt);
  EXPECT_NE(p.on_console_line("early line"), std::nullopt);
  EXPECT_EQ(p.on_console_line("early line"), std::nullopt);
  EXPECT_NE(p.on_console_line("late line"), std::nullopt);
}

TEST(ProgressPauses, TheNthCountedInstructionPauses) {
  ProgressPauses p({}, 5);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(p.on_counted_instruction(), std::nullopt) << i;
  EXPECT_EQ(p.on_counted_instruction(), "5 instructions counted (--pause-at-instructions 5)");
  EXPECT_EQ(p.on_counted_instruction(), std::nullopt);
}

TEST(ProgressPauses, AResumedCountGoesOnFromTheSnapshot) {
  ProgressPauses p({}, 100);
  p.set_counted(98);
  EXPECT_EQ(p.on_counted_instruction(), std::nullopt);
  EXPECT_NE(p.on_counted_instruction(), std::nullopt);
  ProgressPauses past({}, 100);
  past.set_counted(500);  // already past the point: the next instruction pauses
  EXPECT_EQ(past.on_counted_instruction(),
            "501 instructions counted (--pause-at-instructions 100)");
}

TEST(ProgressPauses, OnlyOneVcpuThreadTakesThePoint) {
  ProgressPauses p({}, 20000);
  std::atomic<int> fired{0};
  std::vector<std::thread> vcpus;
  for (int t = 0; t < 4; ++t)
    vcpus.emplace_back([&] {
      for (int i = 0; i < 10000; ++i)
        if (p.on_counted_instruction()) ++fired;
    });
  for (std::thread& t : vcpus) t.join();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(p.counted(), 40000u);
}

}  // namespace
}  // namespace vmm
