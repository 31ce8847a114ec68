#!/usr/bin/env bash
# Installs every Debian package pmuvm needs to build, test, fuzz and run. Idempotent: packages
# already present are skipped, so the README commands and CI can all call it.
set -euo pipefail

packages=(
  bazel-bootstrap          # the build (offline recipe: DESIGN.md §3)
  g++ clang libclang-rt-14-dev  # C++20 compiler; clang + sanitizer runtimes for the fuzzer
  clang-format-14                # the C++ layout check (tools/check_format.sh, .clang-format)
  libspdlog-dev libfmt-dev       # logging
  libgtest-dev libgmock-dev      # unit and end-to-end tests
  libbenchmark-dev               # bench/
  libzydis-dev                   # x86 decoding for the precise backend
  libunicorn-dev                 # QEMU TCG as a library: --stepper emulate (dlopen, vmm/emulate) and the reference CPU of block_exactness_fuzz
  libcli11-dev                   # command line
  nlohmann-json3-dev             # CPU profiles, reports, the API socket's bodies
  libhttp-parser-dev             # the API socket's HTTP/1.1 parsing (server and `pmuvm ctl`)
  libcpp-httplib-dev             # tests only: an independent HTTP client/server for the API tests
  libvirt-dev                    # CPU baseline cross-checks (pulls libvirt0: the test:///default
                                 # driver and /usr/share/libvirt/cpu_map; no daemon needed)
  zlib1g-dev                     # CRC-32 of the state container and migration frames
  libxxhash-dev xxhash           # XXH64 of a snapshot's files; xxhsum for bench/migration_bench
  libpfm4-dev                    # NetBurst event encodings (test oracle)
  libdw-dev binutils             # the report's function and file:line (elfutils' libdwfl,
                                 # dlopen'ed); binutils' nm/addr2line: its test oracle
  python3                        # test-result summary
  qemu-system-x86                # runs the bundled guest kernel under TCG in tests (no KVM needed);
                                 # also brings the libraries tools/kvm-host's QEMU 10 needs
  busybox-static xz-utils        # tools/kvm-host: nested KVM host's initramfs; its kernel image
  util-linux                     # tools/kvm-host: flock, setpriv
  linux-perf                     # Debian's perf, run inside the Linux guest (guest/linux:initramfs_perf)
  rr                             # Debian's rr, run inside the Linux guest (guest/linux:initramfs_perf)
  linux-source-6.1 quilt         # the Linux guest kernel (guest_kernel_patches/build.sh) ...
  make gcc flex bison bc libelf-dev libssl-dev cpio perl  # ... and what building it needs
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} packages present"
fi

# No usable /dev/kvm here (none, or one without hardware virtualization: tools/kvm-host/common.sh):
# build tools/kvm-host's nested KVM host now (QEMU 10, kernel, initramfs; cached outside the
# tree, a fast no-op when current), so tests do not pay for it.
# shellcheck source=kvm-host/common.sh
. "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/kvm-host/common.sh"
if ! kh_local_kvm_usable; then
  echo "setup: $kh_no_local_kvm; preparing tools/kvm-host's nested KVM host"
  "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/kvm-host/prepare"
fi
