// backend/cuda/hybrid.cu — the hybrid (Gated DeltaNet) and mixture-of-experts kernels behind
// hybrid_kernels.h: causal conv1d + SiLU with its rolling state, the gated delta rule, the
// small gates and norms around them, partial RoPE, the MoE router and the routed experts.
// Each launcher validates nothing (cuda_hybrid.cpp does), launches nothing for an empty shape
// and returns cudaGetLastError(). Every kernel is a programmatic dependent of the one before it
// (launch_chain, pdl.cuh; session 24): it lets the next kernel be scheduled at its start, then
// waits (pdl_wait) before its first memory access, since each reads what the previous one wrote
// from its first instruction. That hides each launch's gap behind the kernel before it: the
// decode step of a Gated-DeltaNet layer is ~10 small kernels.
// Cost: see hybrid_kernels.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/glu.cuh"
#include "backend/cuda/hybrid_kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_x.cuh"
#include "backend/cuda/rope.cuh"

namespace hs::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kDeltaThreads = 128;  // 4 warps x 8 columns x 4 lanes a column
constexpr int kDeltaCols = 32;      // columns of a head one CTA owns

__device__ __forceinline__ float silu_f(float z) { return __fmul_rn(z, sigmoid_f(z)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <bool kBf16>
__device__ __forceinline__ float w16(uint16_t u) {
  if constexpr (kBf16) return __uint_as_float(static_cast<uint32_t>(u) << 16);
  else return __half2float(__ushort_as_half(u));
}

unsigned blocks_for(int64_t items, int per_block) {
  return static_cast<unsigned>(std::min<int64_t>((items + per_block - 1) / per_block, int64_t{1} << 30));
}

// ---- conv1d -------------------------------------------------------------------------------

// grid (sequences, channel blocks); thread per channel: its K - 1 inputs of history in registers.
__global__ void conv1d_kernel(CRows x, const float* __restrict__ w, int K, float* state, int64_t state_cols, Rows out,
                              SeqTables t) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  const int64_t j = blockIdx.x;
  const int32_t b = t.indptr[j], e = t.indptr[j + 1];
  if (b >= e) return;
  const int64_t C = x.cols;
  float* st = state + static_cast<int64_t>(t.slot[j]) * state_cols;
  const bool fresh = t.fresh[j] != 0;
  for (int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    float win[kMaxConvKernel];
    float wc[kMaxConvKernel];
#pragma unroll
    for (int i = 0; i < kMaxConvKernel; ++i) {
      win[i] = (i < K - 1 && !fresh) ? st[i * C + c] : 0.0f;
      wc[i] = i < K ? w[c * K + i] : 0.0f;
    }
    for (int32_t r = b; r < e; ++r) {
      const int64_t row = t.rows[r];
      const float xin = x.p[row * x.stride + c];
      float o = 0.0f;  // the CPU's order: oldest input first, the current one last
#pragma unroll
      for (int i = 0; i < kMaxConvKernel - 1; ++i)
        if (i < K - 1) o = __fadd_rn(o, __fmul_rn(wc[i], win[i]));
      float wl = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxConvKernel; ++i)
        if (i == K - 1) wl = wc[i];
      o = __fadd_rn(o, __fmul_rn(wl, xin));
      out.p[row * out.stride + c] = silu_f(o);
#pragma unroll
      for (int i = 0; i < kMaxConvKernel - 1; ++i) {
        if (i + 1 < K - 1) win[i] = win[i + 1];
        else if (i == K - 2) win[i] = xin;
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxConvKernel - 1; ++i)
      if (i < K - 1) st[i * C + c] = win[i];
  }
}

// ---- the gated delta rule -------------------------------------------------------------------

// grid (sequences, v-heads, column blocks of kDeltaCols); 4 warps of 8 columns, 4 lanes per
// column (lane = 4 * column + r). Lane r holds rows r, r + 4, ... of its column of the head's
// state S [k_dim][v_dim] in registers (R of them), so S is read from and written to global
// memory once per step; the two dot products of a token (u = Sᵀk, o = Sᵀq) are 4-lane sums by
// shuffle. q / k of the token are staged in shared memory (double-buffered: the next token's
// are loaded while this one is computed, one barrier a token); v, g and beta of the next token
// are prefetched into registers. Rows past k_dim hold zeros in S, q and k. With the prologue
// (a.ssm_a set) the staging also sums each warp's squares of q and k (double, as l2_norm_kernel),
// every lane applies the head's 1 / sqrt(sum + eps) to the elements it reads, and the gates come
// from raw g / beta as delta_gates_kernel computes them: no separate norm or gate launches.
template <int R>
__global__ void __launch_bounds__(kDeltaThreads) delta_rule_kernel(CRows q, CRows k, CRows v, CRows g, CRows beta,
                                                                   float* state, int64_t state_cols, Rows out,
                                                                   DeltaArgs a, SeqTables t) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  __shared__ float qk[2][2][4 * R];               // [buffer][q, k][row]
  __shared__ double ssq[2][2][kDeltaThreads / 32];  // prologue: [buffer][q, k][warp] sums of squares
  const bool norm = a.ssm_a != nullptr;
  const int64_t j = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y);
  const int32_t b = t.indptr[j], e = t.indptr[j + 1];
  if (b >= e) return;
  const int dk = a.k_dim, dv = a.v_dim;
  const int lane = threadIdx.x & 31, r = lane & 3;
  const int c = static_cast<int>(blockIdx.z) * kDeltaCols + (threadIdx.x >> 5) * 8 + (lane >> 2);
  const bool col_ok = c < dv;
  const int kh = a.v_tiled ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  float* gs = state + static_cast<int64_t>(t.slot[j]) * state_cols + static_cast<int64_t>(h) * dk * dv;
  const bool fresh = t.fresh[j] != 0;
  float S[R];
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const int i = r + 4 * m;
    S[m] = (!fresh && col_ok && i < dk) ? gs[static_cast<int64_t>(i) * dv + c] : 0.0f;
  }
  for (int i = dk + static_cast<int>(threadIdx.x); i < 4 * R; i += kDeltaThreads)
    qk[0][0][i] = qk[0][1][i] = qk[1][0][i] = qk[1][1][i] = 0.0f;
  const int64_t qk_col = static_cast<int64_t>(kh) * dk, v_col = static_cast<int64_t>(h) * dv + c;
  auto stage = [&](int32_t rr, int buf) {  // every thread of the CTA calls it (warp sums)
    const int64_t row = t.rows[rr];
    double sq = 0, sk = 0;
    for (int i = threadIdx.x; i < dk; i += kDeltaThreads) {
      const float qv = q.p[row * q.stride + qk_col + i], kv = k.p[row * k.stride + qk_col + i];
      qk[buf][0][i] = qv;
      qk[buf][1][i] = kv;
      sq += static_cast<double>(qv) * qv;
      sk += static_cast<double>(kv) * kv;
    }
    if (norm) {
      sq = warp_sum(sq);
      sk = warp_sum(sk);
      if (lane == 0) {
        ssq[buf][0][threadIdx.x >> 5] = sq;
        ssq[buf][1][threadIdx.x >> 5] = sk;
      }
    }
  };
  auto fetch = [&](int32_t rr, float& ex, float& bt, float& vc) {
    const int64_t row = t.rows[rr];
    float gv = g.p[row * g.stride + h], bv = beta.p[row * beta.stride + h];
    if (norm) {  // delta_gates_kernel's math
      const float x = __fadd_rn(gv, a.dt_bias[h]);
      gv = __fmul_rn(a.ssm_a[h], x > 20.0f ? x : log1pf(expf(x)));
      bv = sigmoid_f(bv);
    }
    ex = expf(gv);
    bt = bv;
    vc = col_ok ? v.p[row * v.stride + v_col] : 0.0f;
  };
  // l2_norm_kernel's scale factors of the staged q / k (1 without the prologue).
  auto inv_norm = [&](int buf, int which) {
    if (!norm) return 1.0f;
    double ss = 0;
#pragma unroll
    for (int w = 0; w < kDeltaThreads / 32; ++w) ss += ssq[buf][which][w];
    return static_cast<float>(1.0 / sqrt(ss + a.l2_eps));
  };
  stage(b, 0);
  float ex, bt, vc;
  fetch(b, ex, bt, vc);
  __syncthreads();
  int buf = 0;
  for (int32_t rr = b; rr < e; ++rr) {
    const int64_t row = t.rows[rr];
    float nex = 0.0f, nbt = 0.0f, nvc = 0.0f;
    if (rr + 1 < e) {  // the other buffer was last read before the previous barrier
      stage(rr + 1, buf ^ 1);
      fetch(rr + 1, nex, nbt, nvc);
    }
    const float* qs = qk[buf][0];
    const float* ks = qk[buf][1];
    const float iq = inv_norm(buf, 0), ik = inv_norm(buf, 1);
    // q / k element i as l2_norm_kernel leaves it (x * inv, then q * q_scale).
    auto kn = [&](int i) { return norm ? __fmul_rn(ks[i], ik) : ks[i]; };
    auto qn = [&](int i) {
      if (!norm) return qs[i];
      const float y = __fmul_rn(qs[i], iq);
      return a.q_scale != 1.0f ? __fmul_rn(y, a.q_scale) : y;
    };
    float u = 0.0f;
#pragma unroll
    for (int m = 0; m < R; ++m) {
      S[m] *= ex;
      u = fmaf(kn(r + 4 * m), S[m], u);
    }
    u += __shfl_xor_sync(0xffffffffu, u, 1);
    u += __shfl_xor_sync(0xffffffffu, u, 2);
    const float d = bt * (vc - u);
    float o = 0.0f;
#pragma unroll
    for (int m = 0; m < R; ++m) {
      S[m] = fmaf(kn(r + 4 * m), d, S[m]);
      o = fmaf(qn(r + 4 * m), S[m], o);
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    if (r == 0 && col_ok) out.p[row * out.stride + v_col] = o;
    ex = nex;
    bt = nbt;
    vc = nvc;
    buf ^= 1;
    __syncthreads();
  }
  if (!col_ok) return;
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const int i = r + 4 * m;
    if (i < dk) gs[static_cast<int64_t>(i) * dv + c] = S[m];
  }
}

// ---- norms and gates ----------------------------------------------------------------------------

// One warp per (row, head).
__global__ void l2_norm_kernel(Rows x, int hd, float eps, float scale) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  const int64_t heads = x.cols / hd;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= x.rows * heads) return;
  float* p = x.p + (item / heads) * x.stride + (item % heads) * hd;
  double ss = 0;
  for (int i = lane; i < hd; i += 32) ss += static_cast<double>(p[i]) * p[i];
  ss = warp_sum(ss);
  const float inv = static_cast<float>(1.0 / sqrt(ss + eps));
  for (int i = lane; i < hd; i += 32) {
    float y = __fmul_rn(p[i], inv);
    if (scale != 1.0f) y = __fmul_rn(y, scale);
    p[i] = y;
  }
}

// One warp per (row, group). With outq (1-2 rows, groups of whole 32-column blocks, rows without
// record padding: launch_rms_norm_gated checks) the warp also writes its blocks' records for the
// quantized GEMV after it (quant_x.cuh), so that GEMV launches no quantize kernel.
__global__ void rms_norm_gated_kernel(CRows x, CRows z, const float* __restrict__ w, int group, float eps, Rows out,
                                      OutQ outq) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  const int64_t groups = x.cols / group;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= x.rows * groups) return;
  const int64_t r = item / groups, off = (item % groups) * group;
  const float* xp = x.p + r * x.stride + off;
  const float* zp = z.p + r * z.stride + off;
  float* op = out.p + r * out.stride + off;
  double ss = 0;
  for (int i = lane; i < group; i += 32) ss += static_cast<double>(xp[i]) * xp[i];
  ss = warp_sum(ss);
  const float inv = static_cast<float>(1.0 / sqrt(ss / group + eps));
  for (int i = lane; i < group; i += 32) {
    const float y = __fmul_rn(__fmul_rn(w[i], __fmul_rn(xp[i], inv)), silu_f(zp[i]));
    op[i] = y;
    if (outq.s)  // group % 32 == 0: every lane takes each trip, as store_block wants
      quant_x::store_block_kind(outq.kind, y, lane, (off + i - lane) / 32, static_cast<int>(r), static_cast<int>(x.rows),
                                outq.s);
  }
}

__global__ void sigmoid_mul_kernel(Rows x, CRows gate) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  for (int64_t r = blockIdx.y; r < x.rows; r += gridDim.y)
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < x.cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)
      x.p[r * x.stride + c] = __fmul_rn(x.p[r * x.stride + c], sigmoid_f(gate.p[r * gate.stride + c]));
}

__global__ void delta_gates_kernel(Rows a, Rows b, const float* __restrict__ ssm_a, const float* __restrict__ dt_bias) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y)
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < a.cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float x = __fadd_rn(a.p[r * a.stride + c], dt_bias[c]);
      const float sp = x > 20.0f ? x : log1pf(expf(x));  // torch softplus (threshold 20)
      a.p[r * a.stride + c] = __fmul_rn(ssm_a[c], sp);
      b.p[r * b.stride + c] = sigmoid_f(b.p[r * b.stride + c]);
    }
}

__global__ void add_sigmoid_gated_kernel(Rows x, CRows y, CRows gate) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  for (int64_t r = blockIdx.y; r < x.rows; r += gridDim.y) {
    const float sg = sigmoid_f(gate.p[r * gate.stride]);
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < x.cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)
      x.p[r * x.stride + c] = __fadd_rn(x.p[r * x.stride + c], __fmul_rn(sg, y.p[r * y.stride + c]));
  }
}

// One block per row; a thread per (head, pair) of the rotated dims.
__global__ void rope_partial_kernel(Rows x, int head_dim, int rot_dims, float theta, bool neox,
                                    const int32_t* __restrict__ positions) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  const int half = rot_dims / 2;
  const int64_t n_heads = x.cols / head_dim;
  for (int64_t r = blockIdx.x; r < x.rows; r += gridDim.x) {
    const int32_t pos = positions[r];
    float* row = x.p + r * x.stride;
    for (int64_t idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
      const int64_t h = idx / half;
      const int ii = static_cast<int>(idx % half);
      const RopeCs cs = rope_cs(pos, ii, rot_dims, theta);
      float* pa = row + h * head_dim + rope_off_a(ii, half, neox);
      float* pb = row + h * head_dim + rope_off_b(ii, half, neox);
      const float va = *pa, vb = *pb;
      *pa = rope_a(va, vb, cs);
      *pb = rope_b(va, vb, cs);
    }
  }
}

// ---- mixture of experts ----------------------------------------------------------------------

constexpr int kMaxMoeUsed = 32;

// A thread per row, in the CPU's order (sum of exp in expert order; selection by the divided
// probabilities, ties to the lower id).
__global__ void moe_route_kernel(CRows logits, int k, bool norm_topk, int32_t* ids, float* weights) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= logits.rows) return;
  const float* l = logits.p + r * logits.stride;
  const int E = static_cast<int>(logits.cols);
  float mx = l[0];
  for (int e = 1; e < E; ++e) mx = fmaxf(mx, l[e]);
  float sum = 0.0f;
  for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, expf(__fsub_rn(l[e], mx)));
  int32_t chosen[kMaxMoeUsed];
  float prob[kMaxMoeUsed];
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float bp = 0.0f;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || chosen[i] == e;
      if (taken) continue;
      const float p = __fdiv_rn(expf(__fsub_rn(l[e], mx)), sum);
      if (best < 0 || p > bp) best = e, bp = p;  // strictly greater: the lower id wins ties
    }
    chosen[j] = best;
    prob[j] = bp;
  }
  float total = 0.0f;
  for (int j = 0; j < k; ++j) total = __fadd_rn(total, prob[j]);
  for (int j = 0; j < k; ++j) {
    ids[r * k + j] = chosen[j];
    weights[r * k + j] = norm_topk ? __fdiv_rn(prob[j], total) : prob[j];
  }
}

// grid (routed rows, n_ff blocks of kWarps); a warp per n_ff row: both dots over n_embd.
template <bool kBf16>
__global__ void moe_gate_up_kernel(CRows x, ExpertWeights gw, ExpertWeights uw, const int32_t* __restrict__ ids,
                                   int n_used, int E, float* h) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  const int64_t r = blockIdx.x;
  const int lane = threadIdx.x % 32;
  const int64_t F = gw.rows_per_expert;
  const int64_t f = static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32;
  if (f >= F) return;
  const int e = ids[r];
  float* dst = h + r * F + f;
  if (e < 0 || e >= E) {
    if (lane == 0) *dst = 0.0f;
    return;
  }
  const float* xr = x.p + (r / n_used) * x.stride;
  const uint16_t* gr = gw.p + (static_cast<int64_t>(e) * F + f) * gw.stride;
  const uint16_t* ur = uw.p + (static_cast<int64_t>(e) * F + f) * uw.stride;
  float sg = 0.0f, su = 0.0f;
  for (int64_t c = lane; c < x.cols; c += 32) {
    const float xv = xr[c];
    sg += xv * w16<kBf16>(gr[c]);
    su += xv * w16<kBf16>(ur[c]);
  }
  sg = warp_sum(sg);
  su = warp_sum(su);
  if (lane == 0) *dst = __fmul_rn(silu_f(sg), su);
}

// grid (tokens, n_embd blocks of kWarps); a warp per output column: the weighted sum over the
// token's routed rows in slot order.
template <bool kBf16>
__global__ void moe_down_kernel(const float* __restrict__ h, int64_t F, ExpertWeights dw, const int32_t* __restrict__ ids,
                                const float* __restrict__ weights, int n_used, int E, Rows out) {
  pdl_launch_dependents();  // the next kernel may be scheduled; it waits for this one in pdl_wait
  pdl_wait();               // what the kernel before wrote
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x % 32;
  const int64_t H = dw.rows_per_expert;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32;
  if (c >= H) return;
  float acc = 0.0f;
  for (int j = 0; j < n_used; ++j) {
    const int64_t r = t * n_used + j;
    const int e = ids[r];
    if (e < 0 || e >= E) continue;
    const float* hr = h + r * F;
    const uint16_t* wr = dw.p + (static_cast<int64_t>(e) * H + c) * dw.stride;
    float d = 0.0f;
    for (int64_t i = lane; i < F; i += 32) d += hr[i] * w16<kBf16>(wr[i]);
    d = warp_sum(d);
    acc = __fadd_rn(acc, __fmul_rn(weights[r], d));
  }
  if (lane == 0) out.p[t * out.stride + c] = acc;
}

dim3 rows_grid(int64_t rows, int64_t cols) {
  return dim3(blocks_for(cols, kThreads), static_cast<unsigned>(std::min<int64_t>(rows, 65535)), 1);
}

}  // namespace

cudaError_t launch_conv1d_causal(CRows x, const float* w, int kernel, float* state, int64_t state_cols, Rows out,
                                 SeqTables t, cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0 || t.n_grid == 0) return cudaSuccess;
  if (kernel < 1 || kernel > kMaxConvKernel) return cudaErrorInvalidValue;
  const unsigned cblocks = std::min<unsigned>(blocks_for(x.cols, 128), 65535);
  launch_chain(conv1d_kernel, dim3(static_cast<unsigned>(t.n_grid), cblocks, 1), dim3(128), 0, s,
               x, w, kernel, state, state_cols, out, t);
  return cudaGetLastError();
}

template <int R>
void launch_delta_rule_rows(CRows q, CRows k, CRows v, CRows g, CRows beta, float* state, int64_t state_cols,
                            Rows out, DeltaArgs a, SeqTables t, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(t.n_grid), static_cast<unsigned>(a.n_v_heads),
                  static_cast<unsigned>((a.v_dim + kDeltaCols - 1) / kDeltaCols));
  launch_chain(delta_rule_kernel<R>, grid, dim3(kDeltaThreads), 0, s, q, k, v, g, beta, state, state_cols, out, a, t);
}

cudaError_t launch_gated_delta_rule(CRows q, CRows k, CRows v, CRows g, CRows beta, float* state, int64_t state_cols,
                                    Rows out, DeltaArgs a, SeqTables t, cudaStream_t s) {
  if (q.rows == 0 || t.n_grid == 0 || a.n_v_heads == 0) return cudaSuccess;
  if (a.k_dim < 1 || a.k_dim > kMaxDeltaKDim || a.v_dim < 1) return cudaErrorInvalidValue;
  if (a.k_dim <= 16) launch_delta_rule_rows<4>(q, k, v, g, beta, state, state_cols, out, a, t, s);
  else if (a.k_dim <= 32) launch_delta_rule_rows<8>(q, k, v, g, beta, state, state_cols, out, a, t, s);
  else if (a.k_dim <= 64) launch_delta_rule_rows<16>(q, k, v, g, beta, state, state_cols, out, a, t, s);
  else if (a.k_dim <= 128) launch_delta_rule_rows<32>(q, k, v, g, beta, state, state_cols, out, a, t, s);
  else launch_delta_rule_rows<64>(q, k, v, g, beta, state, state_cols, out, a, t, s);
  return cudaGetLastError();
}

cudaError_t launch_l2_norm(Rows x, int head_dim, float eps, float scale, cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0) return cudaSuccess;
  const int64_t items = x.rows * (x.cols / head_dim);
  launch_chain(l2_norm_kernel, blocks_for(items, kWarps), dim3(kThreads), 0, s, x, head_dim, eps, scale);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_gated(CRows x, CRows z, const float* w, int group, float eps, Rows out, cudaStream_t s,
                                  OutQ outq) {
  if (x.rows == 0 || x.cols == 0) return cudaSuccess;
  if (outq.s && (x.rows > 2 || group % 32 != 0 || outq.kind < quant_x::kQ40 || outq.kind > quant_x::kQ4K ||
                 quant_x::record_blocks(outq.kind, x.cols) * 32 != x.cols ||
                 (reinterpret_cast<uintptr_t>(outq.s) & 15) != 0))
    return cudaErrorInvalidValue;  // launches nothing: the caller runs it without records
  const int64_t items = x.rows * (x.cols / group);
  launch_chain(rms_norm_gated_kernel, blocks_for(items, kWarps), dim3(kThreads), 0, s, x, z, w, group, eps, out, outq);
  return cudaGetLastError();
}

cudaError_t launch_sigmoid_mul(Rows x, CRows gate, cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0) return cudaSuccess;
  launch_chain(sigmoid_mul_kernel, rows_grid(x.rows, x.cols), dim3(kThreads), 0, s, x, gate);
  return cudaGetLastError();
}

cudaError_t launch_delta_gates(Rows a, Rows b, const float* ssm_a, const float* dt_bias, cudaStream_t s) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  launch_chain(delta_gates_kernel, rows_grid(a.rows, a.cols), dim3(kThreads), 0, s, a, b, ssm_a, dt_bias);
  return cudaGetLastError();
}

cudaError_t launch_rope_partial(Rows x, int head_dim, int rot_dims, float theta, bool neox, const int32_t* positions,
                                cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0 || rot_dims < 2) return cudaSuccess;
  launch_chain(rope_partial_kernel, static_cast<unsigned>(std::min<int64_t>(x.rows, 65535 * 16)), dim3(128), 0, s, x,
               head_dim, rot_dims, theta, neox, positions);
  return cudaGetLastError();
}

cudaError_t launch_moe_route(CRows logits, int n_used, bool norm_topk, int32_t* ids, float* weights, cudaStream_t s) {
  if (logits.rows == 0) return cudaSuccess;
  if (n_used < 1 || n_used > kMaxMoeUsed || n_used > logits.cols) return cudaErrorInvalidValue;
  launch_chain(moe_route_kernel, blocks_for(logits.rows, 128), dim3(128), 0, s,
               logits, n_used, norm_topk, ids, weights);
  return cudaGetLastError();
}

cudaError_t launch_moe_gate_up(CRows x, ExpertWeights gate, ExpertWeights up, const int32_t* ids, int n_used,
                               int n_experts, float* h, cudaStream_t s) {
  const int64_t R = x.rows * n_used;
  if (R == 0 || gate.rows_per_expert == 0) return cudaSuccess;
  if (gate.bf16 != up.bf16 || gate.rows_per_expert != up.rows_per_expert) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(R), blocks_for(gate.rows_per_expert, kWarps), 1);
  if (grid.y > 65535) return cudaErrorInvalidValue;
  if (gate.bf16) launch_chain(moe_gate_up_kernel<true>, grid, dim3(kThreads), 0, s,
                              x, gate, up, ids, n_used, n_experts, h);
  else launch_chain(moe_gate_up_kernel<false>, grid, dim3(kThreads), 0, s, x, gate, up, ids, n_used, n_experts, h);
  return cudaGetLastError();
}

cudaError_t launch_moe_down(const float* h, int64_t n_ff, ExpertWeights down, const int32_t* ids, const float* weights,
                            int n_used, int n_experts, Rows out, cudaStream_t s) {
  if (out.rows == 0 || out.cols == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(out.rows), blocks_for(out.cols, kWarps), 1);
  if (grid.y > 65535) return cudaErrorInvalidValue;
  if (down.bf16) launch_chain(moe_down_kernel<true>, grid, dim3(kThreads), 0, s,
                              h, n_ff, down, ids, weights, n_used, n_experts, out);
  else launch_chain(moe_down_kernel<false>, grid, dim3(kThreads), 0, s,
                    h, n_ff, down, ids, weights, n_used, n_experts, out);
  return cudaGetLastError();
}

cudaError_t launch_add_sigmoid_gated(Rows x, CRows y, CRows gate, cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0) return cudaSuccess;
  launch_chain(add_sigmoid_gated_kernel, rows_grid(x.rows, x.cols), dim3(kThreads), 0, s, x, y, gate);
  return cudaGetLastError();
}

}  // namespace hs::cuda
