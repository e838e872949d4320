// backend/cuda/pdl.cuh — programmatic dependent launch (Hopper): the two PTX instructions every
// kernel of a decode step uses. A kernel launched with cudaLaunchAttributeProgrammaticStream-
// Serialization may start while the previous kernel on its stream still runs, once every CTA of
// that kernel has called pdl_launch_dependents() (or exited); it must call pdl_wait() before it
// reads what the previous kernel wrote (or writes what it reads). Both are no-ops below sm_90
// and for kernels launched without the attribute. Cost: one instruction each.
// launch_kernel() is the one host-side launcher that sets the attribute.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>

namespace hs::cuda {

// kernel<<<grid, block, smem, s>>>(args...), as a programmatic dependent of the preceding work on
// `s` when pdl (a refused attribute is cleared and the launch retried without it), and with
// thread-block clusters of cluster_x CTAs along x when cluster_x > 1. Returns the launch call's
// result; like <<<>>>, its error is also left for cudaGetLastError().
template <typename... KArgs, typename... Args>
cudaError_t launch_ex_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, int cluster_x, bool pdl,
                              cudaStream_t s, const Args&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
  if (e != cudaSuccess && pdl) {
    (void)cudaGetLastError();
    cfg.numAttrs = n - 1;  // the PDL attribute is last
    e = cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
  }
  return e;
}

// launch_ex_cluster without clusters.
template <typename... KArgs, typename... Args>
cudaError_t launch_ex(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, bool pdl, cudaStream_t s,
                      const Args&... args) {
  return launch_ex_cluster(kernel, grid, block, smem, 1, pdl, s, args...);
}

// launch_ex reading the error back: the launch's error, else cudaGetLastError() (clearing a
// launch error as <<<>>> launchers do).
template <typename... KArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, bool pdl, cudaStream_t s,
                          const Args&... args) {
  const cudaError_t e = launch_ex(kernel, grid, block, smem, pdl, s, args...);
  const cudaError_t last = cudaGetLastError();
  return e != cudaSuccess ? e : last;
}

// Whether the decode step's small kernels (norms, RoPE, KV write, attention, GLU, adds, the
// 16-bit conversions; each calls pdl_wait() before touching memory) are launched as programmatic
// dependents, so their launch and scheduling overlap the kernel before them: HS_CUDA_PDL_ALL,
// default on; 0 launches them plainly (stream order).
inline bool pdl_chain() {
  static const bool on = [] {
    const char* e = std::getenv("HS_CUDA_PDL_ALL");
    return !(e && e[0] == '0');
  }();
  return on;
}

// kernel<<<grid, block, smem, s>>>(args...) for the decode step's small kernels: a programmatic
// dependent when pdl_chain(); like <<<>>>, the launch's error is left for the caller's
// cudaGetLastError().
template <typename... KArgs, typename... Args>
void launch_chain(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, const Args&... args) {
  (void)launch_ex(kernel, grid, block, smem, pdl_chain(), s, args...);
}

// Waits until the preceding grid on the stream has finished and its writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next grid on the stream (if launched as a programmatic dependent) be scheduled now.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace hs::cuda
