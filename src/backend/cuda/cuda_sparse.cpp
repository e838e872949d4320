// backend/cuda/cuda_sparse.cpp — sparse attention on the CUDA backend (docs/gpu-sparse.md): the
// attached SparseRuntime's basis on the device, device sketch pages beside the KV pages, which
// tokens select per step, and the selection launched before each full layer's attention.
//
// What it owns: the sketch pages ([sparse layers][n_blocks][n_kv][P][rank] f16, allocated when a
// runtime is attached to a bound KV pool, or at the next begin_step), the basis (B, A, mu per
// sparse layer, f32) and the selection scratch (scores, selected chunks / pages / lengths; grown
// with the step, never shrunk). The step's per-token "selects" flags travel in the step tables,
// so a decode step with sparse rows is one graph replay like any other (the graph key carries
// the count of sparse tokens and the range bucket of the dense ones).
// Cost: sketches = full layers x n_blocks x P x n_kv x rank x 2 bytes (Llama-3.1-8B at 128K tokens,
// rank 32: 2.1 GiB); per step and sparse row: the candidate tokens' sketches read once, a radix
// select, then attention over <= max_selected_chunks pages.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_kernels.h"
#include "sparse/sparse_runtime.h"

namespace hs::cuda {

namespace {
SelectRule select_rule(const SparseConfig& cfg) {
  SelectRule r;
  r.chunk_tokens = cfg.chunk_tokens;
  r.sink_chunks = cfg.sink_chunks();
  r.window_tokens = cfg.window_tokens;
  r.budget_tokens = cfg.budget_tokens;
  r.max_selected = cfg.max_selected_chunks();
  return r;
}
}  // namespace

Status CudaBackend::set_sparse(SparseRuntime* rt, HotChunks* hot) {
  if (hot)
    return make_error(StatusCode::kUnsupported,
                      "cuda: the CPU's device tier (HotChunks) does not apply: the GPU's host tier is --kv-tier host, "
                      "with its own hot set of --device-kv-budget bytes");
  HS_CUDA(cudaSetDevice(device_));
  if (sparse_ == rt && (rt == nullptr || sketch_base_ != nullptr || kv_bound_ == nullptr)) return Status::ok();
  HS_CUDA(cudaStreamSynchronize(stream_));
  free_hot_set();
  if (sketch_base_) ++alloc_generation_;
  (void)cudaFree(sketch_base_);
  sketch_base_ = nullptr;
  sketch_blocks_ = 0;
  if (basis_dev_) ++alloc_generation_;
  (void)cudaFree(basis_dev_);
  basis_dev_ = nullptr;
  sparse_ = nullptr;
  sketch_slot_.clear();
  if (!rt) return Status::ok();

  const SparseConfig& cfg = rt->config();
  const SketchBasis* basis = rt->basis();
  if (rt->mode() != SparseMode::kSketch || !basis)
    return make_error(StatusCode::kUnsupported, "cuda sparse attention: --sparse {} is CPU-only (the GPU selects by sketch)",
                      sparse_mode_name(rt->mode()));
  if (cfg.chunk_mass_scale > 0.0f || cfg.tail_estimate || cfg.residual_z > 0.0f)
    return make_error(StatusCode::kUnsupported,
                      "cuda sparse attention: the group-mass chunk score, estimated tail and residual bound are CPU-only "
                      "so far (--sparse-chunk-score max; the exact rerank, --sparse-rerank R, runs on the GPU)");
  if (cfg.window_tokens <= 0)
    return make_error(StatusCode::kUnsupported,
                      "cuda sparse attention: a window of at least one token is needed (--sparse-window > 0): the "
                      "context's partial last chunk is then always in the window, never scored");
  const int P = rt->page_tokens();
  if (cfg.chunk_tokens != P || P > 32 || (P & (P - 1)) != 0)
    return make_error(StatusCode::kUnsupported,
                      "cuda sparse attention: chunks must be whole KV pages of at most 32 tokens (chunk {}, page {})",
                      cfg.chunk_tokens, P);
  if ((basis->rank != 16 && basis->rank != 32 && basis->rank != 64) || P % (256 / basis->rank) != 0 ||
      basis->head_dim > 256)
    return make_error(StatusCode::kUnsupported,
                      "cuda sparse attention: sketch rank {} (16, 32 or 64, with pages of a multiple of 256 / rank "
                      "tokens) and head_dim {} (at most 256)",
                      basis->rank, basis->head_dim);
  // The basis of every sparse layer, f32 on the device: B | A | mu per layer.
  sketch_slot_.assign(basis->n_layer, -1);
  int n_sparse = 0;
  for (int l = 0; l < basis->n_layer; ++l)
    if (rt->layer_sparse(l) && basis->has_layer(l)) sketch_slot_[l] = n_sparse++;
  const int64_t hr = static_cast<int64_t>(basis->n_kv_heads) * basis->head_dim;
  basis_layer_floats_ = 2 * hr * basis->rank + hr;
  std::vector<float> host(static_cast<size_t>(basis_layer_floats_ * std::max(1, n_sparse)));
  for (int l = 0; l < basis->n_layer; ++l) {
    if (sketch_slot_[l] < 0) continue;
    float* dst = host.data() + sketch_slot_[l] * basis_layer_floats_;
    const size_t bsz = static_cast<size_t>(hr * basis->rank);
    std::memcpy(dst, basis->B(l, 0), bsz * sizeof(float));
    std::memcpy(dst + bsz, basis->A(l, 0), bsz * sizeof(float));
    std::memcpy(dst + 2 * bsz, basis->mu(l, 0), static_cast<size_t>(hr) * sizeof(float));
  }
  HS_RETURN_IF_ERROR(device_malloc(&basis_dev_, host.size() * sizeof(float), "the sketch basis"));
  HS_CUDA(cudaMemcpy(basis_dev_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  sketch_rank_ = basis->rank;
  sparse_ = rt;
  spdlog::info("cuda sparse attention: sketch rank {} on {} layers, budget {} tokens, {}-token chunks, dense below {} "
               "tokens",
               basis->rank, n_sparse, cfg.budget_tokens, cfg.chunk_tokens, cfg.min_context);
  if (kv_bound_) {
    if (Status st = bind_sparse_pages(); !st.is_ok()) {
      (void)set_sparse(nullptr, nullptr);  // nothing half attached
      return st;
    }
  }
  return Status::ok();
}

Status CudaBackend::bind_sparse_pages() {
  if (!sparse_) return Status::ok();
  if (sketch_base_ && sketch_blocks_ == kv_blocks_) return bind_hot_set();
  const KvGeometry& g = kv_geom_;
  const SketchBasis& b = *sparse_->basis();
  if (b.n_layer != g.n_layer || b.n_kv_heads != g.n_kv_heads || b.head_dim != g.head_dim)
    return make_error(StatusCode::kInvalidArgument,
                      "cuda sparse attention: the sketch basis is for {} layers x {} kv heads x {}, the KV cache has {} x "
                      "{} x {}",
                      b.n_layer, b.n_kv_heads, b.head_dim, g.n_layer, g.n_kv_heads, g.head_dim);
  if (sparse_->page_tokens() != g.page_tokens)
    return make_error(StatusCode::kInvalidArgument, "cuda sparse attention: runtime pages of {} tokens, the cache's {}",
                      sparse_->page_tokens(), g.page_tokens);
  const int n_sparse = static_cast<int>(std::count_if(sketch_slot_.begin(), sketch_slot_.end(), [](int s) { return s >= 0; }));
  if (sketch_base_) {
    HS_CUDA(cudaStreamSynchronize(stream_));
    ++alloc_generation_;
    (void)cudaFree(sketch_base_);
    sketch_base_ = nullptr;
  }
  sketch_layer_bytes_ = static_cast<int64_t>(kv_blocks_) * g.n_kv_heads * g.page_tokens * sketch_rank_ * 2;
  sketch_summary_offset_ = 0;
  if (sparse_->config().page_shortlist > 0) {  // + the page summaries: 2 / P of the sketches
    sketch_summary_offset_ = sketch_layer_bytes_;
    sketch_layer_bytes_ += static_cast<int64_t>(kv_blocks_) * g.n_kv_heads * 2 * sketch_rank_ * 2;
  }
  const size_t total = static_cast<size_t>(sketch_layer_bytes_) * std::max(1, n_sparse);
  HS_RETURN_IF_ERROR(device_malloc(&sketch_base_, total,
                                   fmt::format("the key sketches ({} layers x {} pages, rank {})", n_sparse, kv_blocks_,
                                               sketch_rank_)));
  HS_CUDA(cudaMemsetAsync(sketch_base_, 0, total, stream_));
  sketch_blocks_ = kv_blocks_;
  sparse_->set_device_bytes(static_cast<int64_t>(total), 0);
  return bind_hot_set();
}

void CudaBackend::plan_sparse_step(const ForwardPlan& plan, std::vector<int32_t>& flags) {
  const int64_t n = plan.n_tokens();
  flags.assign(static_cast<size_t>(n), 0);
  n_sparse_tokens_ = 0;
  sp_first_ = n;
  sp_end_ = 0;
  int32_t dense_max = 0;
  const bool indexed = static_cast<int64_t>(plan.seq_index.size()) == n && !plan.seq_tokens.empty();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t n_keys = plan.positions[i] + 1;
    const bool decode = indexed && plan.seq_tokens[static_cast<size_t>(plan.seq_index[i])] == 1;
    // Host tier: as many sparse tokens as the hot set holds selections for; the rest run dense
    // (through the host pages).
    const bool room = !hot_.base || n_sparse_tokens_ < hot_max_tokens_;
    if (sparse_ && plan.kv && decode && room && sparse_->use_sparse(n_keys)) {
      flags[static_cast<size_t>(i)] = 1;
      ++n_sparse_tokens_;
      sp_first_ = std::min(sp_first_, i);
      sp_end_ = i + 1;
    } else {
      dense_max = std::max(dense_max, n_keys);
    }
  }
  dense_max_pos1_ = dense_max > 0 ? range_bucket(dense_max) : 0;
  if (n_sparse_tokens_ == 0) sp_first_ = sp_end_ = 0;
  if (!sparse_) return;
  // The counters (host side, so a graph replay counts too): per full layer and kv head, each
  // sparse token's selection size by the rule the kernels apply.
  const SparseConfig& cfg = sparse_->config();
  const int n_layers = static_cast<int>(std::count_if(sketch_slot_.begin(), sketch_slot_.end(), [](int s) { return s >= 0; }));
  const int64_t per_token = static_cast<int64_t>(n_layers) * kv_geom_.n_kv_heads;
  const int64_t sketch_bytes = static_cast<int64_t>(sketch_rank_) * 2;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t n_keys = plan.positions[i] + 1;
    if (!flags[static_cast<size_t>(i)]) {
      sparse_->count_dense(per_token);
      continue;
    }
    const int C = cfg.chunk_tokens;
    const auto [first, last] = candidate_range(n_keys, cfg);
    const bool all = candidates_fit(n_keys, cfg) || last - first <= cfg.budget_chunks();
    const int64_t window_keys = n_keys - std::min<int64_t>(n_keys, static_cast<int64_t>(last) * C);
    const int64_t selected =
        all ? n_keys : std::min<int64_t>(n_keys, static_cast<int64_t>(first) * C) + int64_t{cfg.budget_chunks()} * C + window_keys;
    // Hierarchical scoring reads each candidate's page summary (4 rank bytes: two tokens'
    // sketches) and the shortlist's token sketches instead of every candidate's.
    const int64_t n_cand = last - first;
    // With the rerank taking the bounds' list as it is (page_shortlist = R x budget), no token
    // sketches are read at all.
    const int32_t sl = sketch_summary_offset_ > 0 ? cfg.page_shortlist : 0;
    const bool bounds_first = cfg.rerank_factor > 0 && sl == cfg.rerank_factor * cfg.budget_chunks();
    const int64_t scored = all                      ? 0
                           : sl > 0 && n_cand > sl ? (bounds_first ? 0 : int64_t{sl} * C) + 2 * n_cand
                                                    : n_cand * C;
    // The exact rerank reads the K rows of its shortlist and of the forced chunks.
    const int64_t rr_list = std::min<int64_t>(n_cand, int64_t{cfg.rerank_factor} * cfg.budget_chunks());
    const int64_t reranked = all || cfg.rerank_factor <= 0 ? 0 : rr_list * C + (selected - int64_t{cfg.budget_chunks()} * C);
    sparse_->count_external(per_token, n_keys, selected, scored, sketch_bytes, reranked);
  }
}

bool CudaBackend::sparse_layer(int layer, const AttentionParams& p) const {
  return sparse_ && n_sparse_tokens_ > 0 && p.window <= 0 && layer >= 0 &&
         layer < static_cast<int>(sketch_slot_.size()) && sketch_slot_[layer] >= 0 && sketch_base_;
}

namespace {
SketchLayerView sketch_view(void* base, int64_t layer_bytes, int slot, const KvGeometry& g, int rank,
                            int64_t summary_offset) {
  uint8_t* layer = static_cast<uint8_t*>(base) + slot * layer_bytes;
  SketchLayerView v{reinterpret_cast<uint16_t*>(layer), g.n_kv_heads, g.page_tokens, rank};
  if (summary_offset > 0) v.summary = reinterpret_cast<uint16_t*>(layer + summary_offset);
  return v;
}
// With the hot set's residency map of the layer (writes clear rewritten pages' entries).
SketchLayerView with_residency(SketchLayerView v, const HotPoolView& pool) {
  v.residency = pool.res;
  v.n_blocks = pool.n_blocks;
  return v;
}
// A shortlist's arrays at p, [rows] x (list [n] i32, scores [n] f32) then counts [rows]: sets
// them, returns the int just past them.
int32_t* carve_list(int32_t* p, int64_t rows, int32_t n, int32_t& shortlist, int32_t*& list, float*& scores,
                    int32_t*& count) {
  shortlist = n;
  list = p;
  scores = reinterpret_cast<float*>(p + rows * n);
  count = p + 2 * rows * n;
  return count + rows;
}
SketchBasisView basis_view(void* base, int64_t layer_floats, int slot, const KvGeometry& g, int rank) {
  const float* b = static_cast<const float*>(base) + slot * layer_floats;
  const int64_t bsz = static_cast<int64_t>(g.n_kv_heads) * g.head_dim * rank;
  return SketchBasisView{b, b + bsz, b + 2 * bsz, g.head_dim, rank};
}
}  // namespace

Status CudaBackend::write_sketches(int layer, const Tensor& k) {
  if (!sparse_ || layer < 0 || layer >= static_cast<int>(sketch_slot_.size()) || sketch_slot_[layer] < 0 ||
      !sketch_base_)
    return Status::ok();
  const int slot = sketch_slot_[layer];
  const StepTables t{d_positions_, d_seq_index_, d_page_indptr_, d_page_indices_};
  SketchLayerView sk = sketch_view(sketch_base_, sketch_layer_bytes_, slot, kv_geom_, sketch_rank_, sketch_summary_offset_);
  if (hot_.base) sk = with_residency(sk, hot_pool(slot));
  return launched(launch_sketch_encode(sk,
                                       basis_view(basis_dev_, basis_layer_floats_, slot, kv_geom_, sketch_rank_), t,
                                       crows_of(k), stream_),
                  "sketch_encode");
}

Status CudaBackend::select_sparse(int layer, const Tensor& q, const AttentionParams& p, AttnArgs& a) {
  // The selection's rows: every token of a step that may be graph-replayed (its launch shapes may
  // not depend on where the sparse tokens sit); in a step with prompt runs (always eager, run_step)
  // only the span of its sparse tokens, so a long prompt chunk beside long-context decodes does not
  // size the scores and lists by its own tokens (8,192 prompt tokens x 8 kv heads x 16K candidates
  // would be 4 GB of scores).
  const bool compact = flash_on_ && has_flash_range_;
  sel_first_ = compact ? sp_first_ : 0;
  sel_end_ = compact ? sp_end_ : plan_->n_tokens();
  const int64_t n = sel_end_ - sel_first_;
  const int slot = sketch_slot_[layer];
  const SelectRule rule = select_rule(sparse_->config());
  const int64_t rows = n * p.n_head_kv;
  const int cap = rule.max_selected;
  // Candidates of any row: at most the chunks of the longest key range (bucketed: a graph serves its bucket).
  const int32_t stride = (max_pos1_ + rule.chunk_tokens - 1) / rule.chunk_tokens;
  HS_RETURN_IF_ERROR(grow(scores_,
                          sparse_select_scratch_floats(rows, stride, p.n_head / p.n_head_kv, sketch_rank_) * sizeof(float),
                          "sparse chunk scores"));
  HS_RETURN_IF_ERROR(grow(sel_, static_cast<size_t>(rows) * (2 * cap + 1) * sizeof(int32_t), "sparse selections"));
  int32_t* sel = static_cast<int32_t*>(sel_.ptr);
  SelectArgs s;
  s.rule = rule;
  s.n_kv_heads = p.n_head_kv;
  s.group = p.n_head / p.n_head_kv;
  s.sparse_tok = d_sparse_tok_ + sel_first_;
  s.scores = static_cast<float*>(scores_.ptr);
  s.score_stride = stride;
  s.sel_chunks = sel;
  s.sel_pages = sel + rows * cap;
  s.sel_len = sel + 2 * rows * cap;
  // Hierarchical scoring when some row can have more candidates than the shortlist (stride is
  // the step's bucket: a graph serves one choice).
  const int32_t rerank = sparse_->config().rerank_factor;
  const int32_t shortlist = sparse_->config().page_shortlist;
  const bool hier = sketch_summary_offset_ > 0 && shortlist > 0 && stride > shortlist;
  if (rerank > 0) {  // the exact rerank of the best rerank x budget chunks by sketch score
    const int32_t sl = rerank * sparse_->config().budget_chunks();
    // With page bounds first: list = the bounds' best `shortlist`; when that is longer than the
    // rerank's list, its sketch scores pick list2 (the chain), else the rerank takes it as is.
    const bool chain = hier && shortlist > sl;
    const int32_t sl1 = hier ? shortlist : sl;  // hier && !chain: shortlist == sl (SparseRuntime checks >=)
    const size_t ints =
        static_cast<size_t>(rows) * (2 * sl1 + 1) + (chain ? static_cast<size_t>(rows) * (2 * sl + 1) : 0);
    HS_RETURN_IF_ERROR(grow(shortlist_, ints * 4, "sparse shortlists"));
    HS_RETURN_IF_ERROR(grow(rerank_mass_, sparse_rerank_mass_floats(rows, sl, cap, s.group) * sizeof(float),
                            "the exact rerank's log masses"));
    int32_t* next = carve_list(static_cast<int32_t*>(shortlist_.ptr), rows, sl1, s.shortlist, s.list, s.list_scores,
                               s.n_list);
    if (chain) (void)carve_list(next, rows, sl, s.shortlist2, s.list2, s.list2_scores, s.n_list2);
    s.bounds_first = hier && !chain;
    s.rerank = true;
    s.kv = layer_kv_view(layer);
    s.scale = p.scale;
    s.mass = static_cast<float*>(rerank_mass_.ptr);
  }
  if (rerank <= 0 && hier) {
    HS_RETURN_IF_ERROR(grow(shortlist_, static_cast<size_t>(rows) * (2 * shortlist + 1) * 4, "sparse shortlists"));
    (void)carve_list(static_cast<int32_t*>(shortlist_.ptr), rows, shortlist, s.shortlist, s.list, s.list_scores,
                     s.n_list);
  }
  const StepTables t{d_positions_ + sel_first_, d_seq_index_ + sel_first_, d_page_indptr_, d_page_indices_};
  CRows qrows = crows_of(q);
  qrows.p += sel_first_ * qrows.stride;
  qrows.rows = n;
  const SketchLayerView sk = sketch_view(sketch_base_, sketch_layer_bytes_, slot, kv_geom_, sketch_rank_, sketch_summary_offset_);
  const SketchBasisView bv = basis_view(basis_dev_, basis_layer_floats_, slot, kv_geom_, sketch_rank_);
  if (!profile_.on()) {
    HS_RETURN_IF_ERROR(launched(launch_sparse_select(sk, bv, t, qrows, s, stride, stream_), "sparse_select"));
  } else {  // each kernel its own line in the profile (inside the attention op's time)
    const std::pair<int, const char*> stages[] = {{kSelectProject, "attention: sparse project"},
                                                  {kSelectScore, "attention: sparse score"},
                                                  {kSelectShortlist, "attention: sparse shortlist"},
                                                  {kSelectRerank, "attention: sparse rerank (exact masses)"},
                                                  {kSelectRank, "attention: sparse rerank (ranking)"},
                                                  {kSelectTopk, "attention: sparse top-k"}};
    for (const auto& [stage, name] : stages) {
      OpProfile::Scope prof(&profile_, name, stream_);
      HS_RETURN_IF_ERROR(
          launched(launch_sparse_select(sk, bv, t, qrows, s, stride, stream_, stage), "sparse_select"));
    }
  }
  a.sp_pages = s.sel_pages;
  a.sp_len = s.sel_len;
  a.sp_stride = cap;
  sel_rows_ = rows;
  sel_cap_ = cap;
  if (hot_.base) return hot_fetch(layer, slot, s, rows, a);  // sp_pages become hot slots (tokens sel_first_ ..)
  return Status::ok();
}

Result<std::vector<std::vector<int32_t>>> CudaBackend::last_selections(int64_t n_rows) {
  if (n_rows > sel_rows_ || !sel_.ptr)
    return make_error(StatusCode::kInvalidArgument, "cuda last_selections: {} rows, the last selection had {}", n_rows,
                      sel_rows_);
  std::vector<int32_t> host(static_cast<size_t>(sel_rows_) * (2 * sel_cap_ + 1));
  HS_CUDA(cudaStreamSynchronize(stream_));
  HS_CUDA(cudaMemcpy(host.data(), sel_.ptr, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n_rows));
  const int32_t* len = host.data() + 2 * sel_rows_ * sel_cap_;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (len[r] < 0) continue;
    const int32_t* c = host.data() + r * sel_cap_;
    for (int j = 0; j < sel_cap_ && c[j] >= 0; ++j) out[static_cast<size_t>(r)].push_back(c[j]);
  }
  return out;
}

Status CudaBackend::rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) {
  if (!sparse_ || n_tokens <= 0) return Status::ok();
  HS_CUDA(cudaSetDevice(device_));
  HS_RETURN_IF_ERROR(bind_kv(kv));
  HS_RETURN_IF_ERROR(bind_sparse_pages());
  const int P = kv_geom_.page_tokens;
  const size_t n_pages = static_cast<size_t>((n_tokens + P - 1) / P);
  if (seq.blocks.size() < n_pages)
    return make_error(StatusCode::kInvalidArgument, "cuda rebuild_sparse_metadata: {} tokens need {} pages, the sequence has {}",
                      n_tokens, n_pages, seq.blocks.size());
  for (size_t j = 0; j < n_pages; ++j)
    if (seq.blocks[j] < 0 || seq.blocks[j] >= kv_blocks_)
      return make_error(StatusCode::kInvalidArgument, "cuda rebuild_sparse_metadata: page {} is block {} of {}", j,
                        seq.blocks[j], kv_blocks_);
  void* d_pages = nullptr;
  HS_RETURN_IF_ERROR(device_malloc(&d_pages, n_pages * sizeof(int32_t), "a page list"));
  Status st = [&]() -> Status {
    HS_CUDA(cudaMemcpy(d_pages, seq.blocks.data(), n_pages * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (int l = 0; l < kv_geom_.n_layer; ++l) {
      if (sketch_slot_[l] < 0) continue;
      const int slot = sketch_slot_[l];
      SketchLayerView sk = sketch_view(sketch_base_, sketch_layer_bytes_, slot, kv_geom_, sketch_rank_, sketch_summary_offset_);
      if (hot_.base) sk = with_residency(sk, hot_pool(slot));
      HS_RETURN_IF_ERROR(launched(
          launch_sketch_rebuild(sk,
                                basis_view(basis_dev_, basis_layer_floats_, slot, kv_geom_, sketch_rank_),
                                layer_kv_view(l), static_cast<const int32_t*>(d_pages), n_tokens, stream_),
          "sketch_rebuild"));
    }
    HS_CUDA(cudaStreamSynchronize(stream_));
    return Status::ok();
  }();
  (void)cudaFree(d_pages);
  ++alloc_generation_;
  return st;
}

}  // namespace hs::cuda
