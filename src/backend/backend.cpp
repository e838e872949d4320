// backend/backend.cpp — what every backend shares: Buffer, the default matmul_multi, the
// device names and the factory (backend.h).
#include "backend/backend.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu_backend.h"
#if HS_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace hs {

Result<Buffer> Backend::alloc_host(size_t bytes, std::string_view what) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) return make_error(StatusCode::kInternal, "out of host memory: {} bytes for {}", bytes, what);
  if (p) std::memset(p, 0, rounded);
  return Buffer(this, p, bytes, /*host=*/true);
}

void Backend::free_host_memory(void* ptr) { std::free(ptr); }

Result<std::vector<Tensor>> Backend::prepare_weight_group(std::span<const Tensor> hosts,
                                                          std::span<const std::string> names) {
  if (names.size() != hosts.size())
    return make_error(StatusCode::kInvalidArgument, "prepare_weight_group: {} weights, {} names", hosts.size(), names.size());
  std::vector<Tensor> out;
  for (size_t i = 0; i < hosts.size(); ++i) {
    HS_ASSIGN_OR_RETURN(Tensor t, prepare_weight(hosts[i], names[i]));
    out.push_back(t);
  }
  return out;
}

Status Backend::matmul_multi(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys) {
  if (ws.size() != ys.size()) return make_error(StatusCode::kInvalidArgument, "matmul_multi: {} weights, {} outputs", ws.size(), ys.size());
  for (size_t i = 0; i < ws.size(); ++i) HS_RETURN_IF_ERROR(matmul(ws[i], x, ys[i]));
  return Status::ok();
}

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kExact: return "exact";
    case MatmulPrecision::kInt8x2: return "int8x2";
    case MatmulPrecision::kInt8: return "int8";
  }
  return "?";
}

Result<MatmulPrecision> parse_matmul_precision(std::string_view name) {
  for (auto p : {MatmulPrecision::kExact, MatmulPrecision::kInt8x2, MatmulPrecision::kInt8})
    if (name == matmul_precision_name(p)) return p;
  return make_error(StatusCode::kInvalidArgument, "unknown matmul precision '{}' (exact, int8x2, int8)", name);
}

bool cuda_compiled() {
#if HS_WITH_CUDA
  return true;
#else
  return false;
#endif
}

Result<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") {
    if (!cuda_compiled())
      return make_error(StatusCode::kUnsupported, "--device cuda: this build has no CUDA backend (build the cuda preset: make cuda)");
    return Device::kCuda;
  }
  return make_error(StatusCode::kInvalidArgument, "unknown device '{}' (cpu, cuda)", name);
}

Result<std::unique_ptr<Backend>> make_backend(Device device, int index) {
  if (device == Device::kCpu) return std::unique_ptr<Backend>(std::make_unique<CpuBackend>());
#if HS_WITH_CUDA
  return cuda::make_cuda_backend(index);
#else
  (void)index;
  return make_error(StatusCode::kUnsupported, "this build has no CUDA backend (build the cuda preset: make cuda)");
#endif
}

}  // namespace hs
