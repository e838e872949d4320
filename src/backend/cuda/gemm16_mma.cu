// backend/cuda/gemm16_mma.cu — see gemm16_mma.h.
//
// Fragment mapping (mma.sync.m16n8k16, A row-major = weights, B col-major = x): lane (g, t) =
// (lane / 4, lane % 4) loads 16 bytes — 8 consecutive columns 8t..8t+7 of a 32-column step —
// of weight rows g, g + 8, g + 16, g + 24 of the CTA's 32 and of x row (token) g. A dot product
// does not care which physical column sits in which k slot as long as A and B agree, so the
// step's first mma takes columns 8t..8t+3 as the k slots {2t, 2t+1, 2t+8, 2t+9} of both operands
// and the second mma columns 8t+4..8t+7: no shuffles, no shared memory on the way in.
// Tokens g >= n_tok load zeros (their outputs are dropped).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/gemm16_mma.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pdl.cuh"

namespace hs::cuda {
namespace {

constexpr int kTileRows = 32;   // weight rows per CTA (two m16 tiles)
constexpr int kStepCols = 32;   // columns per step (two k16 mmas)
constexpr int kMaxWarps = 16;   // per CTA (512 threads, <= 128 registers each)
constexpr int kW = kMaxGemm16MmaWeights;

struct Args {
  const uint16_t* w[kW];
  int64_t w_stride[kW];  // elements
  int64_t rows[kW];
  float* y[kW];
  int64_t y_stride[kW];  // floats
  int tile_begin[kW + 1];  // weight i owns the CTAs [tile_begin[i], tile_begin[i + 1])
  const uint16_t* x;       // [n_tok][cols]
  int64_t cols;
  int n_tok;
};

template <typename T>
__device__ __forceinline__ T pick(const T (&a)[kW], int i) {
  static_assert(kW == 3, "pick() selects among 3");
  return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
}

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// v = *p when pred (16-byte streaming load: no L1 allocation, L2 evict-first); zeros otherwise.
__device__ __forceinline__ uint4 load_weights(const uint4* p, bool pred, uint64_t pol) {
  uint4 v = make_uint4(0, 0, 0, 0);
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
      "@p ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %6;\n\t}"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)), "l"(pol));
  return v;
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  mma_16816<BF16>(c, a0, a1, a2, a3, b0, b1);
}

// U: 16-byte loads per lane and row per step (a step is 32·U columns: lanes t = 0..3 of a
// group read 64·U contiguous bytes of each row); D: steps loaded ahead of the arithmetic.
template <bool BF16, int U, int D>
__global__ void __launch_bounds__(32 * kMaxWarps) gemm16_mma_kernel(const Args a) {
  __shared__ float part[kMaxWarps][kTileRows][kMaxGemm16MmaTokens];  // 16 KB: each warp's partial sums
  const int tile = static_cast<int>(blockIdx.x);
  const int wi = (tile >= a.tile_begin[1]) + (tile >= a.tile_begin[2]);
  const uint16_t* W = pick(a.w, wi);
  const int64_t stride = pick(a.w_stride, wi), n_rows = pick(a.rows, wi);
  const int first_tile = wi == 0 ? a.tile_begin[0] : wi == 1 ? a.tile_begin[1] : a.tile_begin[2];
  const int64_t row0 = static_cast<int64_t>(tile - first_tile) * kTileRows;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int n_warps = static_cast<int>(blockDim.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t steps = a.cols / (kStepCols * U);
  // This warp's steps: an even share of the columns, in order.
  const int64_t s0 = steps * warp / n_warps, s1 = steps * (warp + 1) / n_warps;
  const uint4* wr[4];  // rows g, g + 8, g + 16, g + 24 of the tile; 4·U uint4 per step, lane t's from + t·U
  bool ok[4];
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + g + 8 * i;
    ok[i] = r < n_rows;
    wr[i] = reinterpret_cast<const uint4*>(W + (ok[i] ? r : 0) * stride) + t * U;
  }
  // Under PDL the grid may run while the previous kernel finishes: pull the first steps' weights
  // into L2 now (they are never written by a kernel of the step), read x only after the wait.
  pdl_launch_dependents();
  for (int i = 0; i < 4; ++i)
    if (ok[i])
      for (int64_t s = s0; s < s0 + D && s < s1; ++s)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(wr[i] + s * 4 * U));
  pdl_wait();
  const bool xok = g < a.n_tok;
  const uint4* xr = reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(xok ? g : 0) * a.cols) + t * U;
  const uint64_t pol = evict_first_policy();
  float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  for (int64_t s = s0; s < s1; s += D) {
    uint4 wv[D][4][U], xv[D][U];
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const bool in = s + d < s1;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int u = 0; u < U; ++u) wv[d][i][u] = load_weights(wr[i] + (s + d) * 4 * U + u, in && ok[i], pol);
#pragma unroll
      for (int u = 0; u < U; ++u) xv[d][u] = in && xok ? __ldg(xr + (s + d) * 4 * U + u) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (s + d >= s1) break;
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const uint4& lo = wv[d][2 * m][u];      // row 16m + g
          const uint4& hi = wv[d][2 * m + 1][u];  // row 16m + g + 8
          mma16816<BF16>(c[m], lo.x, hi.x, lo.y, hi.y, xv[d][u].x, xv[d][u].y);
          mma16816<BF16>(c[m], lo.z, hi.z, lo.w, hi.w, xv[d][u].z, xv[d][u].w);
        }
    }
  }
  // c[m]: (row 16m + g, tokens 2t, 2t + 1), (row 16m + g + 8, tokens 2t, 2t + 1).
  for (int m = 0; m < 2; ++m) {
    part[warp][16 * m + g][2 * t] = c[m][0];
    part[warp][16 * m + g][2 * t + 1] = c[m][1];
    part[warp][16 * m + g + 8][2 * t] = c[m][2];
    part[warp][16 * m + g + 8][2 * t + 1] = c[m][3];
  }
  __syncthreads();
  float* y = pick(a.y, wi);
  const int64_t y_stride = pick(a.y_stride, wi);
  for (int i = static_cast<int>(threadIdx.x); i < kTileRows * kMaxGemm16MmaTokens; i += static_cast<int>(blockDim.x)) {
    const int tok = i / kTileRows, r = i % kTileRows;
    if (tok >= a.n_tok || row0 + r >= n_rows) continue;
    float sum = part[0][r][tok];
    for (int k = 1; k < n_warps; ++k) sum += part[k][r][tok];  // fixed order: deterministic
    y[tok * y_stride + row0 + r] = sum;
  }
}

int device_sms() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 0;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n <= 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

cudaError_t launch_one(void (*kernel)(Args), const Args& a, unsigned grid, unsigned block, bool pdl, cudaStream_t s) {
  return launch_kernel(kernel, dim3(grid), dim3(block), 0, pdl, s, a);
}

template <bool BF16>
cudaError_t launch_variant(const Args& a, unsigned grid, unsigned block, int variant, bool pdl, cudaStream_t s) {
  switch (variant) {
    case 0: return launch_one(gemm16_mma_kernel<BF16, 1, 4>, a, grid, block, pdl, s);
    case 1: return launch_one(gemm16_mma_kernel<BF16, 2, 2>, a, grid, block, pdl, s);
    case 2: return launch_one(gemm16_mma_kernel<BF16, 1, 2>, a, grid, block, pdl, s);
    case 3: return launch_one(gemm16_mma_kernel<BF16, 2, 3>, a, grid, block, pdl, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

const char* gemm16_mma_variant_name(int variant) {
  static const char* const names[kGemm16MmaVariants] = {"16B x 4 ahead", "32B x 2 ahead", "16B x 2 ahead",
                                                        "32B x 3 ahead"};
  return variant >= 0 && variant < kGemm16MmaVariants ? names[variant] : "?";
}

int64_t gemm16_mma_tiles(const int64_t* rows, int n_weights) {
  int64_t tiles = 0;
  for (int i = 0; i < n_weights; ++i) tiles += (rows[i] + kTileRows - 1) / kTileRows;
  return tiles;
}

cudaError_t launch_gemm16_mma(bool bf16, int n_weights, const uint16_t* const* w, const int64_t* rows, int64_t cols,
                              const int64_t* w_stride, const uint16_t* x16, int n_tok, const Rows* y, cudaStream_t s,
                              int warps, int variant, bool pdl) {
  if (n_weights < 1 || n_weights > kW || n_tok < 1 || n_tok > kMaxGemm16MmaTokens || cols <= 0 ||
      cols % kStepCols != 0 || warps < 0 || warps > kMaxWarps || reinterpret_cast<uintptr_t>(x16) % 16 != 0 ||
      variant < -1 || variant >= kGemm16MmaVariants)
    return cudaErrorInvalidValue;
  Args a = {};
  int64_t tiles = 0;
  for (int i = 0; i < n_weights; ++i) {
    if (rows[i] < 0 || w_stride[i] % 8 != 0 || w_stride[i] < cols || reinterpret_cast<uintptr_t>(w[i]) % 16 != 0 ||
        y[i].rows != n_tok || y[i].cols != rows[i])
      return cudaErrorInvalidValue;
    a.w[i] = w[i];
    a.w_stride[i] = w_stride[i];
    a.rows[i] = rows[i];
    a.y[i] = y[i].p;
    a.y_stride[i] = y[i].stride;
    a.tile_begin[i] = static_cast<int>(tiles);
    tiles += (rows[i] + kTileRows - 1) / kTileRows;
  }
  for (int i = n_weights; i <= kW; ++i) a.tile_begin[i] = static_cast<int>(tiles);
  if (tiles == 0) return cudaSuccess;
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;
  a.x = x16;
  a.cols = cols;
  a.n_tok = n_tok;
  if (variant < 0) variant = 0;
  if ((variant == 1 || variant == 3) && cols % (2 * kStepCols) != 0) variant = 0;  // 32-byte steps need 64-column rows
  const int64_t steps = cols / (kStepCols * ((variant == 1 || variant == 3) ? 2 : 1));
  if (warps == 0) {  // ~16 streaming warps per SM, each with at least 2 batches of 4 steps
    const int n_sm = device_sms();
    const int64_t want = 16LL * (n_sm > 0 ? n_sm : 132);
    warps = 1;
    while (warps < kMaxWarps && tiles * warps < want && steps / (2 * warps) >= 8) warps *= 2;
  }
  const unsigned grid = static_cast<unsigned>(tiles), block = 32 * static_cast<unsigned>(warps);
  return bf16 ? launch_variant<true>(a, grid, block, variant, pdl, s)
              : launch_variant<false>(a, grid, block, variant, pdl, s);
}

}  // namespace hs::cuda
