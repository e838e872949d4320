// backend/cpu/sketch_score.h — score past tokens through their key sketches (sparse attention).
//
// Sketch pages parallel the KV pages (same block ids, P tokens): per layer, page b holds
// [n_kv_heads][P][rank] sketch values (f32 or f16), s_t = Bᵀ(k_t − mu) (sparse/sketch_basis.h).
// For the G query heads of one kv head, projected as q̂_g = Bᵀ q_g with bias_g = q_g · mu, the
// score of token t is the GQA max
//   score(t) = max_g (bias_g + q̂_g · s_t),
// an estimate of the largest attention logit (before scaling) any head of the group gives t.
// Kernels are compiled per ISA (sketch_score_avx2.cpp, _avx512.cpp) and chosen at run time.
// The fixed-rank path (rank 16/32/64/128) converts a page's rows once, computes each head's
// 16 dot products as 16 vectors and reduces them with one transpose-add tree.
// Cost per token: rank · 2 (f16) bytes read, G · rank FMAs. The functions are pure over a key
// range, so callers split long ranges across threads.
#pragma once

#include <cstdint>

namespace hs::cpu {

struct PagedSketchView {
  const void* layer_base = nullptr;  // page b starts at layer_base + b * page_elems elements
  int64_t page_elems = 0;            // n_kv_heads * P * rank
  const int32_t* blocks = nullptr;   // block table of the sequence (the KV cache's)
  int page_tokens = 16;              // P
  int rank = 0;
  bool f16 = false;                  // elements are IEEE half (else float32)
};

// q̂ [G][rank] = Bᵀ q_g and bias [G] = q_g · mu for q [G][head_dim], B [head_dim][rank], mu [head_dim].
void sketch_project_queries(const float* q, int n_q, const float* basis, const float* mean, int head_dim, int rank,
                            float* q_hat, float* bias);

// scores [end - begin]: score(t) for t in [begin, end).
void sketch_score(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                  int32_t begin, int32_t end, float* scores);

// chunk_max [chunk_end - chunk_begin]: max of score(t) over the tokens of each chunk of
// `chunk_tokens` (C divides P) tokens, chunks [chunk_begin, chunk_end), tokens clipped to n_tokens.
void sketch_chunk_max(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                      int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end, float* chunk_max);

// The SIMD level dispatched to ("avx512", "avx2", "scalar").
const char* sketch_score_simd_level();

}  // namespace hs::cpu
