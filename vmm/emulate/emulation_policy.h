// Which user instructions `--stepper emulate` may run in its embedded TCG and which go back to
// KVM (DESIGN §4.7, "Emulated counting"): the emulator runs only what computes in general and
// XMM registers and guest memory and transfers control near; everything that could fault
// differently, read the host (time, entropy, CPUID), enter the kernel, touch segments or state
// the emulator does not carry (x87, MMX, MXCSR's flags, AVX), or race with other vCPUs is
// executed by KVM, so the guest sees real hardware there.
#pragma once

#include <cstdint>

#include "vmm/precise/instruction_decoder.h"

namespace vmm {

// Why an instruction goes back to KVM (for --stats to count by kind once the stepper is wired in).
enum class KvmOnly : uint8_t {
  kNo = 0,
  kKernelEntry,   // SYSCALL, INT n, INT3, a far transfer, IRET/SYSRET: the kernel runs next
  kNotComputing,  // anything beyond general and XMM registers and memory: CPUID, RDTSC, RDRAND,
                  // I/O, x87/MMX/AVX, SSE floating point, segment loads, privileged
                  // instructions, LWP's
  kLocked,        // LOCK-prefixed (and XCHG with memory) while other vCPUs run
  kCount,         // (a boundary the models asked for, not an instruction's kind)
};

// The SSE extensions a CPU has: the emulator runs no SIMD instruction the CPU under KVM would
// refuse with #UD.
class SimdSupport {
 public:
  constexpr SimdSupport() = default;
  static SimdSupport of_this_cpu();  // CPUID leaf 1
  static constexpr SimdSupport all() { return SimdSupport(0xFF); }
  bool has(SimdIsa isa) const { return (mask_ >> static_cast<unsigned>(isa)) & 1; }

 private:
  constexpr explicit SimdSupport(uint8_t mask) : mask_(mask) {}
  uint8_t mask_ = 0;
};

// Whether `insn` may be emulated; `multiple_vcpus`: other vCPUs may run beside this one; `simd`:
// the extensions of the CPU KVM runs the guest on.
KvmOnly kvm_only(const DecodedInstruction& insn, bool multiple_vcpus, SimdSupport simd);

}  // namespace vmm
