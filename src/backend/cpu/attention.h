// backend/cpu/attention.h — exact softmax attention over paged KV (decode and prefill).
//
// Pages follow kv/kv_cache.h: [n_kv_heads][P][K | V][head_dim] float32 or float16 (converted
// to float32 on load), addressed through a block table. The kernel takes one kv head and the G query heads that share it (GQA), and
// a key range [begin, end); it makes one pass over the keys with an online softmax, so each
// K|V row is read once for the whole group. Long ranges are split (flash-decoding): each
// part returns a partial (max, sum, unnormalized output) and `attention_merge` combines them,
// so a single decode step spreads over all threads.
// Cost: O((end - begin) * head_dim * G) FMAs per call; reads (end - begin) * 2 * head_dim
// elements — at long context this read is the whole cost (memory-bound).
#pragma once

#include <cstdint>

#include "kv/paged_kv_view.h"

namespace hs::cpu {

using hs::AttnPartial;  // kv/paged_kv_view.h
using hs::PagedKvView;

// q: [G][head_dim] (the query heads sharing `kv_head`). Writes `part` for keys [begin, end).
void attention_partial(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin,
                       int32_t end, float scale, AttnPartial part);

// Combines n_parts partials (each for the same G heads) into out [G][head_dim].
void attention_merge(const AttnPartial* parts, int n_parts, int n_q, int head_dim, float* out);

// Convenience: the whole range in one part. out: [G][head_dim].
void attention_paged(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin,
                     int32_t end, float scale, float* out);

// Log softmax mass of whole chunks of C = chunk_tokens keys (C divides the page size), from the
// K rows alone: out [n_chunks][n_q], out[i][g] = log Σ_{t in chunk chunk_ids[i], t < n_tokens}
// exp(scale · q_g·k_t), -inf for a chunk past n_tokens. Reads n_chunks · C · head_dim K
// elements, no V (the exact rerank and the oracle selector, sparse/exact_chunk_mass.h).
void chunk_log_mass(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* chunk_ids,
                    int n_chunks, int chunk_tokens, int32_t n_tokens, float scale, float* out);

// out [n_tokens] = scale · q · k_t for every key t < n_tokens of one query head q [head_dim]
// (exact float logits; the recall measurements of backend/cpu_sparse_attention.h).
void key_scores(const float* q, const PagedKvView& kv, int kv_head, int32_t n_tokens, float scale, float* out);

// Prefill: T consecutive query tokens of one sequence (positions pos0 .. pos0 + T - 1), the
// G query heads of one kv head, causal (and windowed) over that sequence's keys [first_i,
// pos_i]. Token i's rows are q + rows[i] * q_stride ([G][head_dim]) and the same in out;
// out gets the normalized attention output. Blocked (attention_tile_kernel.h): each key is
// read once per tile, scores are broadcast FMAs, no per-dot horizontal sums.
struct PrefillTile {
  const float* q = nullptr;
  int64_t q_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  const int32_t* rows = nullptr;  // [n_tokens] batch rows of the tile's tokens
  int n_tokens = 0;
  int32_t pos0 = 0;
  int window = 0;  // > 0: key j visible to position p iff p - j < window
};
// The most tokens one tile may hold for n_q query heads of head_dim; 0 when the tile kernel
// does not take this shape (use attention_partial per token).
int attention_tile_max_tokens(int n_q, int head_dim);
void attention_prefill_tile(const PrefillTile& tile, int n_q, const PagedKvView& kv, int kv_head, float scale);

// The SIMD level the attention kernel dispatched to ("avx512", "avx2", "scalar").
const char* attention_simd_level();

}  // namespace hs::cpu
