// `pmuvm run --lwp-trace FILE`: every record the VMM stored, one JSON object per line, for
// tools. Fields: task, vcpu, address (where the record was written), missed (buffer was full),
// and the decoded record: event, core, flags (bits 16:31), data, rip, target/data address.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "pmu/lwp/lwp_unit.h"

namespace vmm {

std::string trace_line(uint32_t task, uint32_t vcpu, const pmu::lwp::StoredRecord& record);

}  // namespace vmm
