// sparse/sparse_kernels.h — the kernels the host sparse path runs, as an op table its backend
// supplies (Backend::host_sparse_kernels; the CPU backend's is backend/cpu_sparse_kernels.h).
//
// sparse/ owns the policy (what to score, which chunks to keep, the counters) and the formats
// (sketch_layout.h, kv/paged_kv_view.h); it calls no kernel directly. A backend that runs its
// selection on its own device (CUDA: backend/cuda/sparse_select.cu) supplies no table and the
// runtime only keeps the configuration and counters for it. Semantics of each op are those of
// the CPU kernels named in the comments (backend/cpu/sketch_score.h, backend/cpu/attention.h).
// Cost: one virtual call per (layer, kv head, key range); the work is in the kernels.
#pragma once

#include <cstdint>

#include "kv/paged_kv_view.h"
#include "sparse/sketch_layout.h"

namespace hs {

class SparseKernels {
 public:
  virtual ~SparseKernels() = default;

  // Store sketch s [rank] as token `lane` (< P) of a head block; read it back as floats.
  virtual void sketch_encode(SketchElem e, const float* s, int rank, int page_tokens, int lane,
                             uint8_t* head_block) const = 0;
  virtual void sketch_decode(SketchElem e, const uint8_t* head_block, int rank, int page_tokens, int lane,
                             float* s) const = 0;
  // q̂ [G][rank] = Aᵀ q_g and bias [G] = q_g · mu for q [G][head_dim], A [head_dim][rank], mu [head_dim].
  virtual void sketch_project_queries(const float* q, int n_q, const float* basis, const float* mean, int head_dim,
                                      int rank, float* q_hat, float* bias) const = 0;
  // scores [end - begin]: max_g (bias_g + q̂_g · s_t) for t in [begin, end).
  virtual void sketch_score(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                            int32_t begin, int32_t end, float* scores) const = 0;
  // chunk_max [chunk_end - chunk_begin]: the max token score of each chunk of chunk_tokens tokens.
  virtual void sketch_chunk_max(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v,
                                int kv_head, int32_t n_tokens, int chunk_tokens, int32_t chunk_begin,
                                int32_t chunk_end, float* chunk_max) const = 0;
  // out [chunk_end - chunk_begin][n_q]: log Σ_t exp(α · score_g(t)) per chunk and query head.
  virtual void sketch_chunk_head_mass(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v,
                                      int kv_head, int32_t n_tokens, int chunk_tokens, int32_t chunk_begin,
                                      int32_t chunk_end, float alpha, float* out) const = 0;
  // out [n_chunks][n_q]: exact log Σ_{t in chunk} exp(scale · q_g·k_t) from the K rows.
  virtual void chunk_log_mass(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* chunk_ids,
                              int n_chunks, int chunk_tokens, int32_t n_tokens, float scale, float* out) const = 0;
};

}  // namespace hs
