// backend/cuda/sparse_kernels.h — launchers of the GPU sparse-attention kernels (sparse_select.cu):
// the key sketch written beside every stored key, and the per-step chunk selection that the
// decode attention kernel then reads as a page list (attention.cu, KernelArgs::sp_*).
//
// What it does, per full-attention layer of a decode step with sparse tokens
// (docs/gpu-sparse.md):
//   1. sketch_encode: s = Bᵀ(k − μ) of every key written this step, f16, into the sketch pages
//      (same block ids as the KV pages: a shared prefix page shares its sketches);
//   2. sparse_select: per (sparse token, kv head) row, q̂_g = Aᵀq_g and b_g = q_g·μ for the G
//      query heads, every candidate chunk's score = max over its tokens of max_g (b_g + q̂_g·s_t)
//      (the CPU SketchTopKSelector's max rule), then the CPU's select_top_chunks rule: sinks
//      and window forced in, the top budget / C candidates (higher score first, ties to the
//      later chunk, NaN as −inf) by a 4-pass radix select (sparse_topk.h: one CTA a row, a
//      cluster of CTAs a row for the shortlist over every candidate), ascending ids out;
//   3. the chunk ids become a page list (C = P: a chunk is one page of one kv head) and a key
//      count per row, which the decode attention kernel reads instead of the sequence's pages.
// Rows of dense tokens get length −1 (the attention kernel runs them dense).
// Graph-safe: fixed-capacity buffers, sizes read from the step tables on the device.
// Cost per (row, layer): n_tokens · rank · 2 bytes of sketch read (the context's sketches), the
// scores (4 bytes per chunk, written then read 4 times from L2), and the selected K|V by the
// attention kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace hs::cuda {

// One layer of device sketch pages: page b, kv head h, token tp of the page: `rank` f16 (bits)
// at base + ((b * n_kv_heads + h) * page_tokens + tp) * rank.
struct SketchLayerView {
  uint16_t* base = nullptr;
  int n_kv_heads = 0;
  int page_tokens = 16;
  int rank = 0;  // 16, 32 or 64 (pages of P = 8, 16 or 32 tokens)
  // Host tier (hot_set.h): the layer's residency map [n_kv][n_blocks]; writing a page's first
  // token (a new or reused block) clears its entry, so no slot fetched before serves it again.
  int32_t* residency = nullptr;
  int32_t n_blocks = 0;
  // Hierarchical scoring (SparseConfig::page_shortlist): per (block, kv head) the max then the
  // min of each sketch dim over the page's written tokens, [n_blocks][n_kv][2][rank] f16; kept
  // by sketch_encode / sketch_rebuild when set.
  uint16_t* summary = nullptr;
};
constexpr int kMaxSketchRank = 64;

// One layer's basis: B (key side) and A (query side, = B for a plain basis) [n_kv][head_dim][rank],
// mu [n_kv][head_dim], f32 in device memory.
struct SketchBasisView {
  const float* B = nullptr;
  const float* A = nullptr;
  const float* mu = nullptr;
  int head_dim = 0;
  int rank = 0;
};

// The selection rule (SparseConfig with C = P).
struct SelectRule {
  int chunk_tokens = 16;     // C (= the page size)
  int sink_chunks = 1;       // ceil(S / C)
  int window_tokens = 256;   // W
  int budget_tokens = 2048;  // on top of sinks and window
  int max_selected = 0;      // SparseConfig::max_selected_chunks(): the per-row capacity
};

struct SelectArgs {
  SelectRule rule;
  int n_kv_heads = 0, group = 0;
  const int32_t* sparse_tok = nullptr;  // [n] 1: the token selects this step
  float* scores = nullptr;              // [sparse_select_scratch_floats]: scores [n * n_kv][score_stride], then projections
  int32_t score_stride = 0;             // >= the most candidate chunks of any row
  int32_t* sel_chunks = nullptr;        // [n * n_kv][max_selected] ascending chunk ids, -1 padded
  int32_t* sel_pages = nullptr;         // [n * n_kv][max_selected] their block ids
  int32_t* sel_len = nullptr;           // [n * n_kv] selected keys, -1: a dense row
  // Hierarchical scoring (sk.summary set): scores first holds each candidate page's bound; the
  // best `shortlist` of a row (all when it has no more) go to list, ascending, and are scored
  // token by token into list_scores; the final top-k picks among them.
  int32_t shortlist = 0;
  int32_t* list = nullptr;          // [n * n_kv][shortlist] chunk ids
  int32_t* n_list = nullptr;        // [n * n_kv]
  float* list_scores = nullptr;     // [n * n_kv][shortlist]
  // Exact rerank (sparse/exact_rerank.h's rule; rerank set, no summaries): the sketch scores'
  // best `shortlist` (= R x the budget's chunks) go to list as above, then every listed chunk's
  // exact log mass per query head, L_gc = log sum_t exp(scale q_g . k_t) over its keys in `kv`,
  // and the same of the forced chunks (sinks, window) go to `mass`; list_scores gets the group
  // mass sum_g exp(L_gc - lse_g) (lse_g over the list and the forced chunks), and the final top-k
  // picks among the list by it.
  bool rerank = false;
  KvLayerView kv;                   // the layer's pages
  float scale = 0.0f;               // the attention scale
  float* mass = nullptr;            // [n * n_kv][shortlist + max_selected][group] (rerank2: shortlist2)
  // Hierarchical scoring and the rerank together (summaries set, rerank set, shortlist2 > 0): the
  // page bounds' best `shortlist` pages are sketch-scored into list_scores as above, their best
  // `shortlist2` (= R x the budget's chunks) go to list2 (ascending), and the rerank then works
  // on list2 as it would on list (list2_scores its group masses).
  int32_t shortlist2 = 0;
  int32_t* list2 = nullptr;         // [n * n_kv][shortlist2] chunk ids
  int32_t* n_list2 = nullptr;       // [n * n_kv]
  float* list2_scores = nullptr;    // [n * n_kv][shortlist2]
  // The rerank straight from the page bounds (summaries set, rerank set, shortlist2 == 0): the
  // bounds' best `shortlist` (= R x the budget's chunks) are the rerank's list; no sketch scores.
  bool bounds_first = false;
};

// Floats of SelectArgs::scores for `rows` rows.
size_t sparse_select_scratch_floats(int64_t rows, int32_t score_stride, int group, int rank);
// Floats of SelectArgs::mass for `rows` rows (the rerank).
inline size_t sparse_rerank_mass_floats(int64_t rows, int32_t shortlist, int max_selected, int group) {
  return static_cast<size_t>(rows) * (static_cast<size_t>(shortlist) + static_cast<size_t>(max_selected)) *
         static_cast<size_t>(group);
}

// Sketches of the step's keys k [n][n_kv * head_dim] (post-RoPE f32) at their positions.
cudaError_t launch_sketch_encode(SketchLayerView sk, SketchBasisView b, StepTables t, CRows k, cudaStream_t s);
// Sketches of keys [0, n_tokens) of one sequence read back from its KV pages (a synthetic or
// restored context): pages [ceil(n_tokens / P)] block ids. Plain KV (f32 / f16 / bf16) only.
cudaError_t launch_sketch_rebuild(SketchLayerView sk, SketchBasisView b, KvLayerView kv, const int32_t* pages,
                                  int32_t n_tokens, cudaStream_t s);
// Selections of every (token, kv head) row of the step (q [n][n_head * head_dim] f32);
// max_candidates: an upper bound on any row's candidate chunks (the grid's extent).
// stages: which kernels to launch (all by default; the profiler times the stages apart, in this
// order): kSelectProject the rows' q̂; kSelectScore every candidate's score (the page bounds with
// a shortlist, else the sketch scores); kSelectShortlist the shortlist's top-k and, after page
// bounds, its sketch scores (and, with the rerank too, their top-`shortlist2`); kSelectRerank the
// exact log masses; kSelectRank the group-mass ranking; kSelectTopk the selection.
enum SelectStage : int {
  kSelectProject = 1,
  kSelectScore = 2,
  kSelectTopk = 4,
  kSelectShortlist = 8,
  kSelectRerank = 16,
  kSelectRank = 32,
  kSelectAll = 63
};
cudaError_t launch_sparse_select(SketchLayerView sk, SketchBasisView b, StepTables t, CRows q, const SelectArgs& a,
                                 int32_t max_candidates, cudaStream_t s, int stages = kSelectAll);

}  // namespace hs::cuda
