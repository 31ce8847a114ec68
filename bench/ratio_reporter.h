// Google Benchmark reporter that also remembers each benchmark's time per iteration, so a bench
// binary can print ratios of benchmarks measured side by side in the same run (bench/ policy:
// ratios in one run, never absolute wall-clock thresholds).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pmuvm_bench {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration) ns_[r.benchmark_name()] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
  // Prints "label: numerator / denominator = X" for each pair; missing benchmarks are skipped.
  void print_ratios(
      const std::vector<std::pair<std::string, std::pair<std::string, std::string>>>& pairs) const {
    std::printf("\nratios (same run):\n");
    for (const auto& [label, nd] : pairs) {
      auto n = ns_.find(nd.first), d = ns_.find(nd.second);
      if (n == ns_.end() || d == ns_.end() || d->second == 0) continue;
      std::printf("  %-58s %8.2fx  (%s / %s)\n", label.c_str(), n->second / d->second,
                  nd.first.c_str(), nd.second.c_str());
    }
  }

 private:
  std::map<std::string, double> ns_;
};

}  // namespace pmuvm_bench
