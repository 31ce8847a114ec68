# shellcheck shell=bash
# Shared by tools/kvm-host/run and tools/kvm-host/prepare (sourced, not executed).
# See README.md beside this file.

kh_say() { printf 'kvm-host: %s\n' "$*" >&2; }

# True when directory $1 exists and is writable, or could be created (nearest existing
# ancestor writable). access(W_OK) also says no on a read-only file system, as root too.
kh_creatable() {
  local d=$1
  while [[ ! -e $d ]]; do d=$(dirname -- "$d"); done
  [[ -d $d && -w $d ]]
}

# The cache root: ${PMUVM_CACHE:-/var/cache/pmuvm}/kvm-host when it already holds a built host
# or can be written, else ${XDG_CACHE_HOME:-$HOME/.cache}/pmuvm/kvm-host.
kh_cache_root() {
  local a=${PMUVM_CACHE:-/var/cache/pmuvm}/kvm-host
  if [[ -e $a/current/stamp ]] || kh_creatable "$a"; then
    printf '%s\n' "$a"
  else
    printf '%s\n' "${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/pmuvm/kvm-host"
  fi
}

# A cheap signature of the system's apt package lists: changes whenever `apt-get update`
# brings new lists, so the (slow, ~0.6 s per apt-cache call here) kernel resolution below can
# be remembered between runs.
kh_lists_signature() {
  local L=/var/lib/apt/lists/
  eval "$(apt-config shell L Dir::State::Lists/d 2>/dev/null)" || true
  stat -c '%n %Y %s' "$L"*_Packages* 2>/dev/null | sha256sum | cut -c1-16
}

# Resolves Debian's kernel by name: linux-image-amd64's candidate → the versioned
# linux-image-6.1.0-N-amd64 it depends on → that package's candidate version.
# Prints "PACKAGE VERSION"; fails when apt does not know the packages (no lists yet).
kh_resolve_kernel_uncached() {
  local cand dep pkg ver
  cand=$(LC_ALL=C apt-cache policy linux-image-amd64 2>/dev/null | awk '/^ *Candidate:/ {print $2}')
  [[ -n $cand && $cand != "(none)" ]] || return 1
  dep=$(LC_ALL=C apt-cache show "linux-image-amd64=$cand" 2>/dev/null |
        awk '/^Depends:/ {sub(/^Depends: */, ""); print; exit}')
  pkg=$(grep -oE 'linux-image-[0-9][^ ,|()]*-amd64' <<<"$dep" | head -n1) || return 1
  [[ -n $pkg ]] || return 1
  ver=$(sed -nE "s/.*${pkg//./\\.} \(= ([^)]*)\).*/\1/p" <<<"$dep")
  if [[ -z $ver ]]; then
    ver=$(LC_ALL=C apt-cache policy "$pkg" 2>/dev/null | awk '/^ *Candidate:/ {print $2}')
  fi
  [[ -n $ver && $ver != "(none)" ]] || return 1
  printf '%s %s\n' "$pkg" "$ver"
}

# Same, remembered in $1/resolved keyed by the package lists' signature.
kh_resolve_kernel() {
  local root=$1 sig line
  sig=$(kh_lists_signature)
  if [[ -r $root/resolved ]]; then
    read -r line <"$root/resolved" || true
    if [[ ${line%% *} == "$sig" ]]; then
      printf '%s\n' "${line#* }"
      return 0
    fi
  fi
  line=$(kh_resolve_kernel_uncached) || return 1
  { [[ -d $root && -w $root ]] && printf '%s %s\n' "$sig" "$line" >"$root/resolved.$$" &&
    mv -f "$root/resolved.$$" "$root/resolved"; } 2>/dev/null || true
  printf '%s\n' "$line"
}

# True when /dev/kvm here is a KVM host pmuvm can use: it opens read-write and the CPU offers
# hardware virtualization (svm or vmx in /proc/cpuinfo). A PVM host (kvm_pvm: KVM without
# hardware virtualization) opens /dev/kvm and runs simple guests, but Linux guests do not boot
# there and pmuvm's KVM stepper counts nothing (its user-mode breakpoints never fire), so it
# counts as no KVM host. Otherwise $kh_no_local_kvm says why, for one line on stderr.
kh_local_kvm_usable() {
  kh_no_local_kvm=
  # (-c first: bash's <> would create a missing /dev/kvm as a regular file)
  if [[ ! -c /dev/kvm ]] || ! (exec 9<>/dev/kvm) 2>/dev/null; then
    kh_no_local_kvm="no /dev/kvm here"
  elif ! grep -qwE 'svm|vmx' /proc/cpuinfo 2>/dev/null; then
    kh_no_local_kvm="/dev/kvm here has no hardware virtualization (no svm/vmx in /proc/cpuinfo"
    [[ -d /sys/module/kvm_pvm ]] && kh_no_local_kvm+="; it is PVM, kvm_pvm"
    kh_no_local_kvm+=")"
  fi
  [[ -z $kh_no_local_kvm ]]
}
