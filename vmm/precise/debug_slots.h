// The four hardware breakpoint slots, shared between the guest's own debugging and the KVM
// stepper (DESIGN §4.7: "the VMM merges the guest's debug state with its own"). While pmuvm
// debugs a vCPU (KVM_SET_GUEST_DEBUG with KVM_GUESTDBG_USE_HW_BP), KVM loads pmuvm's DR0-DR3 and
// DR7 into the hardware instead of the guest's, keeps the guest's values for the guest's own
// MOV DR (it intercepts them), and sends every #DB to the VMM. So the guest's enabled breakpoints
// are copied into the slots the guest gave them, pmuvm's execution breakpoints take the free
// slots, and a #DB's DR6 is split into pmuvm's part and the part that goes back to the guest.
// No KVM dependency: tested as plain values.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace vmm {

// The guest's own debug registers (KVM_GET_DEBUGREGS).
struct GuestDebugRegisters {
  std::array<uint64_t, 4> db{};
  uint64_t dr6 = 0xFFFF0FF0;
  uint64_t dr7 = 0x400;
  // The slots the guest enabled (DR7 L or G bit).
  uint8_t held_slots() const;
  bool operator==(const GuestDebugRegisters&) const = default;
};

// What KVM is asked for (KVM_SET_GUEST_DEBUG), computed in one place (StepController::desired)
// and applied only when it changes.
struct DebugConfig {
  bool intercept = false;    // KVM_GUESTDBG_ENABLE | USE_HW_BP: hardware slots below, #DB exits
  bool single_step = false;  // KVM_GUESTDBG_SINGLESTEP (KVM sets TF; only where nothing else works)
  bool block_irq = false;    // KVM_GUESTDBG_BLOCKIRQ
  std::array<uint64_t, 4> address{};
  uint64_t dr7 = 0;
  uint8_t ours = 0;  // slots holding pmuvm's execution breakpoints
  bool operator==(const DebugConfig&) const = default;
};

// DR6 bits of a #DB.
constexpr uint64_t kDr6SingleStep = 1u << 14;  // BS
constexpr uint64_t kDr6SlotBits = 0xF;         // B0-B3

// Puts the guest's enabled breakpoints into their slots and as many of `ours` (execution
// breakpoints, most important first) as fit into the others. Returns how many of `ours` fit.
size_t place_breakpoints(const GuestDebugRegisters& guest, std::span<const uint64_t> ours,
                         DebugConfig& config);

// The part of a #DB's `dr6` that belongs to the guest: its slots' hits, and BS when the guest's
// own TF made the trap.
uint64_t guest_dr6_bits(uint64_t dr6, const DebugConfig& applied, bool guest_single_step);

// The guest's DR6 after a #DB with `bits` is delivered to it (what hardware leaves there).
uint64_t delivered_dr6(uint64_t guest_dr6, uint64_t bits);

}  // namespace vmm
