// backend/cpu/sketch_score.h — score past tokens through their key sketches (sparse attention).
//
// Sketch pages parallel the KV pages (same block ids, P tokens). Per layer and kv head, page
// b is one head block at head_base(h) + b · block_bytes (the store keeps each head's blocks
// together, so a head's scan over a sequence's mostly consecutive pages streams); a head
// block stores the sketches s_t = Bᵀ(k_t − mu) (sparse/sketch_basis.h)
// of the page's P tokens *dimension-major*:
//   f32 / f16:  [rank][P] values                   (value (d, t) at d·P + t)
//   int8:       [rank][P] int8, then [P] f16 scales  (s_t[d] = scale_t · q8[d][t], per-token absmax)
// For the G query heads of one kv head, projected as q̂_g = Aᵀ q_g with bias_g = q_g · mu, the
// score of token t is the GQA max
//   score(t) = max_g (bias_g + q̂_g · s_t),
// an estimate of the largest attention logit (before scaling) any head of the group gives t.
// The token-minor layout lets the kernel score 16 tokens per vector: per rank dimension one
// 16-token load (converted to float once) and G broadcast FMAs, with no horizontal sums; the
// chunk max is then a max over lanes. Kernels are compiled per ISA (sketch_score_avx2.cpp,
// _avx512.cpp) and chosen at run time; pages whose P is not a multiple of 16 take a scalar path.
// Cost per token: rank · elem bytes read (int8: + 2 B of scale), G · rank FMAs. The functions
// are pure over a key range, so callers split long ranges across threads.
#pragma once

#include <cstdint>

#include "sparse/sketch_layout.h"

namespace hs::cpu {

using hs::PagedSketchView;  // sparse/sketch_layout.h
using hs::SketchElem;
using hs::sketch_elem_name;
using hs::sketch_head_bytes;

// Store sketch s [rank] as token `lane` (< P) of a head block; read it back as floats.
void sketch_encode(SketchElem e, const float* s, int rank, int page_tokens, int lane, uint8_t* head_block);
void sketch_decode(SketchElem e, const uint8_t* head_block, int rank, int page_tokens, int lane, float* s);

// q̂ [G][rank] = Aᵀ q_g and bias [G] = q_g · mu for q [G][head_dim], A [head_dim][rank], mu [head_dim].
void sketch_project_queries(const float* q, int n_q, const float* basis, const float* mean, int head_dim, int rank,
                            float* q_hat, float* bias);

// scores [end - begin]: score(t) for t in [begin, end).
void sketch_score(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                  int32_t begin, int32_t end, float* scores);

// chunk_max [chunk_end - chunk_begin]: max of score(t) over the tokens of each chunk of
// `chunk_tokens` (C divides P) tokens, chunks [chunk_begin, chunk_end), tokens clipped to n_tokens.
void sketch_chunk_max(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                      int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end, float* chunk_max);

// out [chunk_end - chunk_begin][n_q]: per chunk and query head g, the log of the chunk's
// unnormalised softmax mass, log Σ_t exp(α · (bias_g + q̂_g · s_t)) (α = the attention scale;
// computed as α·max + log Σ exp(α(score − max)) with a fast log, abs error < 1e-4). Chunks
// past n_tokens get −inf. The group-mass chunk score (sparse/selector.h) normalises these per
// head and sums over the group.
void sketch_chunk_head_mass(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                            int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end, float alpha,
                            float* out);

// The SIMD level dispatched to ("avx512", "avx2", "scalar").
const char* sketch_score_simd_level();

}  // namespace hs::cpu
