// sparse/selector.cpp — the shared selection rule and the sketch top-k selector.
#include "sparse/selector.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "sparse/sketch_store.h"

namespace hs {

Status SparseConfig::validate(int page_tokens) const {
  if (chunk_tokens <= 0 || page_tokens <= 0 || page_tokens % chunk_tokens != 0)
    return make_error(StatusCode::kInvalidArgument, "sparse: chunk size {} must divide the KV page size {}",
                      chunk_tokens, page_tokens);
  if (budget_tokens < 0 || sink_tokens < 0 || window_tokens < 0 || min_context < 0)
    return make_error(StatusCode::kInvalidArgument,
                      "sparse: budget {}, sinks {}, window {}, min context {} must be non-negative", budget_tokens,
                      sink_tokens, window_tokens, min_context);
  if (residual_z < 0.0f || !(residual_z <= 16.0f))
    return make_error(StatusCode::kInvalidArgument, "sparse: residual z {} must be in [0, 16]", residual_z);
  if (residual_z > 0.0f && sketch_elem == SketchElem::kInt8)
    return make_error(StatusCode::kInvalidArgument,
                      "sparse: --sparse-residual needs f16 sketches (--sketch-dtype f16): an int8 sketch's per-token "
                      "scale would be set by the residual norm, not the sketch");
  if (rerank_factor != 0 && (rerank_factor < 2 || rerank_factor > 64))
    return make_error(StatusCode::kInvalidArgument, "sparse: rerank factor {} must be 0 (off) or 2..64",
                      rerank_factor);
  return Status::ok();
}

int32_t auto_chunk_tokens(int64_t token_bytes, int32_t page_tokens) {
  for (int32_t c = 1; c < page_tokens; c *= 2)
    if (page_tokens % c == 0 && c * token_bytes >= kMinFetchPieceBytes) return c;
  return page_tokens;
}

std::pair<int32_t, int32_t> candidate_range(int32_t n_tokens, const SparseConfig& cfg) {
  const int32_t n_chunks = n_chunks_of(n_tokens, cfg.chunk_tokens);
  const int32_t sink_end = std::min(n_chunks, cfg.sink_chunks());
  const int32_t window_begin =
      cfg.window_tokens > 0 ? std::max<int32_t>(0, n_tokens - cfg.window_tokens) / cfg.chunk_tokens : n_chunks;
  return {sink_end, std::max(sink_end, window_begin)};
}

bool candidates_fit(int32_t n_tokens, const SparseConfig& cfg) {
  const auto [first, last] = candidate_range(n_tokens, cfg);
  const int64_t tokens = std::min<int64_t>(static_cast<int64_t>(last) * cfg.chunk_tokens, n_tokens) -
                         static_cast<int64_t>(first) * cfg.chunk_tokens;
  return tokens <= cfg.budget_tokens;
}

namespace {

// Appends the ids (first + i) of the k best of `scores` in ascending id order: higher score
// first, ties to the later chunk, NaN as −inf — the order of a full sort, found in O(n):
// scores are binned linearly between their min and max (256 bins; the top-k tail spans few
// bins, most scores sit low); every bin above the one holding the k-th best is taken whole
// and only that bin is ordered (nth_element).
void top_k_chunks(std::span<const float> scores, int32_t first, int32_t k, std::vector<int32_t>& out,
                  std::vector<int32_t>& ids) {
  constexpr int kBins = 256;
  const int32_t n = static_cast<int32_t>(scores.size());
  auto key = [&](int32_t i) {
    const float s = scores[i];
    return std::isnan(s) ? -INFINITY : s;
  };
  float lo = INFINITY, hi = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    const float s = key(i);
    if (s == -INFINITY || s == INFINITY) continue;
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  // Bin of each score: −inf → 0, +inf → kBins + 1, finite → 1 + linear position in [lo, hi].
  const float inv = hi > lo ? static_cast<float>(kBins) / (hi - lo) : 0.0f;
  auto bin = [&](float s) -> int {
    if (s == -INFINITY) return 0;
    if (s == INFINITY) return kBins + 1;
    const int b = static_cast<int>((s - lo) * inv);
    return 1 + std::clamp(b, 0, kBins - 1);
  };
  int32_t hist[kBins + 2] = {};
  for (int32_t i = 0; i < n; ++i) ++hist[bin(key(i))];
  int boundary = kBins + 1;
  int32_t above = 0;  // candidates in bins above `boundary`
  while (above + hist[boundary] < k) above += hist[boundary--];
  const size_t out_begin = out.size();
  ids.clear();
  for (int32_t i = 0; i < n; ++i) {
    const int b = bin(key(i));
    if (b > boundary) out.push_back(first + i);
    else if (b == boundary) ids.push_back(i);
  }
  const int32_t need = k - above;  // 1 .. hist[boundary]
  auto better = [&](int32_t a, int32_t b) {
    const float ka = key(a), kb = key(b);
    return ka != kb ? ka > kb : a > b;
  };
  if (need < static_cast<int32_t>(ids.size())) std::nth_element(ids.begin(), ids.begin() + (need - 1), ids.end(), better);
  for (int32_t j = 0; j < need; ++j) out.push_back(first + ids[j]);
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(out_begin), out.end());
}

}  // namespace

void select_top_chunks(std::span<const float> candidate_scores, int32_t n_tokens, const SparseConfig& cfg,
                       std::vector<int32_t>& out, std::vector<int32_t>* id_scratch) {
  out.clear();
  const int32_t n_chunks = n_chunks_of(n_tokens, cfg.chunk_tokens);
  const auto [first, last] = candidate_range(n_tokens, cfg);
  const int32_t n_cand = last - first;
  const int32_t k = candidates_fit(n_tokens, cfg) ? n_cand : std::min(n_cand, cfg.budget_chunks());
  out.reserve(static_cast<size_t>(first + k + (n_chunks - last)));
  for (int32_t c = 0; c < first; ++c) out.push_back(c);
  if (k == n_cand) {
    for (int32_t c = first; c < last; ++c) out.push_back(c);
  } else if (k > 0) {
    std::vector<int32_t> local;
    std::vector<int32_t>& ids = id_scratch ? *id_scratch : local;  // boundary-bucket candidates
    top_k_chunks(candidate_scores, first, k, out, ids);
  }
  for (int32_t c = last; c < n_chunks; ++c) out.push_back(c);
}

void ChunkSelector::select(const SelectInput& in, std::vector<int32_t>& chunks_out) const {
  const auto [first, last] = candidate_range(in.n_tokens, cfg_);
  SelectScratch local;
  SelectScratch& scratch = in.scratch ? *in.scratch : local;
  if (candidates_fit(in.n_tokens, cfg_)) {  // all fit: no scoring
    select_top_chunks({}, in.n_tokens, cfg_, chunks_out);
    return;
  }
  const int32_t n_cand = last - first;
  const int stride = score_stride(in.n_q);
  scratch.scores.resize(score_floats(in.n_q, n_cand));
  scratch.prep.resize(prep_floats(in.n_q));
  prepare(in, scratch.prep.data());
  float* raw = scratch.scores.data();
  float* ranking = ranking_of(raw, in.n_q, n_cand);
  chunk_scores(in, scratch.prep.data(), first, last, raw);
  if (stride > 1) finish_scores(in, scratch.prep.data(), raw, n_cand, ranking);
  restrict_candidates(in, scratch.prep.data(), n_cand, ranking);
  select_top_chunks(std::span<const float>(ranking, n_cand), in.n_tokens, cfg_, chunks_out, &scratch.ids);
}

void ChunkSelector::select_batch(std::span<const SelectInput> ins, std::span<std::vector<int32_t>> outs,
                                 BatchSelectScratch& s, ThreadPool* pool) const {
  const int64_t n = static_cast<int64_t>(ins.size());
  const int n_threads = pool ? pool->n_threads() : 1;
  if (static_cast<int>(s.ids.size()) < n_threads) s.ids.resize(n_threads);
  if (s.left_size < static_cast<size_t>(n)) {
    s.left.reset(new std::atomic<int32_t>[n]);
    s.left_size = static_cast<size_t>(n);
  }
  s.tasks.clear();
  s.offset.assign(n, -1);
  int64_t total = 0;
  int prep_n = 0;
  for (int64_t i = 0; i < n; ++i) prep_n = std::max(prep_n, prep_floats(ins[i].n_q));
  if (s.prep.size() < static_cast<size_t>(n * prep_n)) s.prep.resize(n * prep_n);
  for (int64_t i = 0; i < n; ++i) {
    if (candidates_fit(ins[i].n_tokens, cfg_)) {  // all fit: no scoring
      select_top_chunks({}, ins[i].n_tokens, cfg_, outs[i]);
      continue;
    }
    const auto [first, last] = candidate_range(ins[i].n_tokens, cfg_);
    s.offset[i] = total;
    total += score_floats(ins[i].n_q, last - first);
    int32_t n_tasks = 0;
    for (int32_t c = first; c < last; c += kChunksPerTask, ++n_tasks)
      s.tasks.push_back({static_cast<int32_t>(i), c, std::min(last, c + kChunksPerTask)});
    s.left[i].store(n_tasks, std::memory_order_relaxed);
    prepare(ins[i], s.prep.data() + i * prep_n);
  }
  if (static_cast<int64_t>(s.scores.size()) < total) s.scores.resize(total);
  // One pass: each task scores its chunks; the task that finishes an item's scoring picks
  // that item's top chunks right away (the pool's completion makes every write visible).
  auto run = [&](int64_t b, int64_t e, int thread) {
    for (int64_t k = b; k < e; ++k) {
      const BatchSelectScratch::Task& t = s.tasks[k];
      const SelectInput& in = ins[t.item];
      const auto [first, last] = candidate_range(in.n_tokens, cfg_);
      const int32_t n_cand = last - first;
      const int stride = score_stride(in.n_q);
      float* raw = s.scores.data() + s.offset[t.item];
      float* ranking = ranking_of(raw, in.n_q, n_cand);
      const float* prep = s.prep.data() + t.item * prep_n;
      chunk_scores(in, prep, t.chunk_begin, t.chunk_end, raw + static_cast<int64_t>(t.chunk_begin - first) * stride);
      if (s.left[t.item].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        if (stride > 1) finish_scores(in, prep, raw, n_cand, ranking);
        restrict_candidates(in, prep, n_cand, ranking);
        select_top_chunks(std::span<const float>(ranking, n_cand), in.n_tokens, cfg_, outs[t.item], &s.ids[thread]);
      }
    }
  };
  if (pool)
    pool->parallel_for(static_cast<int64_t>(s.tasks.size()), 1, run);
  else
    run(0, static_cast<int64_t>(s.tasks.size()), 0);
}

Result<std::unique_ptr<SketchTopKSelector>> SketchTopKSelector::create(const SketchStore& store,
                                                                       const SparseConfig& cfg) {
  HS_RETURN_IF_ERROR(cfg.validate(store.geometry().page_tokens));
  return std::unique_ptr<SketchTopKSelector>(new SketchTopKSelector(store, cfg));
}

int SketchTopKSelector::prep_floats(int n_q) const {
  return n_q * (store_.geometry().rank + 1) + (group_mass() ? n_q : 0);
}

void SketchTopKSelector::prepare(const SelectInput& in, float* prep) const {
  const int R = store_.geometry().rank, G = in.n_q;
  store_.project(in.layer, in.kv_head, in.q, G, prep, prep + G * R);
  if (group_mass()) forced_log_mass(in, prep, prep + G * (R + 1));
}

void SketchTopKSelector::chunk_scores(const SelectInput& in, const float* prep, int32_t chunk_begin,
                                      int32_t chunk_end, float* out) const {
  const int R = store_.geometry().rank;
  if (group_mass())
    store_.chunk_head_mass_projected(in.blocks, in.layer, in.kv_head, prep, prep + in.n_q * R, in.n_q, in.n_tokens,
                                     cfg_.chunk_tokens, chunk_begin, chunk_end, cfg_.chunk_mass_scale, out);
  else
    store_.chunk_max_scores_projected(in.blocks, in.layer, in.kv_head, prep, prep + in.n_q * R, in.n_q, in.n_tokens,
                                      cfg_.chunk_tokens, chunk_begin, chunk_end, out, in.pool);
}

void ChunkSelector::forced_log_mass(const SelectInput& in, const float* prep, float* fixed) const {
  const int G = in.n_q;
  for (int g = 0; g < G; ++g) fixed[g] = -INFINITY;
  const auto [first, last] = candidate_range(in.n_tokens, cfg_);
  const int32_t n_chunks = n_chunks_of(in.n_tokens, cfg_.chunk_tokens);
  static thread_local std::vector<float> l;  // [G] one chunk's log masses
  l.resize(G);
  auto add = [&](int32_t c) {
    chunk_scores(in, prep, c, c + 1, l.data());
    log_add_exp(fixed, l.data(), G);
  };
  for (int32_t c = 0; c < first; ++c) add(c);
  for (int32_t c = last; c < n_chunks; ++c) add(c);
}

void log_add_exp(float* acc, const float* l, int G) {
  for (int g = 0; g < G; ++g) {
    const float hi = std::max(acc[g], l[g]);
    if (hi > -INFINITY) acc[g] = hi + std::log(std::exp(acc[g] - hi) + std::exp(l[g] - hi));
  }
}

void group_mass_ranking(const float* raw, int n_q, int32_t n_cand, const float* fixed, float* ranking) {
  const int G = n_q;
  static thread_local std::vector<float> lse;  // [G] each head's log normaliser: the fixed part and every candidate
  lse.resize(G);
  for (int g = 0; g < G; ++g) {
    float hi = fixed[g];
    for (int32_t c = 0; c < n_cand; ++c) hi = std::max(hi, raw[static_cast<int64_t>(c) * G + g]);
    double sum = hi > -INFINITY ? std::exp(static_cast<double>(fixed[g]) - hi) : 0.0;
    for (int32_t c = 0; c < n_cand; ++c) sum += std::exp(static_cast<double>(raw[static_cast<int64_t>(c) * G + g]) - hi);
    lse[g] = sum > 0.0 ? hi + static_cast<float>(std::log(sum)) : 0.0f;
  }
  for (int32_t c = 0; c < n_cand; ++c) {
    const float* l = raw + static_cast<int64_t>(c) * G;
    float share = 0.0f;
    for (int g = 0; g < G; ++g) share += std::exp(l[g] - lse[g]);
    ranking[c] = share;
  }
}

// The GPU's hierarchical rule (backend/cuda/sparse_select.cu, docs/gpu-sparse.md) on the host, for
// measuring its recall: each candidate chunk's bound max_g (b_g + Σ_j max(q̂_gj mx_j, q̂_gj mn_j))
// over its tokens' stored sketches; all but the page_shortlist best bounds (ties to the later
// chunk) leave the ranking. Reads every candidate token's sketch again: a quality emulation, no
// speed-up on the host.
void SketchTopKSelector::restrict_candidates(const SelectInput& in, const float* prep, int32_t n_cand,
                                             float* ranking) const {
  const int32_t n_keep = cfg_.page_shortlist;
  if (n_keep <= 0 || n_cand <= n_keep) return;
  const int R = store_.geometry().rank, G = in.n_q, C = cfg_.chunk_tokens;
  const float* q_hat = prep;
  const float* bias = prep + G * R;
  const auto [first, last] = candidate_range(in.n_tokens, cfg_);
  std::vector<float> bound(static_cast<size_t>(n_cand)), s(static_cast<size_t>(R)), mx(static_cast<size_t>(R)),
      mn(static_cast<size_t>(R));
  for (int32_t c = first; c < last; ++c) {
    std::fill(mx.begin(), mx.end(), -INFINITY);
    std::fill(mn.begin(), mn.end(), INFINITY);
    const int32_t t1 = std::min(in.n_tokens, (c + 1) * C);
    for (int32_t t = c * C; t < t1; ++t) {
      store_.read(in.blocks, in.layer, in.kv_head, t, s.data());
      for (int j = 0; j < R; ++j) {
        mx[j] = std::max(mx[j], s[j]);
        mn[j] = std::min(mn[j], s[j]);
      }
    }
    float best = -INFINITY;
    for (int g = 0; g < G; ++g) {
      float ub = bias[g];
      for (int j = 0; j < R; ++j) {
        const float qv = q_hat[g * R + j];
        ub += std::max(qv * mx[j], qv * mn[j]);
      }
      best = std::max(best, ub);
    }
    bound[static_cast<size_t>(c - first)] = best;
  }
  // The n_keep-th best bound; ties kept from the latest chunk back, as the GPU's top-k.
  std::vector<float> sorted = bound;
  std::nth_element(sorted.begin(), sorted.begin() + (n_keep - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(n_keep - 1)];
  int32_t above = 0;
  for (float b : bound) above += b > kth;
  int32_t ties_left = n_keep - above;
  for (int32_t c = n_cand - 1; c >= 0; --c) {
    const float b = bound[static_cast<size_t>(c)];
    if (b > kth) continue;
    if (b == kth && ties_left > 0) {
      --ties_left;
      continue;
    }
    ranking[c] = -INFINITY;
  }
}

void SketchTopKSelector::finish_scores(const SelectInput& in, const float* prep, const float* raw, int32_t n_cand,
                                       float* ranking) const {
  group_mass_ranking(raw, in.n_q, n_cand, prep + in.n_q * (store_.geometry().rank + 1), ranking);
}

}  // namespace hs
