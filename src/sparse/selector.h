// sparse/selector.h — which chunks of past tokens a decode step attends to.
//
// The context of n tokens is cut into chunks of C tokens (C divides the page size P, so a
// chunk of one kv head is one contiguous piece of a page; the last chunk may be partial).
// Per decode step, layer and kv head, a ChunkSelector returns ascending, unique chunk ids:
//   - the sink chunks (covering the first S tokens) and the window chunks (covering the last
//     W tokens), always;
//   - plus the best-scoring remaining chunks, at most budget_tokens / C of them, picked with
//     nth_element (O(n_chunks)) and then sorted (O(k log k)); all of them when their tokens
//     fit in budget_tokens.
// So a selection holds at most budget + S + W tokens rounded out to whole chunks
// (SparseConfig::max_selected_chunks). When the budget covers every candidate chunk the
// selection is all chunks and the selector scores nothing: attention is then exactly dense.
// Implementations differ only in the per-chunk score: SketchTopKSelector (max over the
// chunk's tokens of the sketch score, or the group mass; sketch_store.h) and QuestSelector
// (quest.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sparse/sketch_layout.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace hs {

class SketchStore;

struct SparseConfig {
  int32_t budget_tokens = 2048;  // tokens of top-scoring chunks, on top of sinks and window
  int32_t chunk_tokens = 16;     // C; must divide the KV page size P (0 = auto_chunk_tokens)
  int32_t sink_tokens = 16;      // S: chunks covering tokens [0, S) are always selected
  int32_t window_tokens = 256;   // W: chunks covering tokens [n - W, n) are always selected
  int32_t min_context = 8192;    // dense attention below this many tokens (4 × budget)
  SketchElem sketch_elem = SketchElem::kF16;  // how the sketch store keeps each sketch
  // > 0: sketch scores become upper confidence bounds, + z × the std of what the rank-r sketch
  // misses (SketchStore, residual_z; --sparse-residual Z).
  float residual_z = 0.0f;
  // Sketch chunk score: 0 = the max token score (GQA max); α > 0 = the group mass: per query
  // head g the chunk's estimated share of g's softmax mass, Σ_t∈chunk exp(α s_gt) / Σ_all t
  // exp(α s_gt) (sinks and window included in the denominator), summed over the group —
  // the same rule the mass oracle ranks by, with sketch scores for exact logits
  // (α = the model's attention scale; --sparse-chunk-score mass).
  float chunk_mass_scale = 0.0f;
  // Add the unselected chunks' attention back as an estimate from their sketch log masses and
  // mean values (sparse/tail_estimate.h; needs the group mass; --sparse-tail estimate).
  bool tail_estimate = false;
  // Two-stage selection (sparse/exact_rerank.h): 0 = off; R ≥ 2 = the selector shortlists
  // R × budget tokens of chunks and the exact group mass of their keys picks the budget
  // (--sparse-rerank R; sketch and Quest; plain KV dtypes).
  int32_t rerank_factor = 0;
  // Hierarchical scoring (CUDA; docs/gpu-sparse.md): 0 = off; N > 0 = every candidate page is
  // first bounded by its sketch summary (per dim the page's max and min: an upper bound of the
  // max rule's score), and only the N best bounds of a row are scored token by token
  // (--sparse-page-shortlist N; N >= the budget's chunks).
  int32_t page_shortlist = 0;

  Status validate(int page_tokens) const;
  bool use_sparse(int32_t n_tokens) const { return n_tokens >= min_context; }
  int32_t budget_chunks() const { return budget_tokens / chunk_tokens; }
  int32_t sink_chunks() const { return (sink_tokens + chunk_tokens - 1) / chunk_tokens; }
  // Upper bound on the size of any selection (a window not aligned to C spans one more chunk;
  // candidates that fit the budget in tokens may end with a partial chunk).
  int32_t max_selected_chunks() const {
    return budget_chunks() + 1 + sink_chunks() + (window_tokens + chunk_tokens - 1) / chunk_tokens + 1;
  }
};

// The smallest piece (one kv head's K|V of one chunk) a host → device fetch moves at the bus's
// full rate (ARCHITECTURE.md, measured bus limits: ≥ 2 KiB to use the bus, ≥ 4 KiB for ~47 GB/s).
inline constexpr int64_t kMinFetchPieceBytes = 4096;

// The default chunk size (--sparse-chunk 0): the smallest power of two C dividing the page
// size whose piece, C · token_bytes (K|V of one token of one kv head, scales included), is at
// least kMinFetchPieceBytes; the page size if none is. Smaller chunks select more finely (more
// attention mass per budget token), so C is as small as the bus allows: f16 KV gives C = 4
// for head_dim 256 (Gemma 3), 16 for head_dim 64 (SmolLM2); int8 KV gives 8 and 16.
int32_t auto_chunk_tokens(int64_t token_bytes, int32_t page_tokens);

inline int32_t n_chunks_of(int32_t n_tokens, int chunk_tokens) { return (n_tokens + chunk_tokens - 1) / chunk_tokens; }

// Per-thread scratch a caller may pass to avoid allocations per call.
struct SelectScratch {
  std::vector<float> prep;     // [prep_floats]
  std::vector<float> scores;   // raw [n candidate chunks][score_stride], then ranking [n candidate chunks] (stride > 1)
  std::vector<int32_t> ids;    // [n candidate chunks]
};

struct SelectInput {
  int layer = 0;
  int kv_head = 0;
  const float* q = nullptr;          // [n_q][head_dim] the query heads sharing kv_head (GQA group)
  int n_q = 1;
  std::span<const int32_t> blocks;   // the sequence's block table
  int32_t n_tokens = 0;              // keys 0 .. n_tokens-1 are stored (the step's own key included)
  ThreadPool* pool = nullptr;        // optional: split scoring of long contexts
  SelectScratch* scratch = nullptr;  // optional
};

// The common rule given chunk scores: forced sinks and window, the top budget_chunks() of the
// chunks in between by score (NaN ranks last; ties prefer the later chunk), ascending.
// `scores` holds the scores of chunks [sink_end, window_begin) (candidate_range()).
void select_top_chunks(std::span<const float> candidate_scores, int32_t n_tokens, const SparseConfig& cfg,
                       std::vector<int32_t>& chunks_out, std::vector<int32_t>* id_scratch = nullptr);
// [first, last) chunk ids that compete for the budget (between sinks and window); may be empty.
std::pair<int32_t, int32_t> candidate_range(int32_t n_tokens, const SparseConfig& cfg);
// Whether the candidates' tokens all fit in budget_tokens (then every chunk is selected, even
// when a partial last chunk makes them one more than budget_chunks()).
bool candidates_fit(int32_t n_tokens, const SparseConfig& cfg);

// acc[g] = log(exp(acc[g]) + exp(l[g])) for g < G, stable (-inf + -inf stays -inf): one more
// chunk's per-head log masses added to running log totals.
void log_add_exp(float* acc, const float* l, int G);

// The group-mass ranking (SparseConfig::chunk_mass_scale): from per-head log masses raw
// [n_cand][G] and each head's log mass outside the candidates (fixed [G]: sinks and window),
// ranking[c] = Σ_g exp(raw[c][g] − lse_g), with lse_g the head's log total.
void group_mass_ranking(const float* raw, int n_q, int32_t n_cand, const float* fixed, float* ranking);

// Scratch for ChunkSelector::select_batch (reused across steps).
struct BatchSelectScratch {
  struct Task {
    int32_t item, chunk_begin, chunk_end;  // score chunks [chunk_begin, chunk_end) of ins[item]
  };
  std::vector<Task> tasks;
  std::vector<int64_t> offset;                 // [n items] start of the item's raw scores in `scores` (-1: none)
  std::vector<float> scores;                   // per item: raw [n_cand][score_stride], then ranking [n_cand] (stride > 1)
  std::vector<std::vector<int32_t>> ids;       // [n_threads][n candidate chunks]
  std::vector<float> prep;                     // [n items][prep_floats]
  std::unique_ptr<std::atomic<int32_t>[]> left;  // [n items] scoring tasks not finished
  size_t left_size = 0;
};

class ChunkSelector {
 public:
  explicit ChunkSelector(const SparseConfig& cfg) : cfg_(cfg) {}
  virtual ~ChunkSelector() = default;
  virtual const char* name() const = 0;
  const SparseConfig& config() const { return cfg_; }

  // Ascending unique chunk ids for this (layer, kv head, query). Const and thread-safe.
  void select(const SelectInput& in, std::vector<int32_t>& chunks_out) const;

  // Many selections at once (one decoder step: every (token, kv head) that selects). The
  // scoring of all of them is cut into tasks of at most kChunksPerTask chunks and spread over
  // the pool in one pass, then the top-k of every selection runs in a second pass, so a
  // step with fewer selections than threads (one sequence, few kv heads) still uses every
  // thread. outs[i] gets what select(ins[i]) would give; ins[i].pool/scratch are ignored.
  static constexpr int32_t kChunksPerTask = 256;
  void select_batch(std::span<const SelectInput> ins, std::span<std::vector<int32_t>> outs,
                    BatchSelectScratch& scratch, ThreadPool* pool) const;

  // Per-selection state computed once and shared by every chunk_scores call of that
  // selection (the sketch selector's projected queries): prep_floats() floats, filled by
  // prepare().
  virtual int prep_floats(int /*n_q*/) const { return 0; }
  virtual void prepare(const SelectInput& /*in*/, float* /*prep*/) const {}
  // out [chunk_end - chunk_begin][score_stride(n_q)]: what the selector keeps per chunk; with
  // stride 1 the ranking score itself (higher: more relevant).
  virtual void chunk_scores(const SelectInput& in, const float* prep, int32_t chunk_begin, int32_t chunk_end,
                            float* out) const = 0;
  virtual int score_stride(int /*n_q*/) const { return 1; }
  // Stride > 1, once every candidate is scored: raw [n_cand][stride] → ranking [n_cand] (a
  // score may depend on all chunks, such as a per-head normaliser). raw stays readable after.
  virtual void finish_scores(const SelectInput& /*in*/, const float* /*prep*/, const float* /*raw*/,
                             int32_t /*n_cand*/, float* /*ranking*/) const {}
  // Once the ranking is final: a selector may take candidates out (ranking -inf) before the
  // top-k (the sketch selector's page shortlist, SparseConfig::page_shortlist).
  virtual void restrict_candidates(const SelectInput& /*in*/, const float* /*prep*/, int32_t /*n_cand*/,
                                   float* /*ranking*/) const {}
  // Floats one selection of n_cand candidates keeps: raw, then (stride > 1) the ranking.
  int64_t score_floats(int n_q, int32_t n_cand) const {
    const int st = score_stride(n_q);
    return static_cast<int64_t>(n_cand) * (st > 1 ? st + 1 : 1);
  }
  // Where the ranking of a selection whose raw scores start at `raw` lives.
  float* ranking_of(float* raw, int n_q, int32_t n_cand) const {
    const int st = score_stride(n_q);
    return st > 1 ? raw + static_cast<int64_t>(n_cand) * st : raw;
  }

 protected:
  // Group-mass selectors (raw = per-head log masses, stride n_q): fixed [n_q] = each head's
  // log mass over the forced chunks (sinks and window), from chunk_scores one chunk at a time
  // — the part of every head's softmax normaliser the candidates do not hold.
  void forced_log_mass(const SelectInput& in, const float* prep, float* fixed) const;

  SparseConfig cfg_;
};

// Scores a chunk by the max over its tokens of max_g (q_g·mu + q̂_g·s_t) (sketch_store.h), or
// with cfg.chunk_mass_scale > 0 by the group mass (SparseConfig): the per-head log masses of
// the chunks are kept (raw [n_cand][G]; the estimated tail reads them too) and normalised by
// each head's total in finish_scores, whose sink and window part prepare() computes.
class SketchTopKSelector final : public ChunkSelector {
 public:
  // Checks cfg against the store (C divides P).
  static Result<std::unique_ptr<SketchTopKSelector>> create(const SketchStore& store, const SparseConfig& cfg);
  const char* name() const override { return "sketch"; }
  int prep_floats(int n_q) const override;
  // prep: q̂ [G][rank] | bias [G] | (group mass) log mass of the sinks and window [G]
  void prepare(const SelectInput& in, float* prep) const override;
  void chunk_scores(const SelectInput& in, const float* prep, int32_t chunk_begin, int32_t chunk_end,
                    float* out) const override;
  int score_stride(int n_q) const override { return group_mass() ? n_q : 1; }
  void finish_scores(const SelectInput& in, const float* prep, const float* raw, int32_t n_cand,
                     float* ranking) const override;
  void restrict_candidates(const SelectInput& in, const float* prep, int32_t n_cand, float* ranking) const override;

 private:
  SketchTopKSelector(const SketchStore& store, const SparseConfig& cfg) : ChunkSelector(cfg), store_(store) {}
  bool group_mass() const { return cfg_.chunk_mass_scale > 0.0f; }
  const SketchStore& store_;
};

}  // namespace hs
