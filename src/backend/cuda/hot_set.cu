// backend/cuda/hot_set.cu — the device hot set's kernels (hot_set.h): reset, and resolve (selected
// pages -> slots, top-ups, CLOCK victims for misses, then the misses copied from mapped host memory).
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/hot_set.h"
#include "backend/cuda/kv_elem.cuh"
#include "backend/cuda/pdl.cuh"

namespace hs::cuda {

namespace {

constexpr int kResolveThreads = 256;
constexpr int kMaxTopUps = 64;  // growing pages topped up per (layer, kv head) and step; more: misses

// Row tp of the slot piece ([P][K|V][hd] of T) from token i's f32 K / V rows of kv head h.
template <typename T>
__device__ __forceinline__ void top_up_row(void* piece, int tp, int hd, const float* kr, const float* vr, int lane) {
  T* dst = static_cast<T*>(piece) + static_cast<int64_t>(tp) * 2 * hd;
  for (int d = lane; d < hd; d += 32) {
    dst[d] = from_f<T>(kr[d]);
    dst[hd + d] = from_f<T>(vr[d]);
  }
}

__global__ void hot_reset_kernel(HotPoolView p) {
  const int64_t n_res = int64_t{p.n_kv_heads} * p.n_blocks;
  const int64_t n_slot = int64_t{p.n_kv_heads} * p.n_slots;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < std::max(n_res, n_slot); i += stride) {
    if (i < n_res) p.res[i] = -1;
    if (i < n_slot) {
      p.slot_block[i] = -1;
      p.slot_fill[i] = 0;
      p.slot_used[i] = 0;
    }
    if (i < 2 * p.n_kv_heads) p.clock[i] = 0;
  }
}

// Warp copy of queued miss m of kv head h: the piece from the host page into its slot (8 loads
// in flight a lane: 4 KiB a warp a round trip; 64 warps over the layer keep ~256 KiB in flight,
// what the bus needs at ~2 µs of latency).
__device__ __forceinline__ void copy_piece(const HotPoolView& p, const KvLayerView& kv, int h, int32_t block,
                                           int32_t slot, int lane) {
  const int64_t page_bytes = kv.page_elems * kv_elem_unit_bytes(kv.elem);
  const int64_t n16 = p.piece_bytes / 16;
  const uint4* src =
      reinterpret_cast<const uint4*>(static_cast<const char*>(kv.base) + block * page_bytes + h * p.piece_bytes);
  uint4* dst = reinterpret_cast<uint4*>(static_cast<char*>(p.slots) + (int64_t{h} * p.n_slots + slot) * p.piece_bytes);
  constexpr int kUnroll = 8;
  for (int64_t base = 0; base < n16; base += 32 * kUnroll) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = base + u * 32 + lane;
      if (k < n16) r[u] = src[k];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = base + u * 32 + lane;
      if (k < n16) dst[k] = r[u];
    }
  }
}

// Scaled pages (fp8 / int8 / int4): token tp's encoded K|V rows and scales, copied from the
// block's host page (kv_write wrote them earlier in the step) into the slot piece, by one warp.
__device__ __forceinline__ void top_up_scaled(void* piece, const KvLayerView& kv, int h, int32_t block, int tp,
                                              int64_t piece_bytes, int lane) {
  const int64_t row = kv_elem_row_bytes(kv.elem, kv.head_dim), sc = kv_elem_scale_bytes(kv.elem);
  const char* src = static_cast<const char*>(kv.base) + block * kv.page_elems + h * piece_bytes;
  char* dst = static_cast<char*>(piece);
  const int64_t r0 = tp * 2 * row, s0 = kv.scales_offset + tp * 2 * sc;
  for (int64_t b = lane; b < 2 * row; b += 32) dst[r0 + b] = src[r0 + b];
  if (lane < 2 * sc) dst[s0 + lane] = src[s0 + lane];
}

// HotStepArgs::force_miss: whether this (block, step, head)'s lookup is forced to miss.
__device__ __forceinline__ bool forced_miss(float frac, int32_t block, uint32_t epoch, int h) {
  if (frac <= 0.0f) return false;
  if (frac >= 1.0f) return true;
  uint32_t x = static_cast<uint32_t>(block) * 0x9e3779b1u ^ (epoch * 0x85ebca77u + static_cast<uint32_t>(h) * 0xc2b2ae3du);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(x) * 0x1p-32f < frac;
}

// Block-wide exclusive scan of one flag per thread: (rank among the set flags before this
// thread, total set).
__device__ __forceinline__ int2 block_rank(bool flag, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  const int in_warp = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) warp_sums[warp] = __popc(ballot);
  __syncthreads();
  const int n_warps = blockDim.x >> 5;
  int before = 0, total = 0;
  for (int w = 0; w < n_warps; ++w) {
    const int c = warp_sums[w];
    before += w < warp ? c : 0;
    total += c;
  }
  __syncthreads();  // warp_sums reused by the next call
  return make_int2(before + in_warp, total);
}

// One CTA per kv head of the layer. elem: the pages' element type (top-ups for plain ones).
__global__ void __launch_bounds__(kResolveThreads) hot_resolve_kernel(HotPoolView p, HotStepArgs a, KvLayerView kv) {
  const KvElem elem = kv.elem;
  const int head_dim = kv.head_dim;
  pdl_launch_dependents();
  pdl_wait();
  __shared__ int n_miss;
  __shared__ int warp_sums[kResolveThreads / 32];
  __shared__ unsigned long long hits_sh, evict_sh;
  __shared__ int last_off;
  __shared__ int n_top;
  __shared__ int32_t top_slot[kMaxTopUps], top_tok[kMaxTopUps], top_tp[kMaxTopUps], top_blk[kMaxTopUps];
  const int h = blockIdx.x, n_kv = p.n_kv_heads, P = p.page_tokens, S = p.n_slots;
  int32_t* res = p.res + int64_t{h} * p.n_blocks;
  int32_t* slot_block = p.slot_block + int64_t{h} * S;
  int32_t* slot_fill = p.slot_fill + int64_t{h} * S;
  uint32_t* slot_used = p.slot_used + int64_t{h} * S;
  const int64_t max_miss = a.n_tokens * a.cap;
  int32_t* miss_entry = a.miss_entry + h * max_miss;
  int32_t* miss_block = a.miss_block + h * max_miss;
  int32_t* miss_slot = a.miss_slot + h * max_miss;
  const uint32_t epoch = p.clock[2 * h] + 1;
  // Plain pages top up from the step's K / V rows, scaled ones from the host page's new row.
  const bool scaled = kv_elem_scaled(elem);
  const bool can_top_up = scaled || (a.k.p && a.v.p);
  if (threadIdx.x == 0) {
    n_miss = 0;
    n_top = 0;
    hits_sh = 0;
    evict_sh = 0;
  }
  __syncthreads();

  // The page of entry e (token i, j-th selection) and how many of its keys the row reads.
  auto entry = [&](int64_t e, int32_t& block, int32_t& need, int64_t& out) -> bool {
    const int64_t i = e / a.cap;
    const int j = static_cast<int>(e - i * a.cap);
    const int64_t row = i * n_kv + h;
    out = row * a.cap + j;
    if (a.sel_len[row] < 0) return false;
    block = a.sel_pages[out];
    // Past the row's selection the top-k pads chunk -1 with page 0 (a readable address for the
    // attention kernel, which stops at sel_len): not an entry. Taken as one, it fetched block 0
    // whole (need P) every step, and a block 0 that was some row's growing page was then served
    // from a slot holding a stale tail (HS_TEST_SEED=1804309288233957682, the host-tier storm).
    if (block < 0 || a.sel_chunks[out] < 0) return false;
    const int32_t n_keys = a.positions[i] + 1;
    need = min(P, n_keys - a.sel_chunks[out] * P);
    return true;
  };

  // Hits: a slot that holds the block with every key the row reads of it.
  unsigned long long hits = 0;
  for (int64_t e = threadIdx.x; e < max_miss; e += blockDim.x) {
    int32_t block = -1, need = 0;
    int64_t out = 0;
    if (!entry(e, block, need, out)) {
      if (a.sel_len[(e / a.cap) * n_kv + h] >= 0) a.slots_out[out] = -1;
      continue;
    }
    const int32_t s = forced_miss(a.force_miss, block, epoch, h) ? -1 : res[block];
    bool hit = false;
    if (s >= 0 && slot_block[s] == block) {
      const int32_t fill = slot_fill[s];
      hit = fill >= need;
      // The row's growing page one token short: that token is this step's own (a decode row's
      // token is its sequence's only one), written from its K / V rows below.
      const int64_t i = e / a.cap;
      if (!hit && can_top_up && fill == need - 1 && a.positions[i] % P == fill) {
        const int t = atomicAdd(&n_top, 1);
        if (t < kMaxTopUps) {
          top_slot[t] = s;
          top_tok[t] = static_cast<int32_t>(i);
          top_tp[t] = fill;
          top_blk[t] = block;
          hit = true;
        }
      }
    }
    if (hit) {
      slot_used[s] = epoch;
      a.slots_out[out] = s;
      ++hits;
    } else {
      miss_entry[atomicAdd(&n_miss, 1)] = static_cast<int32_t>(e);
    }
  }
  if (hits) atomicAdd(&hits_sh, hits);
  __syncthreads();
  // Top-ups, a warp each: the token's row into its slot, then the slot's fill.
  const int tops = min(n_top, kMaxTopUps);
  for (int t = threadIdx.x >> 5; t < tops; t += blockDim.x >> 5) {
    const int lane = threadIdx.x & 31;
    void* piece = static_cast<char*>(p.slots) + (int64_t{h} * S + top_slot[t]) * p.piece_bytes;
    if (scaled) {
      top_up_scaled(piece, kv, h, top_blk[t], top_tp[t], p.piece_bytes, lane);
      __syncwarp();
      if (lane == 0) slot_fill[top_slot[t]] = top_tp[t] + 1;
      continue;
    }
    const float* kr = a.k.p + top_tok[t] * a.k.stride + static_cast<int64_t>(h) * head_dim;
    const float* vr = a.v.p + top_tok[t] * a.v.stride + static_cast<int64_t>(h) * head_dim;
    switch (elem) {
      case KvElem::kF32: top_up_row<float>(piece, top_tp[t], head_dim, kr, vr, lane); break;
      case KvElem::kF16: top_up_row<__half>(piece, top_tp[t], head_dim, kr, vr, lane); break;
      case KvElem::kBF16: top_up_row<__nv_bfloat16>(piece, top_tp[t], head_dim, kr, vr, lane); break;
      default: break;
    }
    if (lane == 0) slot_fill[top_slot[t]] = top_tp[t] + 1;
  }

  // Misses: victims from the hand, first slots unused in the last two steps, then any unused
  // in this one (two laps each); a slot used this step is never taken.
  const int total_miss = n_miss;
  uint32_t hand = p.clock[2 * h + 1];
  int assigned = 0;
  unsigned long long evictions = 0;
  const int window = min(static_cast<int>(blockDim.x), S);  // wider than the pool would see a slot twice
  for (int64_t scanned = 0; assigned < total_miss && scanned < 4 * int64_t{S}; scanned += window) {
    const bool strict = scanned < 2 * int64_t{S};
    const bool in_window = static_cast<int>(threadIdx.x) < window;
    const uint32_t v = (hand + threadIdx.x) % static_cast<uint32_t>(S);
    bool cand = false;
    if (in_window) {
      const uint32_t used = slot_used[v];
      cand = used != epoch && (!strict || used + 1 < epoch || slot_block[v] < 0);
    }
    const int2 rk = block_rank(cand, warp_sums);
    const int m = assigned + rk.x;
    if (cand && m < total_miss) {
      int32_t block = -1, need = 0;
      int64_t out = 0;
      entry(miss_entry[m], block, need, out);
      const int32_t old = slot_block[v];
      if (old >= 0) {
        atomicCAS(&res[old], static_cast<int32_t>(v), -1);
        ++evictions;
      }
      res[block] = static_cast<int32_t>(v);
      slot_block[v] = block;
      slot_fill[v] = need;
      slot_used[v] = epoch;
      a.slots_out[out] = static_cast<int32_t>(v);
      miss_block[m] = block;
      miss_slot[m] = static_cast<int32_t>(v);
    }
    // The hand moves past the last slot taken (or the whole window when more are needed).
    const int taken = min(rk.y, total_miss - assigned);
    if (assigned + rk.y >= total_miss) {
      // The taken slot of rank taken - 1 is the last one: its offset in the window.
      if (cand && rk.x == taken - 1) last_off = static_cast<int>(threadIdx.x);
      __syncthreads();
      hand = (hand + static_cast<uint32_t>(last_off) + 1u) % static_cast<uint32_t>(S);
    } else {
      hand = (hand + static_cast<uint32_t>(window)) % static_cast<uint32_t>(S);
    }
    assigned += taken;
    __syncthreads();
  }
  if (evictions) atomicAdd(&evict_sh, evictions);
  // What found no slot (the pool smaller than one step's selections: sized so it cannot be):
  // read nothing (-1), counted as overflow.
  for (int m = assigned + threadIdx.x; m < total_miss; m += blockDim.x) {
    int32_t block = -1, need = 0;
    int64_t out = 0;
    entry(miss_entry[m], block, need, out);
    a.slots_out[out] = -1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    p.clock[2 * h] = epoch;
    p.clock[2 * h + 1] = hand;
    a.miss_count[h] = assigned;
    atomicAdd(&a.counters[kHotHits], hits_sh);
    atomicAdd(&a.counters[kHotMisses], static_cast<unsigned long long>(assigned));
    atomicAdd(&a.counters[kHotEvictions], evict_sh);
    if (assigned < total_miss) atomicAdd(&a.counters[kHotOverflow], static_cast<unsigned long long>(total_miss - assigned));
  }
  // Gather: this CTA's warps copy its kv head's misses (8 CTAs of 8 warps reach the bus's rate:
  // every piece a miss at 1 x 128K moved 308 MB a step at the separate 128-CTA gather's speed).
  for (int m = threadIdx.x >> 5; m < assigned; m += blockDim.x >> 5)
      copy_piece(p, kv, h, miss_block[m], miss_slot[m], threadIdx.x & 31);
}

}  // namespace

size_t hot_step_scratch_ints(int64_t n_tokens, int n_kv_heads, int cap) {
  return 3 * static_cast<size_t>(n_kv_heads) * static_cast<size_t>(n_tokens) * static_cast<size_t>(cap) +
         static_cast<size_t>(n_kv_heads);
}

cudaError_t launch_hot_reset(HotPoolView pool, cudaStream_t s) {
  if (pool.n_kv_heads <= 0 || pool.n_slots <= 0 || pool.n_blocks <= 0) return cudaErrorInvalidValue;
  const int64_t n = std::max(int64_t{pool.n_kv_heads} * pool.n_blocks, int64_t{pool.n_kv_heads} * pool.n_slots);
  const int ctas = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  hot_reset_kernel<<<ctas, 256, 0, s>>>(pool);
  return cudaGetLastError();
}

cudaError_t launch_hot_fetch(HotPoolView pool, KvLayerView kv, const HotStepArgs& a, cudaStream_t s) {
  if (a.n_tokens <= 0) return cudaSuccess;
  if (pool.n_kv_heads <= 0 || pool.n_kv_heads != kv.n_kv_heads || pool.n_slots <= 0 || pool.piece_bytes <= 0 ||
      pool.piece_bytes % 16 != 0 || pool.page_tokens != kv.page_tokens || a.cap <= 0 || !a.slots_out ||
      !a.miss_count || !a.counters || reinterpret_cast<uintptr_t>(kv.base) % 16 != 0 ||
      a.n_tokens * a.cap > 0x7fffffff)
    return cudaErrorInvalidValue;
  if ((a.k.p || a.v.p) && (!a.k.p || !a.v.p || a.k.rows < a.n_tokens || a.v.rows < a.n_tokens ||
                           a.k.cols != int64_t{kv.n_kv_heads} * kv.head_dim || a.v.cols != a.k.cols))
    return cudaErrorInvalidValue;
  launch_chain(hot_resolve_kernel, dim3(static_cast<unsigned>(pool.n_kv_heads)), kResolveThreads, 0, s, pool, a, kv);
  return cudaGetLastError();
}

}  // namespace hs::cuda
