// backend/cuda/cuda_peaks.cpp — CudaBackend::measure_peaks: what this device reaches, timed in
// the run that reports against it (bench's roofline fractions).
//
// Memory: cudaMemcpyAsync of 2 GiB device to device, counted as 4 GiB moved (read + write), the
// convention of the peer's README ("HBM 4.28 TB/s measured copy rate"). Matmul: one cuBLAS
// GemmEx of 8192 x 8192 x 8192 bf16 with fp32 accumulation (2 * 8192^3 FLOP) on uniform random
// operands. Each is the best of
// 5 timed repetitions after a warm-up, timed with events on the backend's stream. Cost: ~0.5 s
// and 4.4 GiB of device memory, freed before returning (and the step buffers are untouched).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace hs::cuda {

Result<DevicePeaks> CudaBackend::measure_peaks() {
  HS_CUDA(cudaSetDevice(device_));
  constexpr size_t kCopyBytes = size_t{2} << 30;
  constexpr int kN = 8192, kReps = 5;
  Buffer a, b;  // [kCopyBytes] each; b reused as the GEMM's A, B (bf16 [kN][kN] each) and C (f32)
  HS_ASSIGN_OR_RETURN(a, alloc(kCopyBytes, "the copy-rate probe"));
  HS_ASSIGN_OR_RETURN(b, alloc(kCopyBytes, "the copy-rate probe"));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  HS_CUDA(cudaEventCreate(&e0));
  struct Events {
    cudaEvent_t* e[2];
    ~Events() {
      for (auto* p : e)
        if (*p) (void)cudaEventDestroy(*p);
    }
  } guard{{&e0, &e1}};
  HS_CUDA(cudaEventCreate(&e1));
  auto best_of = [&](auto&& body) -> Result<double> {  // seconds
    HS_RETURN_IF_ERROR(body());  // warm-up
    double best = 1e30;
    for (int r = 0; r < kReps; ++r) {
      HS_CUDA(cudaEventRecord(e0, stream_));
      HS_RETURN_IF_ERROR(body());
      HS_CUDA(cudaEventRecord(e1, stream_));
      HS_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      HS_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms / 1e3);
    }
    return best;
  };
  HS_ASSIGN_OR_RETURN(double copy_s, best_of([&]() -> Status {
    HS_CUDA(cudaMemcpyAsync(b.data(), a.data(), kCopyBytes, cudaMemcpyDeviceToDevice, stream_));
    return Status::ok();
  }));
  const size_t mat = size_t{kN} * kN * 2;  // one bf16 operand
  uint8_t* base = static_cast<uint8_t*>(b.data());
  void* A = base;
  void* B = base + mat;
  void* C = static_cast<uint8_t*>(a.data());  // f32 [kN][kN] = 256 MiB
  // Random operands, not zeros or a constant: tensor cores on such data draw less power and
  // clock higher than on real data (a constant 0x3F3F gave 875 TFLOP/s, random data ~790).
  HS_RETURN_IF_ERROR(launched(launch_fill_random_bf16(static_cast<uint16_t*>(A), 2 * int64_t{kN} * kN, 42, stream_),
                              "the matmul probe's operands"));
  const float one = 1.0f, zero = 0.0f;
  HS_ASSIGN_OR_RETURN(double gemm_s, best_of([&]() -> Status {
    HS_CUBLAS(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, kN, kN, kN, &one, A, CUDA_R_16BF, kN, B, CUDA_R_16BF, kN,
                           &zero, C, CUDA_R_32F, kN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return Status::ok();
  }));
  DevicePeaks p;
  p.memory_bytes_per_s = 2.0 * static_cast<double>(kCopyBytes) / copy_s;
  p.matmul_flops_per_s = 2.0 * kN * static_cast<double>(kN) * kN / gemm_s;
  p.how = fmt::format("device copy of 2 GiB (read + write) best of {}: {:.3f} ms; bf16 GEMM {}^3 (fp32 accumulate) best "
                      "of {}: {:.3f} ms", kReps, copy_s * 1e3, kN, kReps, gemm_s * 1e3);
  return p;
}

}  // namespace hs::cuda
