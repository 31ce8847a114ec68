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

// Each ratio to print: a label and the benchmark names of its numerator and denominator.
using RatioPairs = std::vector<std::pair<std::string, std::pair<std::string, std::string>>>;

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration) ns_[r.benchmark_name()] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
  // Prints "label: numerator / denominator = X" for each pair; missing benchmarks are skipped.
  void print_ratios(const RatioPairs& pairs) const {
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

// A Google Benchmark bench's main: runs the benchmarks the command line selects, then prints
// each pair's ratio ("label", {numerator, denominator}).
inline int run_and_print_ratios(int argc, char** argv, const RatioPairs& pairs) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios(pairs);
  benchmark::Shutdown();
  return 0;
}

}  // namespace pmuvm_bench
