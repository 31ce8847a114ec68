#include "vmm/report/lwp_trace.h"

#include <nlohmann/json.hpp>

namespace vmm {

std::string trace_line(uint32_t task, uint32_t vcpu, const pmu::lwp::StoredRecord& record) {
  const pmu::lwp::DecodedRecord d = pmu::lwp::decode_record(record.bytes);
  nlohmann::ordered_json j;
  j["task"] = task;
  j["vcpu"] = vcpu;
  j["address"] = record.address;
  j["missed"] = record.missed;
  j["event"] = d.event_id;
  j["core"] = d.core_id;
  j["flags"] = d.flags;
  j["data"] = d.data;
  j["rip"] = d.rip;
  j["addr"] = d.address;
  return j.dump();
}

}  // namespace vmm
