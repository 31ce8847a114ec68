#!/usr/bin/env bash
# Installs every Debian package pmuvm needs to build, test, fuzz and run. Idempotent: packages
# already present are skipped, so the README commands and CI can all call it.
set -euo pipefail

packages=(
  bazel-bootstrap          # the build (offline recipe: DESIGN.md §3)
  g++ clang libclang-rt-14-dev  # C++20 compiler; clang + sanitizer runtimes for the fuzzer
  libspdlog-dev libfmt-dev       # logging
  libgtest-dev libgmock-dev      # unit and end-to-end tests
  libbenchmark-dev               # bench/
  libzydis-dev                   # x86 decoding for the precise backend
  libcli11-dev                   # command line
  nlohmann-json3-dev             # CPU profiles, reports
  libvirt-dev                    # CPU baseline cross-checks
  libpfm4-dev                    # NetBurst event encodings (test oracle)
  python3                        # test-result summary
  qemu-system-x86                # runs the bundled guest kernel under TCG in tests (no KVM needed)
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
