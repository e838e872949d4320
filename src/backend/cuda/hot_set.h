// backend/cuda/hot_set.h — the device hot set of the GPU host tier (hot_set.cu,
// docs/gpu-sparse.md "Host tier"): when the KV pages live in mapped pinned host memory, a sparse
// row's selected pages are served from device slots, and only the ones not already there cross
// PCIe.
//
// One pool per (sparse layer, kv head): S slots, each holding one kv head's piece of one page
// (P tokens of K|V, the page's head block byte for byte: plain P * 2 * head_dim elements, fp8 the
// head_stride block with its scales). Per pool, in device memory:
//   res[n_blocks]    block -> slot holding it, or -1 (a hint: a hit also checks slot_block);
//   slot_block[S]    the block a slot holds (-1: empty);
//   slot_fill[S]     how many of the page's tokens were written when the slot was fetched (a
//                    slot serves a row only if it holds every key the row reads of that page:
//                    the growing last page is fetched again once it has more);
//   slot_used[S]     the pool's step stamp of its last use (CLOCK: a miss takes the next slot
//                    from the hand not used in the last two steps, then any not used this one);
//   clock[2]         the pool's step stamp and hand.
// A rewritten page (its first token written again after the block was reused) clears its res
// entry from the sketch-encode kernel (SketchLayerView::residency), so no stale piece is ever
// served; a slot that held it is simply reclaimed later.
//
// Per sparse layer and step (after the selection, before attention; graph-safe: fixed grids,
// counts on the device): hot_resolve maps every selected page of every sparse row to a slot
// (hits; the row's growing page, one token short in its slot, is topped up from the step's own
// K / V rows) or assigns a victim (misses), then its warps copy the missed pieces from mapped host
// memory, one warp per piece in 16-byte loads (one launch); the attention kernel then reads the
// row's slots (AttnArgs::sp_base).
// Cost: one CTA per kv head over the rows' selections (~cap lookups per row), then the missed
// pieces' bytes over PCIe (8 KiB a piece for a bf16 head of 128 at P = 16).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace hs::cuda {

// One sparse layer's pools (kv head h's arrays at h * n_blocks / h * n_slots).
struct HotPoolView {
  int32_t* res = nullptr;         // [n_kv][n_blocks]
  int32_t* slot_block = nullptr;  // [n_kv][n_slots]
  int32_t* slot_fill = nullptr;   // [n_kv][n_slots]
  uint32_t* slot_used = nullptr;  // [n_kv][n_slots]
  uint32_t* clock = nullptr;      // [n_kv][2]: step stamp, hand
  void* slots = nullptr;          // [n_kv][n_slots][piece_bytes]
  int32_t n_blocks = 0, n_slots = 0;
  int n_kv_heads = 0;
  int page_tokens = 16;
  int64_t piece_bytes = 0;  // a multiple of 16
};

// Counters accumulated on the device (read back at end_step).
enum HotCounter : int { kHotHits = 0, kHotMisses = 1, kHotEvictions = 2, kHotOverflow = 3, kHotCounters = 4 };

struct HotStepArgs {
  // The selection (sparse_kernels.h SelectArgs) of rows = n_tokens * n_kv.
  const int32_t* sel_chunks = nullptr;  // [rows][cap]
  const int32_t* sel_pages = nullptr;   // [rows][cap] block ids
  const int32_t* sel_len = nullptr;     // [rows] -1: dense
  const int32_t* positions = nullptr;   // [n_tokens]
  int64_t n_tokens = 0;
  int cap = 0;
  int32_t* slots_out = nullptr;    // [rows][cap] slot of each selected page (-1 padded)
  int32_t* miss_block = nullptr;   // [n_kv][n_tokens * cap] the queued copies
  int32_t* miss_slot = nullptr;    // [n_kv][n_tokens * cap]
  int32_t* miss_entry = nullptr;   // [n_kv][n_tokens * cap] resolve's scratch
  int32_t* miss_count = nullptr;   // [n_kv]
  unsigned long long* counters = nullptr;  // [kHotCounters]
  // Fraction of the selected pieces forced to miss (a hash of block, step and head decides):
  // 0 none, 1 every one (the worst case), e.g. 0.28 the real-text miss rate on random data.
  float force_miss = 0.0f;
  // This step's K / V rows of the layer ([n_tokens][n_kv * head_dim] f32, post-RoPE K: what
  // kv_write stored), or null: a decode row's growing page held in a slot one token short is
  // topped up from them (the token's row converted as kv_write converts it, plain KV only)
  // instead of fetched again.
  CRows k, v;
};

// Ints of HotStepArgs' miss arrays (three of n_kv * n_tokens * cap) plus miss_count.
size_t hot_step_scratch_ints(int64_t n_tokens, int n_kv_heads, int cap);

// Every slot empty, every res entry -1, stamps 0 (async on s).
cudaError_t launch_hot_reset(HotPoolView pool, cudaStream_t s);
// The resolve (and its gather) for one sparse layer; kv: the layer's pages (mapped host memory).
cudaError_t launch_hot_fetch(HotPoolView pool, KvLayerView kv, const HotStepArgs& a, cudaStream_t s);

}  // namespace hs::cuda
