// backend/cuda/mma.cuh — the one warp-level tensor-core instruction the kernels use:
// mma.sync.m16n8k16 with 16-bit inputs (f16 or bf16) and fp32 accumulation, c += A · B.
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4 g + t:
//   A 16 x 16 row-major: a0 = (row g, cols 2t, 2t+1), a1 = (row g+8, same), a2 = (row g,
//     cols 2t+8, 2t+9), a3 = (row g+8, same); two 16-bit values a register, low half first;
//   B 16 x 8 col-major: b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t+8, 2t+9, col g);
//   C 16 x 8 f32: c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, same).
// Cost: one tensor-core instruction a warp (4096 FMAs); needs sm_80+.
#pragma once

#include <cstdint>

namespace hs::cuda {

template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#endif
}

}  // namespace hs::cuda
