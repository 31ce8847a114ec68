// The core of `--stepper emulate` (DESIGN §4.7, "Emulated counting"; issue 40): a vCPU's CPL-3
// code run by an embedded TCG (Unicorn 2.0.1, QEMU's TCG as a library) over the guest's own RAM,
// counted exactly, stopping wherever KVM must take over.
//
// Addresses. Unicorn 2.0.1 uses a linear address as the physical one even with paging on, so
// the emulator maps each guest frame it needs at its *linear* address: Unicorn's regions are
// 4 MiB windows of linear addresses, each a host reservation where guest frames are mapped a
// second time from the guest RAM's memfd (zero-copy; GuestRam::Backing::kShareable), after
// pmuvm's walker found the page mapped for user mode — the emulator's TLB. Filling it sets the
// Accessed flags, a write the Dirty flag, as hardware does (walk_and_mark). Unicorn runs with
// paging on over shadow tables (shadow_page_tables.h) that say which of those pages it may
// touch and how: read-only until the first write (unless the guest's entry is dirty already),
// code never writable (W^X), data never fetched (a user page under CR4.SMEP: Unicorn keeps
// EFER.NXE clear). Each run starts by checking every mapping against the guest's tables at its
// CR3 (the kernel, KVM or another vCPU ran since): a page mapped elsewhere now, with fewer
// permissions, or whose A (or, writable, D) flag the kernel cleared is dropped, as a TLB flush
// would drop it; the next access walks again.
//
// Faults. Whatever the shadow tables refuse raises a #PF that Unicorn reports precisely: RIP at
// the faulting instruction, every register and flag as before it (a fetch's: the block's start,
// nothing of it ran). A page the guest allows is mapped and the instruction runs again; one it
// refuses (not present, supervisor, read-only for a write, XD for a fetch, outside RAM), a
// store into code, and any other exception end the run before the instruction: KVM executes
// it and the guest gets the real fault.
//
// Code. Unicorn keys translated blocks by address and never sees guest RAM change under it
// (nor does an unmap drop them): the bytes of each code page are kept, and a page whose bytes
// changed (written by KVM, another vCPU, a device) has its blocks removed, while still mapped,
// before it runs again. Unicorn 2.0.1 aborts the process translating FF /3 or /5 with a
// register operand: every place such an instruction could start becomes an exit of Unicorn's,
// where its translator stops, when its translator first fetches one (fetched).
//
// Counting. A block hook decodes each translated block with pmuvm's decoder: the instructions
// retired are the blocks entered (all of their instructions) less what a fault left unexecuted
// in the last one. Blocks run whole or not at all: the run stops before a block that holds an
// instruction emulation_policy.h sends to KVM, or that would pass the limit, and the KVM
// stepper steps through it. (Ending a translated block early needs its retranslation, and
// Unicorn 2.0.1 then drops every translated block: 0.1-3 s.)
#pragma once

#include <unicorn/unicorn.h>

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vmm/emulate/emulation_policy.h"
#include "vmm/emulate/shadow_page_tables.h"
#include "vmm/emulate/unicorn_library.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/precise/instruction_decoder.h"

namespace vmm {

struct EmulationRun {
  enum class End : uint8_t {
    kLimit,    // the next block would pass `limit` (at most `limit` retired)
    kKvmOnly,  // the next block holds an instruction KVM must execute (why: kvm_only)
    kFault,    // the next instruction touches memory the walk refused: KVM raises the fault
    kTimeout,  // the time slice ended (interrupts must not wait longer)
  };
  End end = End::kLimit;
  KvmOnly kvm_only = KvmOnly::kNo;
  uint64_t retired = 0;  // instructions retired in this run, all at CPL 3
  // Of them, branches and conditional branches (as the decoder classes them): what the PMU
  // models take as one unseen batch (pmu/unseen_retirements.h).
  uint64_t branches = 0;
  uint64_t conditional_branches = 0;
  // False only where the run could not be ended at an instruction boundary: Unicorn failing
  // otherwise than by a guest fault (the host refusing memory for a window), or code running
  // off the top of the canonical addresses without a branch. The caller cannot go on exactly
  // from there.
  bool position_known = true;
};

// The XMM registers of the vCPU the emulator runs, wherever they live (KVM's XSAVE area): read
// at a run's first SIMD block, written back when the run changed them.
class XmmRegisters {
 public:
  using File = std::array<std::array<uint8_t, 16>, 16>;  // XMM0-15, little-endian
  virtual ~XmmRegisters() = default;
  virtual File read() = 0;
  virtual void write(const File& xmm) = 0;
};

class UserCodeEmulator {
 public:
  // Throws VmmError when Unicorn cannot be loaded or opened.
  // `simd`: the SSE extensions of the CPU KVM runs the guest on (emulation_policy.h).
  explicit UserCodeEmulator(GuestRam& ram, bool multiple_vcpus = false,
                            SimdSupport simd = SimdSupport::of_this_cpu());
  ~UserCodeEmulator();
  UserCodeEmulator(const UserCodeEmulator&) = delete;
  UserCodeEmulator& operator=(const UserCodeEmulator&) = delete;

  // How much one run may retire: at most this many instructions, and of them branches and
  // conditional branches (a PMU model's next event may be the n-th branch).
  struct Limit {
    uint64_t instructions = UINT64_MAX;
    uint64_t branches = UINT64_MAX;
    uint64_t conditional_branches = UINT64_MAX;
  };

  // Runs the user code at regs.rip in the address space `cr3` (EFER.NXE: `nxe`) until the next
  // block would pass `limit`, the next instruction is KVM's, or `timeout_us` passed (0: no
  // timeout; checked between blocks). `regs` (general registers, RIP, RFLAGS, FS/GS base) are
  // updated to the state after the last retired instruction; `xmm` is read and written where
  // SIMD instructions ran (nullptr: the guest cannot run them now, CR0.TS/EM or no CR4.OSFXSR:
  // they are KVM's).
  EmulationRun run(GuestRegisters& regs, uint64_t cr3, bool nxe, const Limit& limit,
                   uint64_t timeout_us = 0, XmmRegisters* xmm = nullptr);
  EmulationRun run(GuestRegisters& regs, uint64_t cr3, bool nxe, uint64_t instructions,
                   uint64_t timeout_us = 0, XmmRegisters* xmm = nullptr) {
    return run(regs, cr3, nxe, Limit{.instructions = instructions}, timeout_us, xmm);
  }

  // Forgets every mapped page and translated block.
  void flush();

  size_t mapped_pages() const { return mapped_.size(); }

  // What the runs cost, for --stats: where a slow workload spends the emulator's time.
  struct Work {
    uint64_t runs = 0;
    uint64_t known_stops = 0;    // runs not started: they stop at once where one did (run())
    uint64_t pages_checked = 0;  // mappings revalidated at the runs' starts
    uint64_t pages_dropped = 0;  // of them, no longer valid (or code whose bytes changed)
    uint64_t pages_mapped = 0;   // page faults the emulator resolved by mapping
    uint64_t blocks_decoded = 0;
    uint64_t checking_ns = 0;  // revalidating
    uint64_t running_ns = 0;   // in Unicorn (translating, running, the hooks)
    // Runs that stopped before an instruction KVM must run, by its mnemonic (INVALID: one the
    // decoder refused), and before SIMD code the guest cannot run now or whose 16-byte accesses
    // are not aligned, within a page or known (Block::checks).
    std::map<ZydisMnemonic, uint64_t> kvm_only_by_mnemonic;
    uint64_t simd_unusable = 0;
    uint64_t simd_accesses_unfit = 0;
  };
  const Work& work() const { return work_; }

 private:
  struct Block {
    std::vector<uint64_t> starts;  // each instruction's address
    // Its last instruction is a branch (a block ends at one), and a conditional one.
    bool ends_in_branch = false;
    bool ends_in_conditional = false;
    // How that branch is undone when its target turns out non-canonical (hardware raises #GP
    // at the branch, which does not retire; Unicorn jumps there): what it added to RSP.
    bool branch_undoable = false;
    int64_t branch_rsp_adjustment = 0;
    int kvm_only_at = -1;  // index of the first instruction KVM must run
    KvmOnly why = KvmOnly::kNo;
    ZydisMnemonic kvm_only_mnemonic = ZYDIS_MNEMONIC_INVALID;  // its (--stats)
    bool simd = false;  // it has SIMD instructions (the run needs the XMM registers)
    // SIMD instructions with a 16-byte memory operand: Unicorn 2.0.1 checks no alignment and
    // does such an access as two 8-byte ones (a fault on the second leaves the first done). Their
    // addresses follow from the registers at the block's start (no instruction before them in
    // the block writes an address register otherwise than by a constant): the block runs only
    // where each is aligned if it must be, and within one page.
    struct AccessCheck {
      uint32_t offset = 0;                   // of the instruction in `bytes`
      std::array<int64_t, 16> adjustment{};  // what the block added to each GPR before it
    };
    std::vector<AccessCheck> checks;
    std::vector<uint8_t> bytes;  // the block's code (where it has checks)
  };

  static void on_block(uc_engine* uc, uint64_t address, uint32_t size, void* self);
  static bool on_unmapped(uc_engine* uc, uc_mem_type type, uint64_t address, int size,
                          int64_t value, void* self);
  static void on_interrupt(uc_engine* uc, uint32_t vector, void* self);

  const Block& block_at(uint64_t address, uint32_t size);
  void block_entered(uint64_t address, uint32_t size);
  // Block::checks hold at the block's start (Unicorn's registers now).
  bool accesses_fit(const Block& b, uint64_t address);
  // Unicorn's XMM registers.
  XmmRegisters::File read_xmm() const;
  void write_xmm(const XmmRegisters::File& xmm);
  // One run from `pc` (uc_emu_start, again after each fault that mapped more) and what ended it.
  EmulationRun one_run(uint64_t pc);
  // The CPU context of the constructor with `regs` in it (and the TLB flushed if it must be).
  void load_registers(const GuestRegisters& regs);
  // Unicorn's registers (those load_registers writes).
  GuestRegisters read_registers() const;
  // An exception of the instruction at Unicorn's RIP (precise: the state before it), or a #PF
  // of a block's fetch: the run ends there, or, where the page can be mapped for the access,
  // goes on from there (restart_).
  void exception(uint32_t vector);
  // The instructions of the last block from `rip` on did not retire.
  void undo_rest_of_block(uint64_t rip);
  // The window `page` lies in (created at first use), its host memory; nullptr where there can
  // be none (the shadow tables' own, beyond user addresses, the host refusing memory).
  std::byte* window(uint64_t page);
  // The guest frame `frame` at `page` in its window.
  bool alias(uint64_t page, uint64_t frame);
  bool map_page(uint64_t page, bool write, bool fetch);
  struct Mapping;
  void add_mapping(uint64_t page, const Mapping& m);
  // Whether a page of `frame` other than `except_page` is mapped with `prot` (UC_PROT_*).
  bool frame_is(uint64_t frame, uint32_t prot, uint64_t except_page) const;
  // `frame`'s pages other than `except_page` lose their write permission (it becomes code).
  void take_write_permission(uint64_t frame, uint64_t except_page);
  // The shadow tables give `page` what `prot` says (UC_PROT_*); when their pages run out, every
  // other page is unmapped first.
  bool shadow_set(uint64_t page, uint32_t prot);
  void unmap(uint64_t page);
  void flush_tlb();
  // Unmaps every page not mapped as code (kMaxMappedPages).
  void unmap_data_pages();
  // Drops the blocks translated from `page` (Unicorn's and block_at's), its code copy and the
  // stops remembered there; the page must still be mapped. (unmap drops its exits.)
  void forget_code(uint64_t page);
  // Keeps the mappings still valid in the tables at cr3_ (still_valid) and unmaps the others.
  void revalidate();
  bool still_valid(uint64_t page, const Mapping& m);
  // `page` is mapped as code with the bytes at `host`.
  void keep_code_copy(uint64_t page, const std::byte* host);
  // A code byte Unicorn's translator fetched (on_fetch): where it may be decoding an instruction
  // that would crash it, the places that instruction may start become exits (the header of the
  // .cc) and the translation is abandoned (false).
  bool fetched(uint64_t address, int size);
  static bool on_fetch(uc_engine* uc, uc_mem_type type, uint64_t address, int size, int64_t value,
                       void* self);
  // The byte at `address` as Unicorn sees it (its window's alias), if any.
  std::optional<uint8_t> code_byte(uint64_t address) const;
  // Unicorn told of all exits.
  void set_exits();
  void forget_exits(uint64_t page);

  const UnicornLibrary& lib_;
  GuestRam& ram_;
  const bool multiple_vcpus_;
  const SimdSupport simd_;
  uc_engine* uc_ = nullptr;
  uc_context* clean_ = nullptr;  // the CPU as the constructor set it up
  ShadowPageTables shadow_;
  bool tlb_stale_ = false;  // a shadow entry lost permissions since Unicorn's TLB was flushed
  // Unicorn's regions: 4 MiB windows of linear addresses, each a host reservation where guest
  // frames are mapped at their pages (alias), by window base.
  static constexpr uint64_t kWindowBytes = uint64_t{4} << 20;
  std::unordered_map<uint64_t, std::byte*> windows_;
  std::unordered_map<uint64_t, uint64_t> aliased_;  // page -> the frame its window maps there
  InstructionDecoder decoder_;
  std::map<std::pair<uint64_t, uint32_t>, Block> blocks_;
  struct Mapping {
    uint32_t prot = 0;   // UC_PROT_*
    uint64_t frame = 0;  // the guest frame it maps
  };
  std::unordered_map<uint64_t, Mapping> mapped_;                // by linear page
  std::unordered_multimap<uint64_t, uint64_t> pages_of_frame_;  // frame -> its mapped pages
  // The bytes each page mapped as code had when mapped, by linear page: its translated blocks
  // are current while they are.
  std::unordered_map<uint64_t, std::vector<std::byte>> code_copies_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> exits_by_page_;  // by the exit's page
  std::set<uint64_t> exits_;                                           // all of them

  // The run under way.
  uint64_t cr3_ = 0;
  bool nxe_ = false;
  Limit limit_;
  uint64_t deadline_ns_ = 0;      // steady clock; 0: none
  uint32_t blocks_to_clock_ = 0;  // blocks entered before the clock is read again
  uint64_t retired_ = 0;
  uint64_t branches_ = 0;
  uint64_t conditional_branches_ = 0;
  const Block* last_block_ = nullptr;     // entered last: a fault may leave part of it unexecuted
  std::optional<KvmOnly> stop_;           // the run stopped before a block (kCount: at the limit)
  bool faulted_ = false;                  // an exception ended the run (exception())
  bool restart_ = false;                  // ... or mapped more: the run goes on from RIP
  bool exit_reached_ = false;             // ... or the run reached an exit (fetched)
  std::optional<uint64_t> data_fetched_;  // a page mapped for data this run fetched from
  XmmRegisters* xmm_ = nullptr;
  std::optional<XmmRegisters::File> xmm_loaded_;  // as read from xmm_ (into Unicorn) this run
  // The run stopped before its first block, for an instruction of that block's.
  bool first_block_kvm_only_ = false;
  // Where runs stopped so, and why: a run from there (in that address space) returns at once.
  struct KnownStop {
    uint64_t cr3 = 0;
    KvmOnly why = KvmOnly::kNo;
  };
  std::map<uint64_t, KnownStop> stops_at_start_;
  Work work_;
};

}  // namespace vmm
