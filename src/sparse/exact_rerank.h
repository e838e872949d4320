// sparse/exact_rerank.h — second stage of a two-stage selection: exact scores for a shortlist.
//
// With --sparse-rerank R (R ≥ 2) the selector (sketch or Quest) picks a shortlist of
// R × budget tokens of candidate chunks instead of budget; the reranker then reads the
// shortlisted chunks' keys, ranks them by the oracle's rule — the exact group mass
// Σ_g exp(L_gc − lse_g), L_gc the exact log mass of chunk c for query head g
// (exact_chunk_mass.h), lse_g head g's log mass over the sinks, the window and the shortlist —
// and keeps the top budget, plus sinks and window, by the same top-k rule as every selector
// (select_top_chunks). So the final selection is the oracle's pick restricted to the
// shortlist: equal to the oracle whenever the shortlist holds the oracle's chunks.
// Cost per (token, layer, kv head): the K rows of the shortlist and the forced chunks
// (≈ (R × budget + S + W) × head_dim elements) and the same number of dot products per query
// head — R × budget extra key reads, against the n_tokens of dense attention. Needs a plain
// KV dtype (f32 / f16) for now.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "sparse/sparse_kernels.h"
#include "sparse/selector.h"

namespace hs {

// --sparse-rerank auto (the default): the factor the two-stage selection runs with when it is
// cheap. The rerank reads R × budget key rows per full-attention (layer, kv head) per decode
// step, with a plain (f32 / f16) KV dtype only. auto takes R = kAutoRerankFactor = 8 when those
// bytes are at most 1/4 of the weight bytes the step reads anyway, else no rerank. (Until session
// 21 it was R = 4 at 1/8: the same bytes, so the same models.)
// - Qwen2.5-Coder-0.5B: 8 × 2048 × 128 B × 24 layers × 2 heads = 101 MB against 491 MB → on.
//   Measured at 32K (docs/benchmarks.md, session 21): same answers as dense 31/32 and 30/32 on
//   the two code haystacks, against 28 and 26 at R = 4. It costs decode speed on the CPU: 11.8
//   against 14.6 t/s at 32K.
// - Gemma 3 270M: 8 × 2048 × 512 B × 3 layers = 25 MB against 253 MB → on.
// - SmolLM2-135M: 8 × 2048 × 128 B × 30 layers × 3 heads = 189 MB against 98 MB → off (its sparse
//   step reads far less than that: the rerank would cost several times its speed).
// A larger shortlist only adds candidates for the exact ranking, so its recall is never lower.
inline constexpr int32_t kAutoRerankFactor = 8;
int32_t auto_rerank_factor(int64_t weight_bytes, int64_t full_layer_heads, int64_t k_row_bytes, int32_t budget_tokens,
                           bool plain_kv);

class ExactReranker {
 public:
  static constexpr int64_t kRerankChunksPerTask = 64;  // shortlisted chunks per scoring task
  // cfg: the final selection's config (its budget_tokens is what is kept); factor ≥ 2.
  static Result<std::unique_ptr<ExactReranker>> create(const SparseKernels& k, const KvCache& kv, float attn_scale,
                                                       const SparseConfig& cfg, int factor);
  int factor() const { return factor_; }
  // The config the first-stage selector runs with: the shortlist budget, factor × budget.
  SparseConfig shortlist_config() const;

  // chunks: in, the first stage's selection (ascending: sinks, shortlist, window); out, the
  // final selection. Returns the key rows read (for the byte counters; 0 when the shortlist
  // already fits the budget). `pool` (optional) splits the exact scoring of long shortlists.
  int64_t rerank(const SelectInput& in, std::vector<int32_t>& chunks, ThreadPool* pool = nullptr) const;

  // rerank() in three steps, so a batch can score every selection's shortlist in one pass
  // over the pool: plan (split forced / shortlisted chunks; false: nothing to rerank), score
  // shortlisted chunks [b, e) (any thread, disjoint ranges), finish (rank, select, rows read).
  struct Work {
    bool active = false;                     // plan() found chunks to drop
    std::vector<int32_t> forced, shortlist;  // chunk ids
    std::vector<float> raw;                  // [shortlist][G] exact log masses
    std::vector<float> forced_raw;           // [forced][G]
    std::vector<float> fixed;                // [G] log mass of sinks + window
    std::vector<float> ranking;              // [shortlist] group mass
    std::vector<float> scores;               // [candidates] ranking, -inf outside the shortlist
  };
  bool plan(const SelectInput& in, std::span<const int32_t> chunks, Work& w) const;  // sets w.active
  void score(const SelectInput& in, Work& w, int64_t b, int64_t e) const;
  int64_t finish(const SelectInput& in, Work& w, std::vector<int32_t>& chunks) const;

 private:
  ExactReranker(const SparseKernels& k, const KvCache& kv, float attn_scale, const SparseConfig& cfg, int factor)
      : k_(k), kv_(kv), scale_(attn_scale), cfg_(cfg), factor_(factor) {}
  const SparseKernels& k_;
  const KvCache& kv_;
  float scale_;
  SparseConfig cfg_;
  int factor_;
};

}  // namespace hs
