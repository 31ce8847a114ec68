// Which user instructions `--stepper emulate` may run in its embedded TCG and which go back to
// KVM (DESIGN §4.7, "Emulated counting"): the emulator runs only what computes in general
// registers and guest memory and transfers control near; everything that could fault
// differently, read the host (time, entropy, CPUID), enter the kernel, touch segments or state
// the emulator does not carry (x87/SSE/AVX for now), or race with other vCPUs is executed by
// KVM, so the guest sees real hardware there.
#pragma once

#include <cstdint>

#include "vmm/precise/instruction_decoder.h"

namespace vmm {

// Why an instruction goes back to KVM (for --stats to count by kind once the stepper is wired in).
enum class KvmOnly : uint8_t {
  kNo = 0,
  kKernelEntry,   // SYSCALL, INT n, INT3, a far transfer, IRET/SYSRET: the kernel runs next
  kNotComputing,  // anything beyond general registers and memory: CPUID, RDTSC, RDRAND, I/O,
                  // x87/SSE/AVX, segment loads, privileged instructions, LWP's
  kLocked,        // LOCK-prefixed (and XCHG with memory) while other vCPUs run
  kCount,         // (a boundary the models asked for, not an instruction's kind)
};
// Whether `insn` may be emulated; `multiple_vcpus`: other vCPUs may run beside this one.
KvmOnly kvm_only(const DecodedInstruction& insn, bool multiple_vcpus);

}  // namespace vmm
