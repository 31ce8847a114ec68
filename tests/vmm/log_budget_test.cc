// vmm/log_budget.h: N occurrences are logged, the N-th says it is the last, the rest are counted.
#include "vmm/log_budget.h"

#include <gtest/gtest.h>

namespace {

using vmm::LogBudget;
using Verdict = vmm::LogBudget::Verdict;

TEST(LogBudget, LogsTheFirstLinesThenOnlyCounts) {
  LogBudget budget(3);
  EXPECT_EQ(budget.take(), Verdict::kLog);
  EXPECT_EQ(budget.take(), Verdict::kLog);
  EXPECT_EQ(budget.take(), Verdict::kLogLast);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(budget.take(), Verdict::kQuiet);
  EXPECT_EQ(budget.seen(), 1003u);
}

TEST(LogBudget, ABudgetOfOneLogsOnceAndSaysSo) {
  LogBudget budget(1);
  EXPECT_EQ(budget.take(), Verdict::kLogLast);
  EXPECT_EQ(budget.take(), Verdict::kQuiet);
}

}  // namespace
