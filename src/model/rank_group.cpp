// model/rank_group.cpp — the rank group's per-rank caches, runtimes and counters (rank_group.h).
#include "model/rank_group.h"

namespace hs::rank_detail {

Status ensure(RankBase& R, const KvCache& kv, const SparseRuntime* sparse, bool rebuild_sparse,
              const std::vector<bool>& sparse_layers, float attn_scale) {
  const bool stale_kv = !R.kv || R.kv_source != &kv || R.kv->pool().n_blocks() != kv.pool().n_blocks() ||
                        R.kv->geometry().dtype != kv.geometry().dtype ||
                        R.kv->geometry().page_tokens != kv.geometry().page_tokens;
  if (!stale_kv && !rebuild_sparse) return Status::ok();
  // The rank's runtime reads its pages: detached first, remade over the (new) pages.
  HS_RETURN_IF_ERROR(R.backend->set_sparse(nullptr, nullptr));
  R.sparse.reset();
  if (stale_kv) {
    KvGeometry g = kv.geometry();
    g.n_kv_heads = R.slice.n_kv_heads;
    R.kv = std::make_unique<KvCache>(g, kv.pool().n_blocks(), /*max_leases=*/1,
                                     /*host_pages=*/R.backend->device() == Device::kCpu);
    R.kv_source = &kv;
  }
  if (!sparse) return Status::ok();
  const KvGeometry& g = R.kv->geometry();
  SparseRuntime::Geometry sg{g.n_layer, g.n_kv_heads, g.head_dim, g.page_tokens, kv.pool().n_blocks(),
                             kv_token_bytes(g.dtype, g.head_dim), sparse_layers};
  std::unique_ptr<SketchBasis> basis;
  if (sparse->basis()) basis = std::make_unique<SketchBasis>(sparse->basis()->heads(R.slice.kv_head0, R.slice.n_kv_heads));
  HS_ASSIGN_OR_RETURN(R.sparse, SparseRuntime::create(sparse->mode(), sparse->config(), sg, std::move(basis),
                                                      R.backend->host_sparse_kernels(), R.kv.get(), attn_scale));
  R.sparse->set_measure_recall(false);
  return R.backend->set_sparse(R.sparse.get(), nullptr);
}

void fold_stats(RankBase& R, SparseRuntime& model, int64_t& sketch, int64_t& hot) {
  if (!R.sparse) return;
  model.add_stats(R.sparse->stats());
  R.sparse->reset_stats();
  sketch += R.sparse->device_sketch_bytes();
  hot += R.sparse->device_hot_set_bytes();
}

// Several ranks: each gets a runtime of its own kv heads at the next step (ensure); a rank selects
// for its kv heads with the query heads it holds, which are all of each head's group only when no
// kv head is replicated.
Status check_sparse(int n_ranks, bool device_tier, const SparseRuntime* sparse, int n_kv_heads) {
  if (device_tier)
    return make_error(StatusCode::kUnsupported, "the CPU device tier (--device-kv-budget) does not run with "
                      "--tensor-parallel-size {} (each rank reads its own pages)", n_ranks);
  if (sparse && n_kv_heads < n_ranks)
    return make_error(StatusCode::kUnsupported,
                      "sparse attention with --tensor-parallel-size {} over {} kv heads: a replicated kv head's "
                      "selection would see only part of its query group (use a split of at most {} ranks)",
                      n_ranks, n_kv_heads, n_kv_heads);
  return Status::ok();
}

}  // namespace hs::rank_detail
