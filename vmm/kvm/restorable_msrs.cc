#include "vmm/kvm/restorable_msrs.h"

#include <algorithm>
#include <unordered_set>

namespace vmm {

bool kvm_or_hyperv_pv_msr(uint32_t msr) {
  return msr == 0x11 || msr == 0x12 || (msr >> 8) == 0x4B564D || (msr >> 8) == 0x400000;
}

MsrSelection restorable_msrs(const std::vector<MsrValue>& saved,
                             const std::vector<uint32_t>& host_list) {
  const std::unordered_set<uint32_t> listed(host_list.begin(), host_list.end());
  std::unordered_set<uint32_t> taken;
  MsrSelection s;
  for (const MsrValue& m : saved) {
    if (listed.count(m.index) && !kvm_or_hyperv_pv_msr(m.index) && taken.insert(m.index).second)
      s.restore.push_back(m);
    else
      s.dropped.push_back(m.index);
  }
  return s;
}

}  // namespace vmm
