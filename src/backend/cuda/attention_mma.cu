// backend/cuda/attention_mma.cu — decode attention on the tensor cores for f16, int8 and fp8
// pages (launch_attention_mma, attention_decode.cuh; launch_attention picks it where
// attention_mma_takes the shape: by default 8-bit pages, head_dim 256 or more than 4 query heads
// a kv head, HS_CUDA_ATTN_MMA=1 / 0 everywhere / nowhere).
//
// Why: the CUDA-core kernel (attention.cu) spends ~224 instructions a key at head_dim 256 and 8
// query heads (G 5..8 run as 8), so at the Qwen3.5-27B shape it is issue-bound: f16 pages run at
// about the copy rate only because it is also the issue rate, and int8 pages, half the bytes,
// run slower than f16 (docs/benchmarks.md, session 26). Here one warp scores 16 keys for all G
// query heads of a kv head with mma.sync.m16n8k16 (fp32 accumulation): by count of the source,
// ~10 instructions a key for f16 and ~30 for 8-bit pages (their bytes widened to f16 in
// registers); the tensor-core work (q hi / lo and P hi / lo: 4 mma a 16-key tile and k16 step)
// stays far under the tensor pipe's rate. Measured: docs/benchmarks.md, session 27.
//
// Layout. A block (4 warps) owns one (token, kv head, run) as attention.cu's kernel does, each
// warp every 4th 16-key tile of the run, with its own ring of S stages in shared memory that it
// fills by cp.async (no block barrier in the key loop). With lane = 4 g + t:
//   S = Q · Kᵀ, M = query heads (rows g < G live, g + 8 zero), N = 8 keys (two n-tiles a tile),
//     K = head_dim in k16 steps. The k order inside a step is free as long as A and B agree:
//     lane t's 16-byte piece of a K row (8 f16 or 16 one-byte elements) feeds its 4 k-slots
//     (2t, 2t+1, 2t+8, 2t+9) of 2 or 4 steps directly, and q's A fragment is gathered in the
//     same order once per block. q is split into f16 hi + lo (q = hi + lo + O(2^-22 |q|)), two
//     mma each, so the scores keep ~fp32 accuracy (K is exact in f16 for every type taken).
//   Oᵀ += Vᵀ · Pᵀ, M = head_dim (16-row tiles), N = 8 query heads, K = the tile's 16 keys. The
//     C fragment of S (row g = head, cols 2t, 2t+1 = keys) is exactly Pᵀ's B fragment, so P
//     never leaves registers. Lane g owns the contiguous dims [g D/8, (g+1) D/8) of V: m-tile mt
//     rows g / g + 8 are dims g D/8 + 2 mt and + 1, so a V A-fragment register is two keys' f16
//     of one dim: one byte permute of two rows' words (f16), or a permute and a widening (8-bit).
//   Softmax per query head in log2 units with attention.cu's lagging reference max (the
//     accumulators rescaled only when a score passes it by kSlack: p <= 2^8). 8-bit pages carry
//     the V row scale dv in P, times a warp-uniform power of two (vscale) that keeps the tile's
//     largest dv in (2^-4, 1], so P stays out of f16's subnormals and far under its max; vscale
//     moves only when the scales leave that range (an exact rescale) and is divided out at the
//     end. P is split into f16 hi + lo as q is (two mma each).
// Precision: q and P carry ~22 bits, K and V are exact in f16, every sum is fp32: the CUDA-core
// kernel's results up to summation order (tests/ops: the same bounds, DecodeAttention's 1e-4
// of max |V| included).
// Cost: reads each K / V row once per kv head; shared memory (4 warps x S stages of 16 keys' K
// and V rows, +16 bytes a row, and q's fragments): 140 KB at head_dim 256 f16 (1 block an SM),
// 111 KB at 256 8-bit (2 blocks), 107 KB at 128 f16, 58 KB at 64 f16. A device whose blocks
// cannot have that much takes the CUDA-core kernel (launch_attention_mma: cudaErrorNotSupported).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cfloat>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/smem_limit.h"

namespace hs::cuda {

namespace {
int& forced_mma_mode() {  // set_attention_mma; -1: the environment's
  static int m = -1;
  return m;
}
}  // namespace

int attention_mma_mode() {
  static const int env = [] {
    const char* e = std::getenv("HS_CUDA_ATTN_MMA");
    return e && e[0] == '1' ? 1 : e && e[0] == '0' ? 0 : 2;
  }();
  const int forced = forced_mma_mode();
  return forced >= 0 ? forced : env;
}

void set_attention_mma(int mode) { forced_mma_mode() = mode < 0 ? -1 : mode > 2 ? 2 : mode; }

namespace attn {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 16;  // keys of a warp tile
constexpr int kMaxG = 8;   // query heads of a kv head: rows 0..7 of the m16 tile

// kCompact (HS_CUDA_ATTN_MMA_COMPACT=1, for measurement): 2 ring stages and unpadded rows, so
// 8-bit pages at head_dim 256 fit 3 blocks an SM instead of 2 (12 warps), at the cost of 2-way
// bank conflicts on the K rows.
template <KvElem kElem, int D, bool kCompact = false>
struct MmaTiling {
  static constexpr bool k8 = kElem != KvElem::kF16;  // one byte an element, f16 (K, V) scales a row
  static constexpr int EB = k8 ? 1 : 2;
  static constexpr int kRowBytes = D * EB;      // one K or V row of a page
  static constexpr int kPitch = kCompact ? kRowBytes : kRowBytes + 16;  // a row in shared memory
  static constexpr int kChunks = kRowBytes / 16;  // 16-byte pieces of a row
  static constexpr int kStageBytes = 2 * kTile * kPitch + kTile * 4;  // K rows, V rows, (K, V) scales
  static constexpr int S = !kCompact && kWarps * 3 * kStageBytes <= 113 * 1024 ? 3 : 2;  // ring stages a warp
  static constexpr int kRingBytes = kWarps * S * kStageBytes;
  static constexpr int kEpiBytes = kWarps * kMaxG * (D + 2) * 4;
  static constexpr int kQBytes = (D / 16) * 32 * 16;  // q's A fragments [k16 step][lane][hi0 hi1 lo0 lo1]
  static constexpr int kQOffset = kRingBytes > kEpiBytes ? kRingBytes : kEpiBytes;
  static constexpr int kSmemBytes = kQOffset + kQBytes;
  static constexpr int CD = 16 / EB;  // elements of a lane's 16-byte piece of a K row
  static constexpr int KS = CD / 4;   // k16 steps one piece feeds (4 k-slots a lane a step)
  static constexpr int BD = 4 * CD;   // elements of the 4 lanes t of a key: one block
  static constexpr int NKS = D / 16;  // k16 steps of S
  static constexpr int NMT = D / 16;  // m16 tiles of Oᵀ
  static constexpr int VD = D / 8;    // dims of V lane g owns
  static constexpr int VB = VD * EB;  // their bytes in a V row
  static_assert(D % BD == 0 && kRowBytes % 16 == 0 && (VB % 16 == 0 || VB == 8), "tiling");
  // The row element that k-slot j (0..3: 2t, 2t+1, 2t+8, 2t+9) of k16 step s stands for, lane t.
  static __device__ __forceinline__ int k_elem(int s, int t, int j) { return (s / KS) * BD + t * CD + 4 * (s % KS) + j; }
};

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two one-byte elements (the low and high 16 bits' bytes of w16: byte 0 -> the low half) -> an
// f16 pair, exactly. int8: the byte q + 128 as the low mantissa byte of 1024 + (q + 128), minus
// 1152; fp8 e4m3: cvt.rn.f16x2.e4m3x2.
template <KvElem kElem>
__device__ __forceinline__ uint32_t widen2(uint32_t w, bool high_pair) {
  if constexpr (kElem == KvElem::kInt8) {
    const uint32_t u = w ^ 0x80808080u;
    const uint32_t m = __byte_perm(u, 0x64646464u, high_pair ? 0x4342u : 0x4140u);
    const __half2 r = __hsub2(*reinterpret_cast<const __half2*>(&m), __half2(__half(1152.0f), __half(1152.0f)));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2_raw r =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(high_pair ? w >> 16 : w & 0xffffu), __NV_E4M3);
    return static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16);
  }
}


// grid (n tokens, n_kv heads, n_splits), kThreads threads, MmaTiling::kSmemBytes of dynamic
// shared memory.
template <KvElem kElem, int D, bool kCompact>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_kernel(KernelArgs a) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (q, the KV write)
  using C = MmaTiling<kElem, D, kCompact>;
  constexpr bool k8 = C::k8;
  constexpr int S = C::S;
  constexpr unsigned kAll = 0xffffffffu;
  extern __shared__ __align__(16) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t i = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int G = a.group;

  const RowKeys rk = row_keys(a, i, kvh);
  const int32_t begin = rk.first + split * a.split_len;
  const int32_t end = min(rk.pos + 1, begin + a.split_len);  // may be <= begin: empty run
  const uint32_t n_run = begin < end ? static_cast<uint32_t>(end - begin) : 0u;
  auto in_run = [&](int32_t j) { return static_cast<uint32_t>(j - begin) < n_run; };

  // q's A fragments (rows g: head g of this kv head; rows g + 8 are zero), prescaled by
  // scale * log2(e) * 2^-e so max |q| is in [2^13, 2^14): f16's range, and hi + lo keep ~22 bits
  // of every element above max |q| 2^-22 (qexp = 2^e restores head g's scores); the
  // same for every warp: warp 0 stores them in shared memory (they would take 4 D / 16
  // registers), every warp keeps qexp.
  uint4* qf = reinterpret_cast<uint4*>(smem + C::kQOffset);  // [k16 step][lane]
  float qexp = 1.0f;
  {
    const bool live = g < G;
    const float* qr = a.q.p + i * a.q.stride + static_cast<int64_t>(kvh * G + (live ? g : 0)) * D;
    float amax = 0.0f;
#pragma unroll 4
    for (int s = 0; s < C::NKS; ++s)
#pragma unroll
      for (int j = 0; j < 4; ++j) amax = fmaxf(amax, live ? fabsf(qr[C::k_elem(s, t, j)]) : 0.0f);
    amax = fmaxf(amax, __shfl_xor_sync(kAll, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(kAll, amax, 2));
    const float qs = a.scale * kLog2e;
    int e = 0;
    const float big = amax * fabsf(qs);
    if (big > 0.0f && big <= FLT_MAX) {  // big = f 2^E, f in [0.5, 1): big 2^-(E-14) in [2^13, 2^14)
      (void)frexpf(big, &e);
      e -= 14;
    }
    const float pre = ldexpf(qs, -e);
    qexp = ldexpf(1.0f, e);
    if (warp == 0) {
#pragma unroll 4
      for (int s = 0; s < C::NKS; ++s) {
        float hi[4], lo[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float x = live ? qr[C::k_elem(s, t, j)] * pre : 0.0f;
          hi[j] = __half2float(__float2half_rn(x));
          lo[j] = x - hi[j];
        }
        qf[s * 32 + lane] = make_uint4(pack_h2(hi[0], hi[1]), pack_h2(hi[2], hi[3]), pack_h2(lo[0], lo[1]),
                                       pack_h2(lo[2], lo[3]));
      }
    }
  }
  __syncthreads();  // qf

  // Where the keys are (as attention.cu's kernel): key j's K row at row0 + page * page_bytes +
  // (j % P) * 2 * row_bytes, its V row row_bytes on; 8-bit pages' (K, V) f16 scales at sc0 +
  // page * page_bytes + 4 (j % P). A 16-aligned tile lies in one page (P >= 16).
  const char* kv = rk.hot ? a.sp_base + kvh * a.sp_head_bytes : static_cast<const char*>(a.kv.base);
  const uint32_t page_bytes = rk.hot ? a.sp_page_bytes : static_cast<uint32_t>(a.kv.page_elems * C::EB);
  const int64_t head_off = rk.hot ? 0
                           : k8  ? kvh * a.kv.head_stride
                                 : static_cast<int64_t>(kvh) * a.kv.page_tokens * 2 * C::kRowBytes;
  const char* row0 = kv + head_off;
  const char* sc0 = kv + head_off + a.kv.scales_offset;
  const uint32_t tp_mask = static_cast<uint32_t>(a.kv.page_tokens - 1);

  const int32_t begin_al = begin & ~(kTile - 1);
  const int n_tiles = n_run ? (end - begin_al + kTile - 1) / kTile : 0;
  const int n_t = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;  // this warp's tiles
  constexpr int kStep = kWarps * kTile;

  unsigned char* ring = smem + warp * S * C::kStageBytes;
  // cp.async the K / V rows (8-bit: and scales) of the tile at jt into stage `slot`; keys
  // outside the run are zero-filled, their rows not read.
  // The page of the tile at jt (-1: nothing of it in the run), looked up a tile ahead.
  auto page_of = [&](int32_t jt) {
    const int32_t j0 = max(jt, begin);
    return j0 < end ? __ldg(rk.pages + (static_cast<uint32_t>(j0) >> a.page_shift)) : -1;
  };
  auto issue = [&](int32_t jt, int slot, int32_t page) {
    unsigned char* st = ring + slot * C::kStageBytes;
    const uint64_t pg = page >= 0 ? static_cast<uint64_t>(page) : 0u;
    const uint32_t tp0 = static_cast<uint32_t>(jt) & tp_mask;
    const char* rows = row0 + pg * page_bytes + static_cast<uint64_t>(tp0) * 2 * C::kRowBytes;
#pragma unroll
    for (int c = lane; c < 2 * kTile * C::kChunks; c += 32) {
      const int r = c / C::kChunks, piece = c % C::kChunks;  // r: key (r & 15), K (r < 16) or V
      const int u = r & (kTile - 1), which = r >> 4;
      const bool ok = page >= 0 && in_run(jt + u);
      const char* src = rows + (2 * u + which) * C::kRowBytes + 16 * piece;
      const uint32_t dst =
          static_cast<uint32_t>(__cvta_generic_to_shared(st + (which * kTile + u) * C::kPitch + 16 * piece));
      cp_async<16>(dst, src, ok);
    }
    if constexpr (k8) {
      if (lane < kTile) {
        const bool ok = page >= 0 && in_run(jt + lane);
        const char* src = sc0 + pg * page_bytes + 4 * (tp0 + lane);
        cp_async<4>(static_cast<uint32_t>(__cvta_generic_to_shared(st + 2 * kTile * C::kPitch + 4 * lane)), src, ok);
      }
    }
  };

  float o[C::NMT][4];
#pragma unroll
  for (int mt = 0; mt < C::NMT; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m_run = -FLT_MAX;  // head g's reference max (log2 units; finite: 2^(-inf - m) = 0)
  float vscale = 1.0f;     // 8-bit pages: o holds vscale (a power of two, warp-uniform) times the sum of p v
  float l_run = 0.0f;      // head g's sum of p over this lane's keys

  int32_t jt_issue = begin_al + warp * kTile;
  int32_t next_page = page_of(jt_issue);
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (st < n_t) issue(jt_issue, st, next_page);
    cp_async_commit();
    jt_issue += kStep;
    next_page = page_of(jt_issue);
  }
  for (int k = 0; k < n_t; ++k) {
    if (k + S - 1 < n_t) issue(jt_issue, (k + S - 1) % S, next_page);
    cp_async_commit();
    jt_issue += kStep;
    next_page = page_of(jt_issue);
    cp_async_wait<S - 1>();  // this lane's copies of tile k landed
    __syncwarp();            // and every lane's
    const unsigned char* st = ring + (k % S) * C::kStageBytes;
    const unsigned char* ks = st;
    const unsigned char* vs = st + kTile * C::kPitch;
    const uint32_t* scs = reinterpret_cast<const uint32_t*>(st + 2 * kTile * C::kPitch);
    const int32_t jt = begin_al + (warp + k * kWarps) * kTile;

    // ---- S = Q Kᵀ: two n-tiles of 8 keys (key 8 nt + g of the tile in lane g's B fragment) ----
    float sacc[2][4] = {}, slo[2][4] = {};  // q hi and q lo: two independent mma chains
#pragma unroll
    for (int bb = 0; bb < D / C::BD; ++bb) {
      uint32_t w[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const uint4 w4 = *reinterpret_cast<const uint4*>(ks + (8 * nt + g) * C::kPitch + 16 * t + bb * C::BD * C::EB);
        w[nt][0] = w4.x, w[nt][1] = w4.y, w[nt][2] = w4.z, w[nt][3] = w4.w;
      }
#pragma unroll
      for (int ss = 0; ss < C::KS; ++ss) {
        const uint4 q = qf[(bb * C::KS + ss) * 32 + lane];  // hi (j 0 1, j 2 3), lo (same)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          uint32_t b0, b1;
          if constexpr (k8) {
            b0 = widen2<kElem>(w[nt][ss], false);
            b1 = widen2<kElem>(w[nt][ss], true);
          } else {
            b0 = w[nt][2 * ss];
            b1 = w[nt][2 * ss + 1];
          }
          mma_16816<false>(sacc[nt], q.x, 0u, q.y, 0u, b0, b1);
          mma_16816<false>(slo[nt], q.z, 0u, q.w, 0u, b0, b1);
        }
      }
    }

    // ---- scores of head g, keys 8 nt + 2t + e; masked: -inf ----
    float sc[2][2], dv[2][2];
    float tmax = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int u = 8 * nt + 2 * t + e;
        float x = (sacc[nt][e] + slo[nt][e]) * qexp;
        dv[nt][e] = 1.0f;
        if constexpr (k8) {
          const uint32_t kvs = scs[u];
          x *= f16_lo(kvs);
          dv[nt][e] = f16_hi(kvs);
        }
        x = (g < G && in_run(jt + u)) ? x : -INFINITY;
        sc[nt][e] = x;
        tmax = fmaxf(tmax, x);
      }
    tmax = fmaxf(tmax, __shfl_xor_sync(kAll, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(kAll, tmax, 2));
    // 8-bit pages: P carries the V row scales, times vscale (a power of two) so the tile's largest
    // scale is in (2^-4, 1] (f16 keeps P's bits; p <= 2^kSlack stays far from f16's max); vscale
    // moves only when the scales leave that range, the accumulators rescaled exactly with it.
    float vcorr = 1.0f;
    if constexpr (k8) {
      float dmax = fmaxf(fmaxf(dv[0][0], dv[0][1]), fmaxf(dv[1][0], dv[1][1]));
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) dmax = fmaxf(dmax, __shfl_xor_sync(kAll, dmax, off));
      const float scaled = dmax * vscale;
      if (dmax > 0.0f && dmax <= FLT_MAX && (scaled > 1.0f || scaled <= 0.0625f)) {  // warp-uniform
        int ed = 0;
        (void)frexpf(dmax, &ed);  // dmax 2^-ed in [0.5, 1)
        const float vnew = ldexpf(1.0f, -ed);
        vcorr = vnew / vscale;  // a power of two: exact
        vscale = vnew;
      }
    }
    // Online softmax with a lagging reference max (as attention.cu): rescale only when a score
    // passes it by kSlack (p <= 2^8), or when vscale moved.
    const bool grow = __any_sync(kAll, tmax > m_run + kSlack);
    if (grow || vcorr != 1.0f) {  // warp-uniform
      const float mn = grow ? fmaxf(m_run, tmax) : m_run;
      const float corr = fast_exp2(m_run - mn);
      m_run = mn;
      l_run *= corr;
      // heads 2t, 2t+1 live in lanes 8t, 8t + 4
      const float c0 = __shfl_sync(kAll, corr, 8 * t) * vcorr, c1 = __shfl_sync(kAll, corr, 8 * t + 4) * vcorr;
#pragma unroll
      for (int mt = 0; mt < C::NMT; ++mt) {
        o[mt][0] *= c0;
        o[mt][1] *= c1;
        o[mt][2] *= c0;
        o[mt][3] *= c1;
      }
    }
    float pv[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = fast_exp2(sc[nt][e] - m_run);
        l_run += p;
        pv[nt][e] = k8 ? p * dv[nt][e] * vscale : p;
      }
    // Pᵀ's B fragments, f16 hi + lo (p = hi + lo + O(2^-22 p)): rows (keys) 2t, 2t+1 and 2t+8,
    // 2t+9, col (head) g.
    uint32_t pb[2][2];  // [hi, lo][b0, b1]
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float h0 = __half2float(__float2half_rn(pv[nt][0])), h1 = __half2float(__float2half_rn(pv[nt][1]));
      pb[0][nt] = pack_h2(h0, h1);
      pb[1][nt] = pack_h2(pv[nt][0] - h0, pv[nt][1] - h1);
    }

    // ---- Oᵀ += Vᵀ Pᵀ: lane g's dims, keys 2t, 2t+1 (A cols 2t..) and 2t+8, 2t+9 ----
    const unsigned char* v0 = vs + (2 * t) * C::kPitch + g * C::VB;
    const unsigned char* v1 = v0 + C::kPitch;
    const unsigned char* v2 = v0 + 8 * C::kPitch;
    const unsigned char* v3 = v2 + C::kPitch;
    if constexpr (!k8) {
#pragma unroll
      for (int ch = 0; ch < C::VB / 16; ++ch) {  // 4 words (m-tiles) a 16-byte piece
        const uint4 a0 = *reinterpret_cast<const uint4*>(v0 + 16 * ch), a1 = *reinterpret_cast<const uint4*>(v1 + 16 * ch);
        const uint4 a2 = *reinterpret_cast<const uint4*>(v2 + 16 * ch), a3 = *reinterpret_cast<const uint4*>(v3 + 16 * ch);
        const uint32_t w0[4] = {a0.x, a0.y, a0.z, a0.w}, w1[4] = {a1.x, a1.y, a1.z, a1.w};
        const uint32_t w2[4] = {a2.x, a2.y, a2.z, a2.w}, w3[4] = {a3.x, a3.y, a3.z, a3.w};
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {
          const int mt = 4 * ch + wi;
          const uint32_t r0 = __byte_perm(w0[wi], w1[wi], 0x5410), r1 = __byte_perm(w0[wi], w1[wi], 0x7632);
          const uint32_t r2 = __byte_perm(w2[wi], w3[wi], 0x5410), r3 = __byte_perm(w2[wi], w3[wi], 0x7632);
          mma_16816<false>(o[mt], r0, r1, r2, r3, pb[0][0], pb[0][1]);
          mma_16816<false>(o[mt], r0, r1, r2, r3, pb[1][0], pb[1][1]);
        }
      }
    } else {
      constexpr int kWords = C::VB / 4;  // 2 m-tiles a word
      uint32_t w0[kWords], w1[kWords], w2[kWords], w3[kWords];
#pragma unroll
      for (int q4 = 0; q4 < kWords; q4 += 2) {  // 8-byte loads (VB is 8, 16 or 32)
        const uint2 b0 = *reinterpret_cast<const uint2*>(v0 + 4 * q4), b1 = *reinterpret_cast<const uint2*>(v1 + 4 * q4);
        const uint2 b2 = *reinterpret_cast<const uint2*>(v2 + 4 * q4), b3 = *reinterpret_cast<const uint2*>(v3 + 4 * q4);
        w0[q4] = b0.x, w0[q4 + 1] = b0.y;
        w1[q4] = b1.x, w1[q4 + 1] = b1.y;
        w2[q4] = b2.x, w2[q4 + 1] = b2.y;
        w3[q4] = b3.x, w3[q4 + 1] = b3.y;
      }
#pragma unroll
      for (int wi = 0; wi < kWords; ++wi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int mt = 2 * wi + h;
          const uint32_t sel = h ? 0x7362u : 0x5140u;  // bytes (2h, 2h+1) of two keys, interleaved
          const uint32_t x01 = __byte_perm(w0[wi], w1[wi], sel), x23 = __byte_perm(w2[wi], w3[wi], sel);
          const uint32_t r0 = widen2<kElem>(x01, false), r1 = widen2<kElem>(x01, true);
          const uint32_t r2 = widen2<kElem>(x23, false), r3 = widen2<kElem>(x23, true);
          mma_16816<false>(o[mt], r0, r1, r2, r3, pb[0][0], pb[0][1]);
          mma_16816<false>(o[mt], r0, r1, r2, r3, pb[1][0], pb[1][1]);
        }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  cp_async_wait<0>();
  l_run += __shfl_xor_sync(kAll, l_run, 1);
  l_run += __shfl_xor_sync(kAll, l_run, 2);

  // The warps' (max, sum, acc) through shared memory (over the rings), then the block epilogue.
  __syncthreads();
  float* sm_m = reinterpret_cast<float*>(smem);
  float* sm_l = sm_m + kWarps * kMaxG;
  float* sm_acc = sm_l + kWarps * kMaxG;
  if (t == 0) {
    sm_m[warp * kMaxG + g] = m_run;
    sm_l[warp * kMaxG + g] = l_run;
  }
  const float vund = 1.0f / vscale;  // exact
#pragma unroll
  for (int mt = 0; mt < C::NMT; ++mt) {
    const int d = C::VD * g + 2 * mt;
    float* h0 = sm_acc + (warp * kMaxG + 2 * t) * D + d;  // head 2t
    float* h1 = h0 + D;                                   // head 2t + 1
    h0[0] = o[mt][0] * vund;
    h1[0] = o[mt][1] * vund;
    h0[1] = o[mt][2] * vund;
    h1[1] = o[mt][3] * vund;
  }
  __syncthreads();
  write_merged<kWarps, kMaxG, kThreads>(a, sm_m, sm_l, sm_acc, D, i, kvh, split, tid);
}

template <KvElem kElem, int D, bool kCompact>
cudaError_t launch_one(const KernelArgs& a, dim3 grid, cudaStream_t s) {
  using C = MmaTiling<kElem, D, kCompact>;
  auto* kernel = attention_mma_kernel<kElem, D, kCompact>;
  static std::atomic<size_t> set[kSmemLimitDevices];
  // cudaErrorNotSupported where a block cannot have it: launch_attention runs the CUDA-core kernel.
  const cudaError_t e = ensure_smem_limit(kernel, C::kSmemBytes, C::kSmemBytes, set);
  if (e != cudaSuccess) return e;
  launch_chain(kernel, grid, dim3(kThreads), static_cast<size_t>(C::kSmemBytes), s, a);
  return cudaGetLastError();
}

bool compact_tiling() {
  static const bool on = [] {
    const char* e = std::getenv("HS_CUDA_ATTN_MMA_COMPACT");
    return e && e[0] == '1';
  }();
  return on;
}

template <KvElem kElem, int D>
cudaError_t launch_tiling(const KernelArgs& a, dim3 grid, cudaStream_t s) {
  return compact_tiling() ? launch_one<kElem, D, true>(a, grid, s) : launch_one<kElem, D, false>(a, grid, s);
}

template <KvElem kElem>
cudaError_t launch_dim(const KernelArgs& a, int head_dim, dim3 grid, cudaStream_t s) {
  switch (head_dim) {
    case 64: return launch_tiling<kElem, 64>(a, grid, s);
    case 128: return launch_tiling<kElem, 128>(a, grid, s);
    case 256: return launch_tiling<kElem, 256>(a, grid, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool attention_mma_takes(KvElem elem, int head_dim, int group, int page_tokens) {
  const int mode = attention_mma_mode();
  const bool eight_bit = elem == KvElem::kInt8 || elem == KvElem::kFp8;
  if (mode == 0 || !(elem == KvElem::kF16 || eight_bit) || !(head_dim == 64 || head_dim == 128 || head_dim == 256) ||
      group < 1 || group > kMaxG || page_tokens < kTile)
    return false;
  // Auto: where the CUDA-core kernel is issue-bound (docs/benchmarks.md, session 27, H100): 8-bit
  // pages (27B shape 8 x 32K int8 +20 %, 8B 1 x 128K int8 +1.7 %), head_dim 256 (27B f16 +3 %);
  // more than 4 query heads a kv head by its instruction count (G 5..8 run as 8: ~126 a key at
  // head_dim 128, twice G 4's; not yet timed). Not f16 at head_dim <= 128 with G <= 4, which the
  // CUDA-core kernel streams at the copy rate (8B f16 -1 to -3 % with this kernel).
  return mode == 1 || eight_bit || head_dim == 256 || group > 4;
}

cudaError_t launch_attention_mma(const KernelArgs& a, KvElem elem, int head_dim, dim3 grid, cudaStream_t s) {
  switch (elem) {
    case KvElem::kF16: return launch_dim<KvElem::kF16>(a, head_dim, grid, s);
    case KvElem::kInt8: return launch_dim<KvElem::kInt8>(a, head_dim, grid, s);
    case KvElem::kFp8: return launch_dim<KvElem::kFp8>(a, head_dim, grid, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace attn
}  // namespace hs::cuda
