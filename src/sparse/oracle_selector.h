// sparse/oracle_selector.h — the best selection of its size, from the exact keys (an eval
// ceiling, not a product path).
//
// Ranks chunks by the same group-mass rule as the sketch selector with the mass score
// (SparseConfig::chunk_mass_scale, group_mass_ranking) but from exact logits: per query head
// g and chunk c, L_gc = log Σ_{t∈c} exp(α q_g·k_t) read from the KV pages
// (exact_chunk_mass.h). Recall is a sum over chunks, so this is the
// selection of that size that keeps the most softmax mass (the "mass oracle" of the eval)
// and it runs in the decode path (`--sparse oracle`), so the eval can show what any selector
// of that budget could reach. It reads every key each step (dense cost) and needs a plain
// KV dtype (f32 / f16).
#pragma once

#include <memory>

#include "kv/kv_cache.h"
#include "sparse/selector.h"
#include "sparse/sparse_kernels.h"

namespace hs {

class OracleSelector final : public ChunkSelector {
 public:
  // attn_scale: the model's attention scale (α); cfg.chunk_mass_scale is ignored.
  static Result<std::unique_ptr<OracleSelector>> create(const SparseKernels& k, const KvCache& kv, float attn_scale,
                                                        const SparseConfig& cfg);
  const char* name() const override { return "oracle"; }
  int prep_floats(int n_q) const override { return n_q; }       // log mass of sinks and window [G]
  void prepare(const SelectInput& in, float* prep) const override;
  int score_stride(int n_q) const override { return n_q; }      // raw: exact log masses [n_cand][G]
  void chunk_scores(const SelectInput& in, const float* prep, int32_t chunk_begin, int32_t chunk_end,
                    float* out) const override;
  void finish_scores(const SelectInput& in, const float* prep, const float* raw, int32_t n_cand,
                     float* ranking) const override;

 private:
  OracleSelector(const SparseKernels& k, const KvCache& kv, float attn_scale, const SparseConfig& cfg)
      : ChunkSelector(cfg), k_(k), kv_(kv), scale_(attn_scale) {}
  const SparseKernels& k_;
  const KvCache& kv_;
  float scale_;
};

}  // namespace hs
