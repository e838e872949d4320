// sparse/sketch_store.h — per-token key sketches in pages parallel to the KV pages.
//
// For each layer and kv head, page b (the same block id the KV cache gives the sequence) is
// one block (a head's blocks are kept together: [n_kv_heads][n_blocks][block]) with the sketches s_t = Bᵀ(k_t − mu) of the page's P tokens, dimension-major
// (f32, f16 or int8 with a per-token scale; layout in sketch_layout.h),
// so a sequence's block table addresses its sketches exactly as its KV. The store owns only
// bytes; ids and ref counts stay with the KV cache's BlockPool (a page shared through the
// prefix cache shares its sketches too). This is the device-tier structure: every past token
// of every sequence keeps its sketch there while the KV itself may live only in the host tier.
// Cost: rank · elem bytes per token per kv head per layer (f16, rank 64: 128 B; int8: 66 B); write() is
// head_dim · rank FMAs; scoring reads rank · elem bytes and does G · rank FMAs per token.
// Not thread-safe for writes to the same page; reads and scoring are const and may run
// concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "sparse/sketch_basis.h"
#include "sparse/sketch_layout.h"
#include "sparse/sparse_kernels.h"

namespace hs {

struct SketchGeometry {
  int n_layer = 0;
  int n_kv_heads = 0;
  int rank = 0;
  int page_tokens = 16;  // P, as the KV cache
  SketchElem elem = SketchElem::kF16;
  int64_t head_bytes() const { return sketch_head_bytes(elem, rank, page_tokens); }
  int64_t page_bytes() const { return n_kv_heads * head_bytes(); }
  double bytes_per_token() const { return static_cast<double>(head_bytes()) / page_tokens; }  // per kv head
};

class SketchStore {
 public:
  // `kernels` and `basis` must outlive the store. n_blocks: the KV cache's pool size (same ids).
  // residual_z > 0 adds one sketch dimension (rank = basis rank + 1): the norm of the key's
  // residual ‖(k − mu) − A s‖, the part the rank-r score cannot see, and project() gives it the
  // query coordinate z · ‖q_g‖ / √head_dim, so every score becomes an upper confidence bound
  // q_g·mu + q̂_g·s + z σ_gt, σ_gt = ‖q_g‖ ‖r_t‖ / √head_dim being the std of the missed part
  // q_g·r_t if r_t's direction were random (--sparse-residual Z).
  SketchStore(const SparseKernels& kernels, const SketchBasis& basis, int page_tokens, int32_t n_blocks,
              SketchElem elem = SketchElem::kF16, float residual_z = 0.0f);

  const SketchGeometry& geometry() const { return g_; }
  const SketchBasis& basis() const { return basis_; }

  // Project key k [head_dim] of (layer, kv head, pos) and store its sketch. The page of `pos`
  // must be in `blocks`. Layers without a basis are ignored.
  void write(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* k);
  // The stored sketch [rank] as floats (tests).
  void read(std::span<const int32_t> blocks, int layer, int head, int32_t pos, float* s) const;

  PagedSketchView view(int layer, std::span<const int32_t> blocks) const;

  // Per-query projection: q̂ [G][rank], bias [G] for q [G][head_dim] (sparse_kernels.h).
  void project(int layer, int head, const float* q, int n_q, float* q_hat, float* bias) const;

  // scores [end - begin] = max_g (q_g·mu + q̂_g·s_t) for t in [begin, end).
  void score_tokens(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q, int32_t begin,
                    int32_t end, float* scores) const;
  // chunk_max [chunk_end - chunk_begin]: the max of the token scores of each chunk of C tokens
  // (tokens past n_tokens excluded). With a pool, long ranges are split over its threads (from
  // inside a pool job it runs on the calling thread).
  void chunk_max_scores(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q,
                        int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end, float* chunk_max,
                        ThreadPool* pool = nullptr) const;
  // The same with the queries already projected (project()): q_hat [G][rank], bias [G].
  void chunk_max_scores_projected(std::span<const int32_t> blocks, int layer, int head, const float* q_hat,
                                  const float* bias, int n_q, int32_t n_tokens, int chunk_tokens, int32_t chunk_begin,
                                  int32_t chunk_end, float* chunk_max, ThreadPool* pool = nullptr) const;
  // out [chunk_end - chunk_begin][n_q]: per chunk and query head, the log of the chunk's
  // unnormalised softmax mass at attention scale alpha (SparseKernels::sketch_chunk_head_mass).
  void chunk_head_mass_projected(std::span<const int32_t> blocks, int layer, int head, const float* q_hat,
                                 const float* bias, int n_q, int32_t n_tokens, int chunk_tokens, int32_t chunk_begin,
                                 int32_t chunk_end, float alpha, float* out) const;

 private:
  // The head block of (layer, head) in the page holding `pos`.
  uint8_t* head_block(std::span<const int32_t> blocks, int layer, int head, int32_t pos) const;

  const SparseKernels& k_;
  const SketchBasis& basis_;
  SketchGeometry g_;
  float residual_z_ = 0.0f;  // > 0: the last sketch dimension holds the residual norm
  int32_t n_blocks_ = 0;
  std::vector<std::vector<uint8_t>> layer_data_;  // [n_layer][n_kv_heads][n_blocks][head_bytes]
};

}  // namespace hs
