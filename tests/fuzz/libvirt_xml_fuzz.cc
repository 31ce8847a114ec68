// libFuzzer target for libvirt's answer to virConnectBaselineCPU (`profiles --baseline`): the XML
// comes from another process, so parse_baseline_cpu_xml must read any bytes without reading past
// them or looping. Checked: every name it returns is a substring of the input.
// Seeds (corpus_libvirt_xml/): answers libvirt gives for the shipped profiles.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "vmm/cpu/libvirt_cpu_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  const vmm::BaselineCpuXml parsed = vmm::parse_baseline_cpu_xml(xml);
  if (!parsed.model.empty() && xml.find(parsed.model) == std::string_view::npos) std::abort();
  for (const std::string& name : parsed.required)
    if (xml.find(name) == std::string_view::npos) std::abort();
  return 0;
}
