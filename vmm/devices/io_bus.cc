#include "vmm/devices/io_bus.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace vmm {

Status IoBus::insert(uint16_t first, uint32_t count, BusDevice& device) {
  const uint32_t end = uint32_t{first} + count;
  char range[48];
  std::snprintf(range, sizeof range, "ports %#x..%#x", first, end - 1);
  if (count == 0 || end > 0x10000) return Error::vmm(std::string("I/O bus: bad range of ") + range);
  auto at = std::lower_bound(ranges_.begin(), ranges_.end(), first,
                             [](const Range& r, uint32_t port) { return r.first < port; });
  if ((at != ranges_.end() && at->first < end) || (at != ranges_.begin() && (at - 1)->end > first))
    return Error::vmm(std::string("I/O bus: ") + range + " overlap a device's");
  ranges_.insert(at, Range{first, end, &device});
  return {};
}

BusDevice* IoBus::find(uint16_t port) const {
  auto after = std::upper_bound(ranges_.begin(), ranges_.end(), uint32_t{port},
                                [](uint32_t p, const Range& r) { return p < r.first; });
  if (after == ranges_.begin()) return nullptr;
  const Range& r = *(after - 1);
  return port < r.end ? r.device : nullptr;
}

RunEffect unanswered(bool write, std::span<uint8_t> data) {
  if (!write) std::memset(data.data(), 0xFF, data.size());
  return {};
}

RunEffect IoBus::access(uint16_t port, bool write, std::span<uint8_t> data) const {
  if (BusDevice* device = find(port)) return device->access(port, write, data);
  return unanswered(write, data);
}

}  // namespace vmm
