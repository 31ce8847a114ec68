// What `--stepper emulate` can reach (issue 40): the same user-code loop run natively and by the
// emulator core (vmm/emulate/user_code_emulator.h: Unicorn over guest RAM behind page tables,
// counted exactly by its block hook), on the host outside any VM, same run. The loop is an
// xorshift generator, 11 instructions a pass (register-only; no memory operands):
//   bazel run -c opt //bench:emulator_bench
// The ratios say how much slower than native counted user code would run when emulated; the
// precise KVM stepper's figures are bench/stepper_bench's (nested host).
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "bench/ratio_reporter.h"
#include "vmm/emulate/user_code_emulator.h"

namespace {

constexpr uint64_t kPasses = 1'000'000;
constexpr uint64_t kInstructionsPerPass = 11;

// mov rcx, rdi; mov eax, 1; then per pass: three shift/xor steps, dec rcx; jnz. Ends with `last`
// (ret natively, syscall in the guest: where the emulator hands over to KVM).
std::vector<uint8_t> xorshift_loop(std::vector<uint8_t> last) {
  std::vector<uint8_t> code = {0x48, 0x89, 0xf9, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x48, 0x89, 0xc2,
                               0x48, 0xc1, 0xe2, 0x0d, 0x48, 0x31, 0xd0, 0x48, 0x89, 0xc2, 0x48,
                               0xc1, 0xea, 0x07, 0x48, 0x31, 0xd0, 0x48, 0x89, 0xc2, 0x48, 0xc1,
                               0xe2, 0x11, 0x48, 0x31, 0xd0, 0x48, 0xff, 0xc9, 0x75, 0xdd};
  code.insert(code.end(), last.begin(), last.end());
  return code;
}

void native(benchmark::State& state) {
  const std::vector<uint8_t> code = xorshift_loop({0xc3});
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::memcpy(page, code.data(), code.size());
  mprotect(page, 4096, PROT_READ | PROT_EXEC);
  auto run = reinterpret_cast<uint64_t (*)(uint64_t)>(page);
  for (auto _ : state) benchmark::DoNotOptimize(run(kPasses));
  state.counters["instructions/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kPasses * kInstructionsPerPass),
                         benchmark::Counter::kIsRate);
  munmap(page, 4096);
}

// Guest RAM with 4-level tables mapping the code page at 0x400000 for user mode.
struct Guest {
  vmm::GuestRam ram{16 << 20, vmm::GuestRam::Backing::kShareable};
  Guest() {
    ram.write_u64(0x1000, 0x2000 | 7);
    ram.write_u64(0x2000, 0x3000 | 7);
    ram.write_u64(0x3000 + 2 * 8, 0x4000 | 7);
    ram.write_u64(0x4000, 0x200000 | 5);  // present, user, read-only
    const std::vector<uint8_t> code = xorshift_loop({0x0f, 0x05});
    ram.write(0x200000, std::as_bytes(std::span(code)));
  }
};

void emulated(benchmark::State& state, bool flush_each_run) {
  Guest guest;
  vmm::UserCodeEmulator emulator(guest.ram);
  uint64_t retired = 0;
  for (auto _ : state) {
    if (flush_each_run) emulator.flush();  // as after every kernel entry
    vmm::GuestRegisters regs;
    regs.rip = 0x400000;
    regs.rdi = kPasses;
    regs.rflags = 0x202;
    const vmm::EmulationRun r = emulator.run(regs, 0x1000, true, UINT64_MAX);
    retired += r.retired;
    benchmark::DoNotOptimize(regs.rax);
  }
  if (retired != state.iterations() * (kPasses * kInstructionsPerPass + 2))
    state.SkipWithError("the emulator retired a different count than the loop has");
  state.counters["instructions/s"] =
      benchmark::Counter(static_cast<double>(retired), benchmark::Counter::kIsRate);
}

void emulated_warm(benchmark::State& state) { emulated(state, false); }
void emulated_flushed(benchmark::State& state) { emulated(state, true); }

BENCHMARK(native)->Unit(benchmark::kMillisecond);
BENCHMARK(emulated_warm)->Unit(benchmark::kMillisecond);
BENCHMARK(emulated_flushed)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return pmuvm_bench::run_and_print_ratios(
      argc, argv,
      {
          {"emulated (translated blocks kept) / native", {"emulated_warm", "native"}},
          {"emulated (TLB and blocks flushed each run) / native", {"emulated_flushed", "native"}},
      });
}
