// model/rank_group.h — the ranks of a tensor-parallel model (docs/tensor-parallel.md), shared by
// both forward passes (model/decoder.h, model/hybrid_decoder.h): each rank's backend (GPU r or a
// CPU backend), the communicator between them, each rank's KvCache of its kv heads under the
// engine's block ids, its sparse runtime (its heads of the model's basis over its pages), its
// copy of the step's plan, and the step itself (begin on every rank, the body, end on every rank,
// the ranks' sparse counters folded into the model's). A decoder's rank type derives from RankBase
// and adds its weights and workspace. With one rank there is no communicator, no second cache and
// no copied plan: the rank runs on the engine's cache and its step may be captured as a graph.
// Cost: per rank, its share of the weights and pages; per step, a plan copy per rank (N > 1).
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "kv/kv_cache.h"
#include "model/forward_plan.h"
#include "model/tensor_parallel.h"
#include "model/workspace.h"
#include "sparse/sparse_runtime.h"

namespace hs {

// What every decoder's rank holds.
struct RankBase {
  TpSlice slice;
  std::unique_ptr<Backend> backend;
  // N > 1 with sparse attention: the model runtime's mode, config and this rank's heads of its
  // basis over this rank's pages (its counters are folded into the model's runtime each step).
  std::unique_ptr<SparseRuntime> sparse;
  std::unique_ptr<KvCache> kv;         // N > 1: pages of this rank's kv heads under the engine's block ids
  const KvCache* kv_source = nullptr;  // the engine cache `kv` mirrors
  ForwardPlan plan;                    // N > 1: the step's plan on `kv`
};

namespace rank_detail {
// R's KvCache mirroring `kv` (its kv heads, the same block count) and, with `sparse`, its runtime
// over it; remade when the engine cache changed or (rebuild_sparse) the model's runtime did.
Status ensure(RankBase& R, const KvCache& kv, const SparseRuntime* sparse, bool rebuild_sparse,
              const std::vector<bool>& sparse_layers, float attn_scale);
// R's sparse counters added into `model` (and reset); R's device bytes added to sketch / hot.
void fold_stats(RankBase& R, SparseRuntime& model, int64_t& sketch, int64_t& hot);
// What a split model refuses of the sparse configuration (n_ranks > 1).
Status check_sparse(int n_ranks, bool device_tier, const SparseRuntime* sparse, int n_kv_heads);
}  // namespace rank_detail

template <class R>
class RankGroup {
  static_assert(std::is_base_of_v<RankBase, R>, "a rank derives from RankBase");

 public:
  // One rank per slice: backend `device` number r, made current, then prepare(rank) (its weights);
  // a communicator between them when there are several.
  Status create(Device device, const std::vector<TpSlice>& slices, const std::function<Status(R&)>& prepare) {
    ranks_.clear();
    ranks_.resize(slices.size());
    std::vector<Backend*> backends;
    for (size_t r = 0; r < slices.size(); ++r) {
      R& rank = ranks_[r];
      rank.slice = slices[r];
      HS_ASSIGN_OR_RETURN(rank.backend, make_backend(device, static_cast<int>(r)));
      HS_RETURN_IF_ERROR(rank.backend->make_current());
      HS_RETURN_IF_ERROR(prepare(rank));
      backends.push_back(rank.backend.get());
    }
    if (backends.size() > 1) {
      HS_ASSIGN_OR_RETURN(comm_, make_communicator(backends));
    }
    return Status::ok();
  }

  int size() const { return static_cast<int>(ranks_.size()); }
  bool split() const { return ranks_.size() > 1; }
  R& operator[](int r) { return ranks_[static_cast<size_t>(r)]; }
  const R& operator[](int r) const { return ranks_[static_cast<size_t>(r)]; }
  R& front() { return ranks_.front(); }
  const R& front() const { return ranks_.front(); }
  std::vector<R>& ranks() { return ranks_; }

  // R's device made current when there are several ranks (one rank never switches).
  Status make_current(R& rank) { return split() ? rank.backend->make_current() : Status::ok(); }
  // fn(rank) for every rank in order, each rank's device made current first (a template, not a
  // std::function: it runs several times per layer of every step).
  template <class F>
  Status each(F&& fn) {
    for (R& rank : ranks_) {
      HS_RETURN_IF_ERROR(make_current(rank));
      HS_RETURN_IF_ERROR(fn(rank));
    }
    return Status::ok();
  }

  // N > 1: every rank's KvCache and, with sparse attention, its runtime, (re)made when the engine
  // cache or the model's runtime changed. sparse_layers() gives the model's sparse KV layers (called
  // only with several ranks: one rank's decode step builds nothing).
  template <class Layers>
  Status ensure(const KvCache& kv, const SparseRuntime* sparse, const Layers& sparse_layers, float attn_scale) {
    if (!split()) return Status::ok();
    const std::vector<bool> layers = sparse_layers();
    for (R& rank : ranks_) {
      HS_RETURN_IF_ERROR(make_current(rank));
      HS_RETURN_IF_ERROR(rank_detail::ensure(rank, kv, sparse, sparse_of_ != sparse, layers, attn_scale));
    }
    sparse_of_ = sparse;
    return Status::ok();
  }
  // N > 1: every rank's sketches of keys [0, n_tokens) of `seq` rebuilt from its own pages.
  template <class Layers>
  Status rebuild_sparse_metadata(const KvCache& kv, const SeqKv& seq, int32_t n_tokens, const SparseRuntime* sparse,
                                 const Layers& sparse_layers, float attn_scale) {
    HS_RETURN_IF_ERROR(ensure(kv, sparse, sparse_layers, attn_scale));
    return each([&](R& rank) { return rank.backend->rebuild_sparse_metadata(*rank.kv, seq, n_tokens); });
  }
  // The host tier's settings on every rank's backend (each rank's pages in its own pinned memory).
  Status set_kv_tier(const Backend::KvTier& t) {
    return each([&](R& rank) { return rank.backend->set_kv_tier(t); });
  }
  // The step's plan for rank R: `plan` itself with one rank, else R's copy on its cache.
  const ForwardPlan& plan_of(const R& rank, const ForwardPlan& plan) const { return split() ? rank.plan : plan; }
  // N > 1: each rank's copy of `plan` over its own cache (after ensure).
  template <class Layers>
  Status copy_plans(const KvCache& kv, const ForwardPlan& plan, const SparseRuntime* sparse,
                    const Layers& sparse_layers, float attn_scale) {
    if (!split()) return Status::ok();
    HS_RETURN_IF_ERROR(ensure(kv, sparse, sparse_layers, attn_scale));
    for (R& rank : ranks_) {
      rank.plan = plan;
      rank.plan.kv = rank.kv.get();
    }
    return Status::ok();
  }

  // One step: begin_step on every rank, the body (one rank: through run_step, which may capture
  // it as a graph; several: eagerly, the ranks in lockstep), end_step on every rank however the
  // body ended, then the ranks' sparse counters into `model_sparse`.
  template <class F>
  Status step(const ForwardPlan& plan, SparseRuntime* model_sparse, F&& body) {
    HS_RETURN_IF_ERROR(each([&](R& rank) { return rank.backend->begin_step(plan_of(rank, plan)); }));
    Status st = split() ? body() : front().backend->run_step(body);
    Status end = Status::ok();
    for (R& rank : ranks_) {
      Status e = make_current(rank);
      if (e.is_ok()) e = rank.backend->end_step();
      if (end.is_ok()) end = e;
    }
    fold_stats(model_sparse);
    HS_RETURN_IF_ERROR(st);
    return end;
  }
  // N > 1: the ranks' sparse counters added to the model's runtime (and reset).
  void fold_stats(SparseRuntime* model_sparse) {
    if (!split() || !model_sparse) return;
    int64_t sketch = 0, hot = 0;
    for (R& rank : ranks_) rank_detail::fold_stats(rank, *model_sparse, sketch, hot);
    model_sparse->set_device_bytes(sketch, hot);
  }

  // Σ over the ranks of part(rank) (the same shape on each); nothing with one rank.
  template <class Part>
  Status all_reduce(Part&& part) {
    if (!split()) return Status::ok();
    std::vector<Tensor> parts;
    for (R& rank : ranks_) parts.push_back(part(rank));
    return comm_->all_reduce_sum(parts);
  }
  // The ranks' logits shares part(rank) [n_out][rank n_vocab] side by side into gathered()'s
  // logits on rank 0 (made current after); with one rank, rank 0's own rows.
  template <class Part>
  Result<Tensor> gather_logits(int64_t n_out, Part&& part) {
    if (!split()) return part(front());
    std::vector<Tensor> parts;
    for (R& rank : ranks_) parts.push_back(part(rank));
    const Tensor lg = gathered_.logits.slice_rows(0, n_out);
    HS_RETURN_IF_ERROR(comm_->gather_columns(parts, lg));
    HS_RETURN_IF_ERROR(make_current(front()));
    return lg;
  }
  // N > 1: room for n_out gathered rows of n_vocab on rank 0.
  Status reserve_gathered(int64_t n_embd, int64_t n_vocab, int64_t rows) {
    if (!split()) return Status::ok();
    HS_RETURN_IF_ERROR(make_current(front()));
    return gathered_.reserve(*front().backend, n_embd, n_vocab, rows);
  }
  LogitRows& gathered() { return gathered_; }

 private:
  std::vector<R> ranks_;
  std::unique_ptr<Communicator> comm_;  // N > 1
  LogitRows gathered_;                  // N > 1: [n_out][n_vocab] on rank 0, the ranks' shares side by side
  const SparseRuntime* sparse_of_ = nullptr;  // N > 1: the model runtime the ranks' runtimes copy
};

}  // namespace hs
