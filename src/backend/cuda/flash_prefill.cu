// backend/cuda/flash_prefill.cu — tensor-core flash attention (FlashAttention-2) for prefill.
//
// Owns flash_prefill_kernel and its launcher (flash_prefill.h has the contract and the
// precision statement). A CTA of 4 warps takes one kv head and a tile of M query rows: TT =
// M / G consecutive tokens of the step times the G q heads of that kv head (row r = token
// r / G, head r % G; M mod G rows are padding), so each K/V tile is read once per GQA group.
// Warp w owns rows [w * 16 MB, (w + 1) * 16 MB) (MB m16 blocks); per K/V tile of N keys it
// computes S = Q K^T (mma.m16n8k16, Q and K fragments by ldmatrix), applies the mask where the
// tile needs one, updates the online softmax in registers (log2 domain: Q is prescaled by
// scale * log2 e) and accumulates O += P V (P from the S registers, V by ldmatrix.trans).
//
// Sequences: a tile's tokens may belong to several sequences (a batch of prompts back to
// back). The CTA walks them as segments: for each it finds, over its rows, the segment's key
// range [lo_min, hi_max] and runs the K/V pipeline over it; rows outside the segment are
// masked, so their softmax state is untouched, and the output is written once at the end.
// Keys outside [lo_min, hi_max] are never read (cp.async zero-fills them), so a tile's tail
// never touches pages a sequence does not own. Tiles with no row-specific limit inside them
// skip the mask (the bulk of a causal prompt: only the diagonal tile or two are masked).
//
// Shared memory (T = the cache's 16-bit type; rows of D elements as 16-byte chunks, chunk c of
// row r stored at c ^ (r % 8) so ldmatrix and cp.async are bank-conflict free):
//   Q [M][D], K [2][N][D], V [2][N][D] (double buffered), plus lo/hi [M] ints.
// Configs (D: MB, M, N, dynamic smem, registers from ptxas -v, CUDA 13.0, no spills):
//   64: 2, 128, 64, 48 KiB, 216;  128: 2, 128, 64, 96 KiB, 254;  256: 1, 64, 32, 96 KiB, 224
// (+128 B of alignment slack and ~1.3 KiB static): two CTAs (8 warps) per SM for each. The grid
// is n_tiles * n_kv_heads CTAs, heaviest (latest tokens) first.
// Cost per (tile, kv head): M * D * 4 bytes of Q read once; (hi_max - lo_min + N) keys of K/V
// read from L2; 4 * M * D FLOPs per key on tensor cores; per warp and 64-key tile (hd 128) 256
// mma, 80 ldmatrix, 64 ex2 and ~800 other instructions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "backend/cuda/flash_prefill.h"
#include "backend/cuda/mma.cuh"

namespace hs::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kMaxSlack = 8.0f;  // log2 units the running max may lag a row's true max

// ---- PTX helpers ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; valid == false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ float ex2(float x) {  // 2^x; -inf -> +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The 16-bit type's pieces: two floats -> one packed register (lower column in the low half),
// and the m16n8k16 MMA c += a * b (a: 16x16 row-major, b: 16x8 "col", fp32 c).
template <typename T>
struct Ops;
template <>
struct Ops<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ float q_clamp(float x) { return fminf(fmaxf(x, -65504.0f), 65504.0f); }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_16816<false>(c, a[0], a[1], a[2], a[3], b0, b1);
  }
};
template <>
struct Ops<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ float q_clamp(float x) { return x; }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_16816<true>(c, a[0], a[1], a[2], a[3], b0, b1);
  }
};

// ---- the kernel -------------------------------------------------------------------------------

struct FlashArgs {
  KvLayerView kv;
  StepTables t;
  CRows q;
  Rows out;
  int n = 0;            // tokens of the step
  int group = 1;        // G q heads per kv head
  int tile_tokens = 0;  // TT = M / G
  int n_tiles = 0;      // ceil(n / TT)
  float q_mul = 1.0f;   // scale * log2(e)
  int window = 0;
  int page_shift = 4;    // log2(P)
  bool q_vec = false;    // q rows 16-byte aligned: float4 loads
  bool out_vec = false;  // out rows 8-byte aligned: float2 stores
};

template <int D, int MB, int N>
struct Config {
  static constexpr int M = kWarps * 16 * MB;  // query rows per CTA
  static constexpr int CH = D / 8;            // 16-byte chunks per row
  static constexpr int ROW = D * 2;           // bytes per shared row
  static constexpr int NP = N / 16;           // 16-key page pieces per K/V tile
  static constexpr int KR = kThreads / CH;    // keys one pass of the CTA copies
  static constexpr size_t smem_bytes = static_cast<size_t>(M + 4 * N) * ROW + 128;  // + alignment slack
  static_assert(kThreads % CH == 0 && 16 % KR == 0 && N % KR == 0, "copy passes stay inside one 16-key piece");
  static_assert(N % 16 == 0 && D % 16 == 0, "whole mma tiles");
};

// Fields of the segment record (s_red).
enum SegField { kLoMin = 0, kHiMax, kLoMax, kHiMin, kSegEnd, kPages };

__device__ __forceinline__ int first_key(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

// grid n_tiles * n_kv_heads, kThreads threads, Config::smem_bytes dynamic shared memory.
template <typename T, int D, int MB, int N>
__global__ void __launch_bounds__(kThreads, 2) flash_prefill_kernel(FlashArgs a) {
  using C = Config<D, MB, N>;
  constexpr int M = C::M, CH = C::CH, ROW = C::ROW, NP = C::NP, KR = C::KR;
  constexpr int NB = N / 8;  // n8 blocks of S
  constexpr int DB = D / 8;  // n8 blocks of O

  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int s_lo[M], s_hi[M];     // [M] visible key range of each row in this segment
  __shared__ int s_red[kWarps][8];     // the segment: per-warp partials, then [0] the block's
  __shared__ int s_pg[2][NP];          // page ids of the tile each stage loads next
  // The tiles start at a 128-byte-aligned shared address (the ldmatrix addressing needs it;
  // the launch adds 128 bytes for the round-up).
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t sq = (raw + 127u) & ~127u;  // Q [M][D]
  unsigned char* const smem = smem_raw + (sq - raw);
  const uint32_t sk = sq + M * ROW;     // K [2][N][D]
  const uint32_t sv = sk + 2 * N * ROW;  // V [2][N][D]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Heaviest first over the whole grid (later tokens see more keys), kv heads fastest, so the
  // last wave holds the shortest tiles.
  const int tile = a.n_tiles - 1 - static_cast<int>(blockIdx.x) / a.kv.n_kv_heads;
  const int kvh = static_cast<int>(blockIdx.x) % a.kv.n_kv_heads;
  const int G = a.group, P = a.kv.page_tokens;
  const int tok0 = tile * a.tile_tokens;
  const int rows_used = a.tile_tokens * G;
  const int tok_end = min(a.n, tok0 + a.tile_tokens);

  // ---- Q tile: f32 rows -> T, times scale * log2(e); padding rows are zero.
#pragma unroll 4
  for (int i = 0; i < M * CH / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / CH, ch = c % CH;
    const int tok = tok0 + r / G;
    uint4 packed = make_uint4(0u, 0u, 0u, 0u);
    if (r < rows_used && tok < tok_end) {
      const float* src = a.q.p + static_cast<int64_t>(tok) * a.q.stride + static_cast<int64_t>(kvh * G + r % G) * D + ch * 8;
      float f[8];
      if (a.q_vec) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(src));
        const float4 y = __ldg(reinterpret_cast<const float4*>(src) + 1);
        f[0] = x.x, f[1] = x.y, f[2] = x.z, f[3] = x.w, f[4] = y.x, f[5] = y.y, f[6] = y.z, f[7] = y.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = __ldg(src + e);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = Ops<T>::q_clamp(f[e] * a.q_mul);
      packed = make_uint4(Ops<T>::pack(f[0], f[1]), Ops<T>::pack(f[2], f[3]), Ops<T>::pack(f[4], f[5]),
                          Ops<T>::pack(f[6], f[7]));
    }
    *reinterpret_cast<uint4*>(smem + r * ROW + ((ch ^ (r & 7)) << 4)) = packed;
  }

  // Per-lane ldmatrix addresses (bytes). Chunk c of row r sits at c ^ (r % 8), and every
  // fragment row has r % 8 = lane % 8. The chunk pair (2 k, 2 k + 1) a fragment reads is at
  // byte 16 ((2 k + hi) ^ lx) = (16 (hi ^ lx)) ^ 32 k of its row; for rows at 128-byte-aligned
  // addresses that is (row + 16 (hi ^ lx)) ^ 32 (k % 4), plus 128 (k / 4): one XOR with an
  // immediate per fragment, and one base register per operand.
  const int lx = lane & 7;
  const uint32_t q_x = sq + (warp * MB * 16 + (lane & 15)) * ROW + (((lane >> 4) ^ lx) << 4);  // A (Q): row m0 + lane % 16, chunk + lane / 16
  const uint32_t k_x = ((lane & 7) + ((lane >> 4) << 3)) * ROW + ((((lane >> 3) & 1) ^ lx) << 4);  // B (K): key + 8 (lane / 16), chunk + (lane / 8) % 2
  const uint32_t v_x = ((lane & 7) + (((lane >> 3) & 1) << 3)) * ROW + (((lane >> 4) ^ lx) << 4);  // B (V^T): key + 8 ((lane / 8) % 2), chunk + lane / 16

  float o[MB][DB][4];  // O accumulators: row (lane / 4) + 8 (e / 2), column 2 (lane % 4) + e % 2
  float m[MB][2], l[MB][2];  // running max (log2 units) and this lane's partial row sum
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m[mb][h] = -INFINITY;
      l[mb][h] = 0.0f;
    }
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mb][db][e] = 0.0f;
  }

  const int copy_key = tid / CH, copy_ch = tid % CH;  // this thread's key (+ i * KR) and chunk

  // ---- one segment (a run of the tile's tokens of one sequence) at a time
  int cur = tok0;
  while (cur < tok_end) {
    {
      const int seq = a.t.seq_index[cur];
      int lo_min = INT_MAX, hi_max = INT_MIN, lo_max = INT_MIN, hi_min = INT_MAX, seg_end = cur + 1;
      for (int r = tid; r < M; r += kThreads) {
        const int tok = tok0 + r / G;
        int lo = INT_MIN, hi = INT_MAX;  // padding rows see every key (their output is dropped)
        if (r < rows_used && tok < tok_end) {
          if (a.t.seq_index[tok] == seq) {
            const int pos = a.t.positions[tok];
            lo = first_key(pos, a.window);
            hi = pos;
            lo_min = min(lo_min, lo);
            hi_max = max(hi_max, hi);
            seg_end = max(seg_end, tok + 1);
          } else {  // another segment's row: nothing visible now
            lo = INT_MAX;
            hi = INT_MIN;
          }
          lo_max = max(lo_max, lo);
          hi_min = min(hi_min, hi);
        }
        s_lo[r] = lo;
        s_hi[r] = hi;
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        lo_min = min(lo_min, __shfl_xor_sync(0xffffffffu, lo_min, off));
        hi_max = max(hi_max, __shfl_xor_sync(0xffffffffu, hi_max, off));
        lo_max = max(lo_max, __shfl_xor_sync(0xffffffffu, lo_max, off));
        hi_min = min(hi_min, __shfl_xor_sync(0xffffffffu, hi_min, off));
        seg_end = max(seg_end, __shfl_xor_sync(0xffffffffu, seg_end, off));
      }
      if (lane == 0) {
        s_red[warp][kLoMin] = lo_min;
        s_red[warp][kHiMax] = hi_max;
        s_red[warp][kLoMax] = lo_max;
        s_red[warp][kHiMin] = hi_min;
        s_red[warp][kSegEnd] = seg_end;
      }
      __syncthreads();  // also publishes s_lo / s_hi (and the Q tile, the first time)
      if (tid == 0) {
#pragma unroll
        for (int w = 1; w < kWarps; ++w) {
          s_red[0][kLoMin] = min(s_red[0][kLoMin], s_red[w][kLoMin]);
          s_red[0][kHiMax] = max(s_red[0][kHiMax], s_red[w][kHiMax]);
          s_red[0][kLoMax] = max(s_red[0][kLoMax], s_red[w][kLoMax]);
          s_red[0][kHiMin] = min(s_red[0][kHiMin], s_red[w][kHiMin]);
          s_red[0][kSegEnd] = max(s_red[0][kSegEnd], s_red[w][kSegEnd]);
        }
        s_red[0][kPages] = a.t.page_indptr[seq];
      }
      __syncthreads();
    }
    // The segment, block-uniform, read from shared memory where it is used (registers are
    // the accumulators').
    int* const seg = s_red[0];

    // Page id of 16-key piece `tid` (< NP) of the tile at k0 if it holds visible keys, else -1.
    auto fetch_page = [&](int k0) -> int {
      const int key = k0 + 16 * tid;
      return key <= seg[kHiMax] && key + 15 >= seg[kLoMin] ? __ldg(a.t.page_indices + seg[kPages] + (key >> a.page_shift)) : -1;
    };
    // cp.async of the K and V rows [k0, k0 + N) into `stage` from the pages in s_pg[slot];
    // keys outside [lo_min, hi_max] become zeros without a read.
    auto issue = [&](int k0, int stage) {
      const uint32_t dk = sk + stage * N * ROW, dv = sv + stage * N * ROW;
      const int lo_min = seg[kLoMin], hi_max = seg[kHiMax];
      const char* kv_base = static_cast<const char*>(a.kv.base);
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const int piece = k0 + 16 * j;
        const int page = max(s_pg[stage][j], 0);  // -1: no visible key, nothing read
        const char* pbase = kv_base + static_cast<int64_t>(page) * a.kv.page_elems * 2 +
                            (static_cast<int64_t>(kvh) * P + (piece & (P - 1))) * (4 * D) + copy_ch * 16;
#pragma unroll
        for (int i = j * 16 / KR; i < (j + 1) * 16 / KR; ++i) {
          const int key = copy_key + i * KR;  // in the tile; key % 16 = key - 16 j
          const int gk = k0 + key;
          const bool ok = gk >= lo_min && gk <= hi_max;
          const char* src = ok ? pbase + (key - 16 * j) * (4 * D) : kv_base;
          const uint32_t so = key * ROW + ((copy_ch ^ (key & 7)) << 4);
          cp_async16(dk + so, src, ok);
          cp_async16(dv + so, ok ? src + 2 * D : src, ok);
        }
      }
    };

    // Pipeline: tile it computes from stage it % 2 while tile it + 1 loads into the other;
    // s_pg[stage] holds the page ids of the tile that stage loads next (fetched one tile ahead
    // by threads < NP, so the page-table latency hides behind a tile of math).
    const int kt0 = seg[kLoMin] / N, nt = seg[kHiMax] / N - kt0 + 1;
    if (tid < NP) {
      s_pg[0][tid] = fetch_page(kt0 * N);
      if (nt > 1) s_pg[1][tid] = fetch_page((kt0 + 1) * N);
    }
    __syncthreads();
    issue(kt0 * N, 0);
    cp_async_commit();

    for (int it = 0; it < nt; ++it) {
      const int k0 = (kt0 + it) * N;
      if (it + 1 < nt) issue(k0 + N, (it + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      int next_page = -1;  // tile it + 2's, stored into s_pg[it % 2] after the math
      if (tid < NP && it + 2 < nt) next_page = fetch_page(k0 + 2 * N);
      const uint32_t ks = sk + (it & 1) * N * ROW, vs = sv + (it & 1) * N * ROW;

      // S = Q K^T: [MB][NB] m16n8 blocks; s[mb][nb][e] is row (lane / 4) + 8 (e / 2), key
      // k0 + 8 nb + 2 (lane % 4) + e % 2.
      float s[MB][NB][4];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mb][nb][e] = 0.0f;
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd) {
        uint32_t qa[MB][4];
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) ldmatrix_x4(qa[mb], ((q_x + mb * 16 * ROW) ^ ((kd % 4) * 32)) + (kd / 4) * 128);
#pragma unroll
        for (int np = 0; np < N / 16; ++np) {
          uint32_t kb[4];  // b0, b1 of keys 16 np .. +7, then of 16 np + 8 .. +15
          ldmatrix_x4(kb, ((ks + k_x) ^ ((kd % 4) * 32)) + np * 16 * ROW + (kd / 4) * 128);
#pragma unroll
          for (int mb = 0; mb < MB; ++mb) {
            Ops<T>::mma(s[mb][2 * np], qa[mb], kb[0], kb[1]);
            Ops<T>::mma(s[mb][2 * np + 1], qa[mb], kb[2], kb[3]);
          }
        }
      }

      // Mask (only tiles where some row's range starts or ends inside, or rows of another
      // segment sit in the tile).
      if (!(seg[kLoMax] <= k0 && seg[kHiMin] >= k0 + N - 1)) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = warp * MB * 16 + mb * 16 + (lane >> 2) + 8 * h;
            const int lo = s_lo[r], hi = s_hi[r];
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int key = k0 + nb * 8 + 2 * (lane & 3) + e;
                if (key < lo || key > hi) s[mb][nb][2 * h + e] = -INFINITY;
              }
          }
      }

      // Online softmax (log2 domain); P overwrites S. The running max only moves when a tile's
      // max passes it by more than kMaxSlack (weights stay <= 2^kMaxSlack, far inside f16 /
      // bf16 and fp32), so alpha is exactly 1 for most tiles and the O rescale is skipped when
      // it is for every row of the warp.
      float alpha[MB][2];
      bool rescale = false;
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = -INFINITY;
#pragma unroll
          for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[mb][nb][2 * h], s[mb][nb][2 * h + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_old = m[mb][h];
          const float m_new = mx > m_old + kMaxSlack ? mx : m_old;  // -inf + slack = -inf
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // a row with nothing visible yet
          alpha[mb][h] = ex2(m_old - m_use);
          rescale |= alpha[mb][h] != 1.0f;
          m[mb][h] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float p = ex2(s[mb][nb][2 * h + e] - m_use);
              s[mb][nb][2 * h + e] = p;
              sum += p;
            }
          l[mb][h] = l[mb][h] * alpha[mb][h] + sum;
        }
      if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int db = 0; db < DB; ++db)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mb][db][e] *= alpha[mb][e >> 1];
      }

      // O += P V: P's A fragment of keys 16 kk .. +15 is S blocks 2 kk and 2 kk + 1.
#pragma unroll
      for (int kk = 0; kk < N / 16; ++kk) {
        uint32_t pa[MB][4];
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          pa[mb][0] = Ops<T>::pack(s[mb][2 * kk][0], s[mb][2 * kk][1]);
          pa[mb][1] = Ops<T>::pack(s[mb][2 * kk][2], s[mb][2 * kk][3]);
          pa[mb][2] = Ops<T>::pack(s[mb][2 * kk + 1][0], s[mb][2 * kk + 1][1]);
          pa[mb][3] = Ops<T>::pack(s[mb][2 * kk + 1][2], s[mb][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t vb[4];  // b0, b1 of columns 16 dp .. +7, then of 16 dp + 8 .. +15
          ldmatrix_x4_trans(vb, ((vs + v_x) ^ ((dp % 4) * 32)) + kk * 16 * ROW + (dp / 4) * 128);
#pragma unroll
          for (int mb = 0; mb < MB; ++mb) {
            Ops<T>::mma(o[mb][2 * dp], pa[mb], vb[0], vb[1]);
            Ops<T>::mma(o[mb][2 * dp + 1], pa[mb], vb[2], vb[3]);
          }
        }
      }
      if (tid < NP && it + 2 < nt) s_pg[it & 1][tid] = next_page;
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
    cur = seg[kSegEnd];
    __syncthreads();  // s_red, s_lo, s_hi are rewritten by the next segment
  }

  // ---- normalise and store the tile's real rows
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mb][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = warp * MB * 16 + mb * 16 + (lane >> 2) + 8 * h;
      const int tok = tok0 + r / G;
      if (r >= rows_used || tok >= tok_end) continue;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      float* dst = a.out.p + static_cast<int64_t>(tok) * a.out.stride + static_cast<int64_t>(kvh * G + r % G) * D +
                   2 * (lane & 3);
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        const float x = o[mb][db][2 * h] * inv, y = o[mb][db][2 * h + 1] * inv;
        if (a.out_vec) {
          *reinterpret_cast<float2*>(dst + db * 8) = make_float2(x, y);
        } else {
          dst[db * 8] = x;
          dst[db * 8 + 1] = y;
        }
      }
    }
}

template <typename T, int D, int MB, int N>
cudaError_t launch_config(FlashArgs fa, cudaStream_t s) {
  using C = Config<D, MB, N>;
  auto* kernel = flash_prefill_kernel<T, D, MB, N>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(C::smem_bytes));
  if (err != cudaSuccess) return err;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (err != cudaSuccess) return err;
  fa.tile_tokens = C::M / fa.group;
  const int64_t tiles = (static_cast<int64_t>(fa.n) + fa.tile_tokens - 1) / fa.tile_tokens;
  fa.n_tiles = static_cast<int>(tiles);
  kernel<<<static_cast<unsigned>(tiles * fa.kv.n_kv_heads), kThreads, C::smem_bytes, s>>>(fa);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_dim(const FlashArgs& fa, int head_dim, cudaStream_t s) {
  switch (head_dim) {
    case 64: return launch_config<T, 64, 2, 64>(fa, s);
    case 128: return launch_config<T, 128, 2, 64>(fa, s);
    case 256: return launch_config<T, 256, 1, 32>(fa, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool flash_prefill_supported(const KvLayerView& kv, int head_dim, int group) {
  return (kv.elem == KvElem::kF16 || kv.elem == KvElem::kBF16) && kv.head_dim == head_dim &&
         (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 && group <= 8 && kv.page_tokens >= 16 &&
         (kv.page_tokens & (kv.page_tokens - 1)) == 0 && kv.page_elems >= static_cast<int64_t>(kv.n_kv_heads) * kv.page_tokens * 2 * head_dim;
}

size_t flash_prefill_scratch_bytes(int64_t /*n_tokens*/, int /*n_head*/, int /*head_dim*/) { return 0; }

cudaError_t launch_flash_prefill(KvLayerView kv, StepTables t, CRows q, Rows out, const AttnArgs& a, void* /*scratch*/,
                                 cudaStream_t s) {
  if (q.rows <= 0) return cudaSuccess;
  if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.n_head_kv != kv.n_kv_heads || a.head_dim != kv.head_dim)
    return cudaErrorInvalidValue;
  const int group = a.n_head / a.n_head_kv;
  if (!flash_prefill_supported(kv, a.head_dim, group) || q.rows > INT_MAX / 2 || a.n_head_kv > 65535 ||
      reinterpret_cast<uintptr_t>(kv.base) % 16 != 0 || out.rows < q.rows)
    return cudaErrorInvalidValue;
  FlashArgs fa;
  fa.kv = kv;
  fa.t = t;
  fa.q = q;
  fa.out = out;
  fa.n = static_cast<int>(q.rows);
  fa.group = group;
  fa.q_mul = a.scale * kLog2e;
  fa.window = a.window;
  while ((1 << fa.page_shift) < kv.page_tokens) ++fa.page_shift;
  fa.q_vec = reinterpret_cast<uintptr_t>(q.p) % 16 == 0 && q.stride % 4 == 0;
  fa.out_vec = reinterpret_cast<uintptr_t>(out.p) % 8 == 0 && out.stride % 2 == 0;
  switch (kv.elem) {
    case KvElem::kF16: return launch_dim<__half>(fa, a.head_dim, s);
    case KvElem::kBF16: return launch_dim<__nv_bfloat16>(fa, a.head_dim, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace hs::cuda
