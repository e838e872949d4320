// backend/cuda/pdl.cuh — programmatic dependent launch (Hopper): the two PTX instructions every
// kernel of a decode step uses. A kernel launched with cudaLaunchAttributeProgrammaticStream-
// Serialization may start while the previous kernel on its stream still runs, once every CTA of
// that kernel has called pdl_launch_dependents() (or exited); it must call pdl_wait() before it
// reads what the previous kernel wrote (or writes what it reads). Both are no-ops below sm_90
// and for kernels launched without the attribute. Cost: one instruction each.
#pragma once

namespace hs::cuda {

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
