// sparse/sparse_runtime.cpp — see sparse_runtime.h.
#include "sparse/sparse_runtime.h"

#include <cassert>
#include <cmath>
#include <random>

#include "sparse/oracle_selector.h"
#include "sparse/tail_estimate.h"

namespace hs {

const char* sparse_mode_name(SparseMode m) {
  switch (m) {
    case SparseMode::kOff: return "off";
    case SparseMode::kSketch: return "sketch";
    case SparseMode::kQuest: return "quest";
    case SparseMode::kOracle: return "oracle";
  }
  return "?";
}

Result<SparseMode> parse_sparse_mode(std::string_view s) {
  if (s == "off" || s == "dense") return SparseMode::kOff;
  if (s == "sketch") return SparseMode::kSketch;
  if (s == "quest") return SparseMode::kQuest;
  if (s == "oracle") return SparseMode::kOracle;
  return make_error(StatusCode::kInvalidArgument, "unknown sparse mode '{}' (off, sketch, quest, oracle)", s);
}

Result<std::unique_ptr<SparseRuntime>> SparseRuntime::create(SparseMode mode, const SparseConfig& cfg,
                                                             const Geometry& g, std::unique_ptr<SketchBasis> basis,
                                                             const SparseKernels* kernels, const KvCache* kv,
                                                             float attn_scale) {
  if (mode == SparseMode::kOff) return make_error(StatusCode::kInvalidArgument, "sparse runtime: mode is off");
  HS_RETURN_IF_ERROR(cfg.validate(g.page_tokens));
  if (static_cast<int>(g.full_layer.size()) != g.n_layer)
    return make_error(StatusCode::kInvalidArgument, "sparse runtime: full_layer has {} entries for {} layers",
                      g.full_layer.size(), g.n_layer);
  std::unique_ptr<SparseRuntime> rt(new SparseRuntime());
  rt->mode_ = mode;
  rt->cfg_ = cfg;
  rt->g_ = g;
  rt->recall_sum_.assign(g.n_layer, 0.0);
  rt->recall_n_.assign(g.n_layer, 0);
  rt->oracle_sum_.assign(g.n_layer, OracleRecall{0.0, 0.0});
  rt->oracle_n_.assign(g.n_layer, 0);
  if (cfg.tail_estimate && !(mode == SparseMode::kOracle || (mode == SparseMode::kSketch && cfg.chunk_mass_scale > 0.0f)))
    return make_error(StatusCode::kInvalidArgument,
                      "sparse: the estimated tail needs per-chunk log masses: the sketch selector with the mass "
                      "chunk score (--sparse sketch --sparse-chunk-score mass) or the oracle");
  if (cfg.rerank_factor != 0) {
    if (mode == SparseMode::kOracle)
      return make_error(StatusCode::kInvalidArgument, "sparse: the oracle ranks by exact keys already (no --sparse-rerank)");
    if (cfg.tail_estimate)
      return make_error(StatusCode::kInvalidArgument, "sparse: --sparse-rerank and --sparse-tail estimate do not combine");
    // A device backend (no host kernels) reranks on its own device (CUDA: the sketch selector's
    // max-rule shortlist, docs/gpu-sparse.md); the runtime keeps the config.
    if (!kernels && mode != SparseMode::kSketch)
      return make_error(StatusCode::kUnsupported, "sparse: --sparse-rerank on a GPU takes the sketch selector");
    if (kernels) {
      if (!kv) return make_error(StatusCode::kInvalidArgument, "sparse: --sparse-rerank needs the KV cache");
      HS_ASSIGN_OR_RETURN(rt->rerank_, ExactReranker::create(*kernels, *kv, attn_scale, cfg, cfg.rerank_factor));
    }
  }
  if (cfg.tail_estimate && !kernels)
    return make_error(StatusCode::kUnsupported, "sparse: --sparse-tail estimate runs on the host sparse path only");
  if (cfg.page_shortlist != 0) {
    // The host sketch selector emulates the GPU's rule (its recall; no speed-up), max rule only.
    // With the rerank it emulates CUDA's chain: the page bounds keep page_shortlist chunks, their
    // sketch scores the rerank's R x budget shortlist, the exact keys the budget.
    if (mode != SparseMode::kSketch || cfg.chunk_mass_scale > 0.0f)
      return make_error(StatusCode::kUnsupported,
                        "sparse: --sparse-page-shortlist (hierarchical scoring) takes the sketch selector with the max "
                        "chunk score (--sparse sketch --sparse-chunk-score max)");
    const int32_t factor = std::max(1, cfg.rerank_factor);
    if (cfg.page_shortlist < cfg.budget_chunks() * factor)
      return make_error(StatusCode::kInvalidArgument, "sparse: --sparse-page-shortlist {} is below the budget's {} chunks{}",
                        cfg.page_shortlist, cfg.budget_chunks(),
                        factor > 1 ? fmt::format(" x the rerank's {} (its shortlist comes from these pages)", factor)
                                   : std::string());
  }
  // The selector shortlists R × budget with the rerank, the budget itself without.
  const SparseConfig sel_cfg = rt->rerank_ ? rt->rerank_->shortlist_config() : cfg;
  if (cfg.tail_estimate)
    rt->means_ = std::make_unique<ChunkValueMeans>(g.full_layer, g.n_kv_heads, g.head_dim, g.page_tokens,
                                                   cfg.chunk_tokens, g.n_blocks);
  if (mode == SparseMode::kSketch) {
    if (!basis) return make_error(StatusCode::kInvalidArgument, "sparse mode 'sketch' needs a sketch basis (--sketch FILE)");
    HS_RETURN_IF_ERROR(basis->check_geometry(g.n_layer, g.n_kv_heads, g.head_dim, g.full_layer));
    rt->basis_ = std::move(basis);
    if (!kernels) return rt;  // the backend keeps its own sketches and selects on its device
    rt->sketches_ = std::make_unique<SketchStore>(*kernels, *rt->basis_, g.page_tokens, g.n_blocks, cfg.sketch_elem,
                                                   cfg.residual_z);
    HS_ASSIGN_OR_RETURN(auto sel, SketchTopKSelector::create(*rt->sketches_, sel_cfg));
    rt->selector_ = std::move(sel);
  } else if (!kernels) {
    return make_error(StatusCode::kUnsupported, "sparse mode '{}' runs on the host sparse path only",
                      sparse_mode_name(mode));
  } else if (mode == SparseMode::kOracle) {
    if (!kv) return make_error(StatusCode::kInvalidArgument, "sparse mode 'oracle' needs the KV cache");
    HS_ASSIGN_OR_RETURN(auto sel, OracleSelector::create(*kernels, *kv, attn_scale, cfg));
    rt->selector_ = std::move(sel);
  } else {
    rt->quest_ = std::make_unique<QuestStore>(g.n_layer, g.n_kv_heads, g.head_dim, g.page_tokens, cfg.chunk_tokens,
                                              g.n_blocks);
    HS_ASSIGN_OR_RETURN(auto sel, QuestSelector::create(*rt->quest_, sel_cfg));
    rt->selector_ = std::move(sel);
  }
  return rt;
}

void SparseRuntime::on_key(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* k,
                           const float* v) {
  if (!g_.full_layer[layer]) return;
  if (means_ && v) means_->write(blocks, layer, head, pos, v);
  if (sketches_) sketches_->write(blocks, layer, head, pos, k);
  if (quest_) quest_->write(blocks, layer, head, pos, k);
}

void SparseRuntime::select(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q,
                           int32_t n_keys, std::vector<int32_t>& chunks, SelectScratch& scratch,
                           ThreadPool* pool) {
  SelectInput in;
  in.layer = layer;
  in.kv_head = head;
  in.q = q;
  in.n_q = n_q;
  in.blocks = blocks;
  in.n_tokens = n_keys;
  in.scratch = &scratch;
  in.pool = pool;
  assert(selector_ && "select() on a runtime made without host sparse kernels");
  selector_->select(in, chunks);
  count_selection(n_keys, chunks, rerank_ ? rerank_->rerank(in, chunks, pool) : 0);
}

void SparseRuntime::tail_partial(const SelectInput& in, const BatchSelectScratch& scratch, int64_t item,
                                 std::span<const int32_t> selected, AttnPartial part) const {
  const auto [first, last] = candidate_range(in.n_tokens, cfg_);
  const bool scored = item < static_cast<int64_t>(scratch.offset.size()) && scratch.offset[item] >= 0;
  // Not scored: every candidate fit the budget and is selected, so nothing is missing.
  estimate_tail(scored ? scratch.scores.data() + scratch.offset[item] : nullptr, in.n_q, first,
                scored ? last : first, selected, *means_, in.blocks, in.layer, in.kv_head, part);
}

void SparseRuntime::select_batch(std::span<const SelectInput> ins, std::span<std::vector<int32_t>> outs,
                                 BatchSelectScratch& scratch, ThreadPool* pool) {
  assert(selector_ && "select_batch() on a runtime made without host sparse kernels");
  selector_->select_batch(ins, outs, scratch, pool);
  if (!rerank_) {
    for (size_t i = 0; i < ins.size(); ++i) count_selection(ins[i].n_tokens, outs[i]);
    return;
  }
  // Rerank every shortlist: plan each, score all of them in one pass of tasks of at most
  // kRerankChunksPerTask chunks over the pool (a step's few selections still fill every
  // thread), then rank and select each.
  const int64_t n = static_cast<int64_t>(ins.size());
  if (static_cast<int64_t>(rerank_work_.size()) < n) rerank_work_.resize(n);
  rerank_tasks_.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (!rerank_->plan(ins[i], outs[i], rerank_work_[i])) continue;
    const int64_t n_short = static_cast<int64_t>(rerank_work_[i].shortlist.size());
    for (int64_t b = 0; b < n_short; b += ExactReranker::kRerankChunksPerTask)
      rerank_tasks_.push_back({i, b, std::min(n_short, b + ExactReranker::kRerankChunksPerTask)});
  }
  auto run = [&](int64_t tb, int64_t te, int) {
    for (int64_t t = tb; t < te; ++t) {
      const RerankTask& task = rerank_tasks_[t];
      rerank_->score(ins[task.item], rerank_work_[task.item], task.begin, task.end);
    }
  };
  const int64_t n_tasks = static_cast<int64_t>(rerank_tasks_.size());
  if (pool && n_tasks > 1)
    pool->parallel_for(n_tasks, 1, run);
  else
    run(0, n_tasks, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t rows = rerank_work_[i].active ? rerank_->finish(ins[i], rerank_work_[i], outs[i]) : 0;
    count_selection(ins[i].n_tokens, outs[i], rows);
  }
}

void SparseRuntime::count_external(int64_t n_sel, int32_t n_keys, int64_t selected_keys, int64_t scored_tokens,
                                   int64_t sketch_token_bytes, int64_t rerank_rows) {
  sparse_heads_ += n_sel;
  keys_total_ += n_sel * n_keys;
  keys_selected_ += n_sel * selected_keys;
  score_bytes_ += n_sel * (scored_tokens * sketch_token_bytes + rerank_rows * (g_.kv_token_bytes / 2));
  kv_bytes_ += n_sel * selected_keys * g_.kv_token_bytes;
}

void SparseRuntime::count_selection(int32_t n_keys, std::span<const int32_t> chunks, int64_t rerank_rows) {
  const int C = cfg_.chunk_tokens;
  int64_t selected = 0;
  for (int32_t c : chunks) selected += std::min<int64_t>(C, n_keys - static_cast<int64_t>(c) * C);
  // The first stage scores only when its (shortlist) budget does not cover the candidates.
  const SparseConfig& sel_cfg = selector_->config();
  const auto [first, last] = candidate_range(n_keys, sel_cfg);
  const int64_t scored_chunks = candidates_fit(n_keys, sel_cfg) ? 0 : last - first;
  const int64_t per_chunk_bytes = sketches_ ? static_cast<int64_t>(C * sketches_->geometry().bytes_per_token())
                                            : static_cast<int64_t>(2) * g_.head_dim * 4;
  sparse_heads_ += 1;
  keys_total_ += n_keys;
  keys_selected_ += selected;
  score_bytes_ += scored_chunks * per_chunk_bytes + rerank_rows * (g_.kv_token_bytes / 2);  // + K rows reranked
  kv_bytes_ += selected * g_.kv_token_bytes;
}

void SparseRuntime::add_recall(int layer, double recall) {
  std::lock_guard lk(recall_mu_);
  recall_sum_[layer] += recall;
  recall_n_[layer] += 1;
}

std::vector<double> SparseRuntime::recall_per_layer() const {
  std::lock_guard lk(recall_mu_);
  std::vector<double> out(recall_sum_.size(), std::nan(""));
  for (size_t l = 0; l < out.size(); ++l)
    if (recall_n_[l]) out[l] = recall_sum_[l] / static_cast<double>(recall_n_[l]);
  return out;
}

void SparseRuntime::add_oracle_recall(int layer, const OracleRecall& recall) {
  std::lock_guard lk(recall_mu_);
  oracle_sum_[layer].exact_max += recall.exact_max;
  oracle_sum_[layer].mass += recall.mass;
  oracle_n_[layer] += 1;
}

std::vector<OracleRecall> SparseRuntime::oracle_recall_per_layer() const {
  std::lock_guard lk(recall_mu_);
  std::vector<OracleRecall> out(oracle_sum_.size(), OracleRecall{std::nan(""), std::nan("")});
  for (size_t l = 0; l < out.size(); ++l)
    if (oracle_n_[l]) {
      out[l].exact_max = oracle_sum_[l].exact_max / static_cast<double>(oracle_n_[l]);
      out[l].mass = oracle_sum_[l].mass / static_cast<double>(oracle_n_[l]);
    }
  return out;
}

void SparseRuntime::count_fetch(const HotChunkStats& s) {
  fetch_hits_ += s.hits;
  fetch_misses_ += s.misses;
  fetch_bytes_ += s.bytes_moved;
  fetch_evictions_ += s.evictions;
  fetch_refused_ += s.refused;
  resident_bytes_ += s.resident_bytes;
  fetch_steps_ += 1;
}

SparseStats SparseRuntime::stats() const {
  SparseStats s{sparse_heads_.load(), dense_heads_.load(), keys_total_.load(),
                keys_selected_.load(), score_bytes_.load(), kv_bytes_.load()};
  s.fetch_hits = fetch_hits_.load();
  s.fetch_misses = fetch_misses_.load();
  s.fetch_bytes = fetch_bytes_.load();
  s.fetch_evictions = fetch_evictions_.load();
  s.fetch_refused = fetch_refused_.load();
  s.resident_bytes = resident_bytes_.load();
  s.fetch_steps = fetch_steps_.load();
  return s;
}

void SparseRuntime::add_stats(const SparseStats& s) {
  sparse_heads_ += s.sparse_heads;
  dense_heads_ += s.dense_heads;
  keys_total_ += s.keys_total;
  keys_selected_ += s.keys_selected;
  score_bytes_ += s.score_bytes;
  kv_bytes_ += s.kv_bytes;
  fetch_hits_ += s.fetch_hits;
  fetch_misses_ += s.fetch_misses;
  fetch_bytes_ += s.fetch_bytes;
  fetch_evictions_ += s.fetch_evictions;
  fetch_refused_ += s.fetch_refused;
  resident_bytes_ += s.resident_bytes;
  fetch_steps_ += s.fetch_steps;
}

void SparseRuntime::reset_stats() {
  sparse_heads_ = dense_heads_ = keys_total_ = keys_selected_ = score_bytes_ = kv_bytes_ = 0;
  fetch_hits_ = fetch_misses_ = fetch_bytes_ = fetch_evictions_ = fetch_refused_ = fetch_steps_ = 0;
  resident_bytes_ = 0;
  std::lock_guard lk(recall_mu_);
  std::fill(recall_sum_.begin(), recall_sum_.end(), 0.0);
  std::fill(recall_n_.begin(), recall_n_.end(), 0);
  std::fill(oracle_sum_.begin(), oracle_sum_.end(), OracleRecall{0.0, 0.0});
  std::fill(oracle_n_.begin(), oracle_n_.end(), 0);
}

SketchBasis random_sketch_basis(int n_layer, int n_kv_heads, int head_dim, int rank, uint64_t seed) {
  SketchBasis b = SketchBasis::zeros(n_layer, n_kv_heads, head_dim, rank);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  for (int l = 0; l < n_layer; ++l)
    for (int h = 0; h < n_kv_heads; ++h) {
      float* B = b.basis[l].data() + static_cast<int64_t>(h) * head_dim * rank;  // [head_dim][rank]
      // Gram-Schmidt on random columns.
      for (int j = 0; j < rank; ++j) {
        std::vector<double> v(head_dim);
        for (auto& x : v) x = nd(rng);
        for (int i = 0; i < j; ++i) {
          double dot = 0;
          for (int d = 0; d < head_dim; ++d) dot += v[d] * B[d * rank + i];
          for (int d = 0; d < head_dim; ++d) v[d] -= dot * B[d * rank + i];
        }
        double norm = 0;
        for (double x : v) norm += x * x;
        norm = std::sqrt(norm);
        for (int d = 0; d < head_dim; ++d) B[d * rank + j] = static_cast<float>(v[d] / norm);
      }
    }
  return b;
}

}  // namespace hs
