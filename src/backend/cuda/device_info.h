// backend/cuda/device_info.h — what CUDA devices this process can see.
//
// The first piece of the CUDA backend: enumerate devices (name, compute capability,
// memory, bus) so `hindsight devices` and later the runner can pick one. One cudaGet*
// call per device; called once at start-up.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace hs::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0, free_bytes = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;
};

Result<std::vector<DeviceInfo>> list_devices();
std::string runtime_version_string();

}  // namespace hs::cuda
