// backend/cuda/quant_decode.cuh — quantized weight words (quant_layout.h's device layout) to
// exact f16 pairs in tensor-core A-fragment order, shared by the tensor-core GEMV (gemv.cu) and
// the quantized GEMM (gemm_quant_mma.cu). A Q4 word is 4 bytes of a nibble block (low nibbles =
// elements 4t+i, high = 16+4t+i of lane t); a Q8 word pair holds elements 4t..4t+3 and
// 16+4t..16+4t+3. Cost: one LOP3 and one HADD2 / HFMA2 per 2 weights. Device code only (nvcc).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace hs::cuda {

__device__ __forceinline__ __half2 as_h2(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t h2_bits(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
// f16 constants (bits, both halves).
constexpr uint32_t kH2Magic = 0x64006400u;     // 1024
constexpr uint32_t kH2Neg1024 = 0xE400E400u;   // -1024
constexpr uint32_t kH2Neg1032 = 0xE408E408u;   // -(1024 + 8)
constexpr uint32_t kH2Neg64 = 0xD400D400u;     // -64
constexpr uint32_t kH2Neg72 = 0xD480D480u;     // -(64 + 8)
constexpr uint32_t kH2Neg1152 = 0xE480E480u;   // -(1024 + 128)
constexpr uint32_t kH2Sixteenth = 0x2C002C00u;  // 1/16

// (a & kMask) | c in one LOP3 (the mask an immediate, c a register).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "n"(kMask), "r"(c));
  return r;
}

// Q4 word (4 bytes of a nibble block: low nibbles = elements 4t+i, high = 16+4t+i) -> four
// exact f16 pairs (q - off): p[0] = (e[4t], e[4t+2]), p[1] = (e[4t+1], e[4t+3]),
// p[2] = (e[16+4t], e[16+4t+2]), p[3] = (e[16+4t+1], e[16+4t+3]).
template <bool kOff8>
__device__ __forceinline__ void decode_q4(uint32_t w, uint32_t (&p)[4]) {
  const __half2 sub_lo = as_h2(kOff8 ? kH2Neg1032 : kH2Neg1024);
  const __half2 sub_hi = as_h2(kOff8 ? kH2Neg72 : kH2Neg64);
  const __half2 sixteenth = as_h2(kH2Sixteenth);
  const uint32_t w8 = w >> 8;
  p[0] = h2_bits(__hadd2(as_h2(and_or<0x000F000Fu>(w, kH2Magic)), sub_lo));
  p[1] = h2_bits(__hadd2(as_h2(and_or<0x000F000Fu>(w8, kH2Magic)), sub_lo));
  // High nibbles in place: 1024 + 16 q, times 1/16 and minus 64 (+ 8): exact.
  p[2] = h2_bits(__hfma2(as_h2(and_or<0x00F000F0u>(w, kH2Magic)), sixteenth, sub_hi));
  p[3] = h2_bits(__hfma2(as_h2(and_or<0x00F000F0u>(w8, kH2Magic)), sixteenth, sub_hi));
}

// Q8 words (elements 4t..4t+3 and 16+4t..16+4t+3) -> four exact f16 pairs in decode_q4's order.
__device__ __forceinline__ void decode_q8(uint32_t w0, uint32_t w1, uint32_t (&p)[4]) {
  const __half2 sub = as_h2(kH2Neg1152);
  const uint32_t u0 = w0 ^ 0x80808080u, u1 = w1 ^ 0x80808080u;  // q + 128 as unsigned bytes
  p[0] = h2_bits(__hadd2(as_h2(__byte_perm(u0, 0x64646464u, 0x4240)), sub));
  p[1] = h2_bits(__hadd2(as_h2(__byte_perm(u0, 0x64646464u, 0x4341)), sub));
  p[2] = h2_bits(__hadd2(as_h2(__byte_perm(u1, 0x64646464u, 0x4240)), sub));
  p[3] = h2_bits(__hadd2(as_h2(__byte_perm(u1, 0x64646464u, 0x4341)), sub));
}

__device__ __forceinline__ float h_lo(uint32_t u) { return __half2float(__ushort_as_half(static_cast<unsigned short>(u))); }
__device__ __forceinline__ float h_hi(uint32_t u) { return __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16))); }

}  // namespace hs::cuda
