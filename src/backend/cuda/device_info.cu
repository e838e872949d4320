// backend/cuda/device_info.cu — CUDA device enumeration (see device_info.h).
#include <atomic>
#include <cuda_runtime.h>

#include "backend/cuda/device_info.h"
#include "backend/cuda/kernels.h"

namespace hs::cuda {

Result<std::vector<DeviceInfo>> list_devices() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess)
    return make_error(StatusCode::kNotFound, "cuda: no usable device: {}", cudaGetErrorString(err));
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    err = cudaGetDeviceProperties(&p, i);
    if (err != cudaSuccess)
      return make_error(StatusCode::kIoError, "cuda: device {}: {}", i, cudaGetErrorString(err));
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.multiprocessors = p.multiProcessorCount;
    d.total_bytes = p.totalGlobalMem;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess) d.pci_bus_id = bus;
    if (cudaSetDevice(i) == cudaSuccess) {
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d.free_bytes = free_b;
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string runtime_version_string() {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  return fmt::format("runtime {}.{}, driver {}.{}", rt / 1000, (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10);
}

int current_device_sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 132;
  if (dev < kMaxDevices) {
    const int c = cache[dev].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
  if (dev < kMaxDevices) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace hs::cuda
