// sparse/sparse_runtime.h — what the decoder needs to run sparse attention: the sketch or
// Quest metadata of every stored key, the chunk selector, and the per-step accounting.
//
// The decoder calls on_key() for every key it stores (full-attention layers only) and, for a
// decode token whose context reaches SparseConfig::min_context on a full-attention layer,
// select() per kv head; attention then runs over the selected chunks only (exact softmax,
// backend/cpu_sparse_attention.h on the CPU). Sliding-window layers never select: they read only their window.
// Metadata pages share the KV cache's block ids (a prefix-cache page shares its sketches).
// Counters are atomics so selections running on several threads can add to them.
// Cost per decode token per full layer and kv head: scoring reads n_tokens · rank · 2 bytes
// (sketch, f16) or n_chunks · 2 · head_dim · 4 bytes (Quest), plus the selected K|V.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sparse/chunk_value_means.h"
#include "sparse/exact_rerank.h"
#include "sparse/hot_chunks.h"
#include "sparse/quest.h"
#include "sparse/selector.h"
#include "sparse/sketch_basis.h"
#include "sparse/sketch_store.h"
#include "sparse/sparse_kernels.h"

namespace hs {

enum class SparseMode { kOff, kSketch, kQuest, kOracle };  // oracle: eval ceiling (oracle_selector.h)
const char* sparse_mode_name(SparseMode m);
Result<SparseMode> parse_sparse_mode(std::string_view s);  // off | sketch | quest | oracle

// Cumulative counters (reset with SparseRuntime::reset_stats()).
struct SparseStats {
  int64_t sparse_heads = 0;    // (token, layer, kv head) attentions that selected
  int64_t dense_heads = 0;     // full-attention (token, layer, kv head) attentions that ran dense
  int64_t keys_total = 0;      // keys those sparse attentions would have read densely
  int64_t keys_selected = 0;   // keys they read
  int64_t score_bytes = 0;     // sketch / Quest metadata bytes read for scoring
  int64_t kv_bytes = 0;        // K|V bytes read by sparse attentions (selected keys)
  // Device tier (sparse/hot_chunks.h), when the decoder has one: the selected chunks that
  // are not sinks, window or the chunk being filled, looked up in the hot slots.
  int64_t fetch_hits = 0;       // found in a slot
  int64_t fetch_misses = 0;     // copied into a slot from the KV page
  int64_t fetch_bytes = 0;      // bytes those copies moved (misses × piece bytes)
  int64_t fetch_evictions = 0;  // misses that evicted another chunk
  int64_t fetch_refused = 0;    // chunks read from the pages because every slot was pinned
  int64_t resident_bytes = 0;   // rows copied into the resident sinks / window rings
  int64_t fetch_steps = 0;      // decoder steps that used the device tier
};

// Attention-mass recall of the two oracle selections of one step (backend/cpu_sparse_attention.h,
// oracle_mass_recall): ranked by the exact max logit, and by the exact softmax mass.
struct OracleRecall {
  double exact_max = 1.0;
  double mass = 1.0;
};

class SparseRuntime {
 public:
  struct Geometry {
    int n_layer, n_kv_heads, head_dim, page_tokens;
    int32_t n_blocks;            // the KV cache's pool size (same block ids)
    int64_t kv_token_bytes;      // K + V of one token of one kv head (byte counters)
    std::vector<bool> full_layer;  // [n_layer] true: full attention (sparse applies)
  };
  // kSketch needs `basis` (checked against the geometry); kQuest ignores it; kOracle and the
  // exact rerank (cfg.rerank_factor) read the exact keys of `kv` with the model's attention
  // scale. `kernels`: the backend's host sparse kernels (Backend::host_sparse_kernels), which
  // must outlive the runtime; null for a backend that keeps sketches and selects on its own
  // device (kSketch only: the runtime then holds the configuration, basis and counters, and
  // on_key / select / select_batch must not be called).
  static Result<std::unique_ptr<SparseRuntime>> create(SparseMode mode, const SparseConfig& cfg, const Geometry& g,
                                                       std::unique_ptr<SketchBasis> basis,
                                                       const SparseKernels* kernels, const KvCache* kv = nullptr,
                                                       float attn_scale = 0.0f);

  SparseMode mode() const { return mode_; }
  // Whether selection runs here (the host sparse path); false: the backend selects itself.
  bool host_selection() const { return selector_ != nullptr; }
  const SparseConfig& config() const { return cfg_; }
  const ChunkSelector& selector() const { return *selector_; }
  const SketchStore* sketches() const { return sketches_.get(); }  // kSketch on the host path; null otherwise
  bool layer_sparse(int layer) const { return g_.full_layer[layer]; }
  int page_tokens() const { return g_.page_tokens; }
  bool use_sparse(int32_t n_keys) const { return cfg_.use_sparse(n_keys); }

  // Record the metadata of key k [head_dim] (and, with the estimated tail, value v) of
  // (layer, kv head, pos). Full layers only.
  void on_key(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* k,
              const float* v = nullptr);

  // Ascending chunk ids for q [n_q][head_dim] of (layer, kv head) over n_keys stored keys
  // (with the rerank: the selector's shortlist reranked from the exact keys); counts the
  // scoring bytes (sketch / Quest metadata, plus the reranked keys) and the selected keys.
  // `pool` (optional) splits the scoring of one long context over threads.
  void select(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q, int32_t n_keys,
              std::vector<int32_t>& chunks, SelectScratch& scratch, ThreadPool* pool = nullptr);
  // Many selections in one step (ChunkSelector::select_batch): ins[i] names (layer, kv head,
  // query, blocks, n_tokens); outs[i] gets its chunks. Counted as select() counts.
  void select_batch(std::span<const SelectInput> ins, std::span<std::vector<int32_t>> outs,
                    BatchSelectScratch& scratch, ThreadPool* pool);
  void count_dense(int64_t n_heads) { dense_heads_ += n_heads; }
  // A selection made by another backend's kernels (CUDA): n_sel selections over n_keys keys
  // each reading selected_keys, the scoring having read scored_tokens tokens' sketches of
  // sketch_token_bytes each (that backend's sketch format), and its exact rerank rerank_rows K
  // rows.
  void count_external(int64_t n_sel, int32_t n_keys, int64_t selected_keys, int64_t scored_tokens,
                      int64_t sketch_token_bytes, int64_t rerank_rows = 0);
  // The sketch basis (kSketch; null otherwise).
  const SketchBasis* basis() const { return basis_.get(); }
  // Estimated tail (SparseConfig::tail_estimate): after select_batch, the attention partial of
  // ins[item]'s unselected chunks (sparse/tail_estimate.h); `selected` is outs[item].
  bool tail_estimate() const { return means_ != nullptr; }
  void tail_partial(const SelectInput& in, const BatchSelectScratch& scratch, int64_t item,
                    std::span<const int32_t> selected, AttnPartial part) const;
  // One decoder step's device-tier counters (HotChunks::end_step).
  void count_fetch(const HotChunkStats& s);
  // What a backend that selects on its own device keeps there for this runtime (CUDA: the
  // flat sketches of every KV block, and the host tier's hot set); 0 where nothing is.
  void set_device_bytes(int64_t sketch_bytes, int64_t hot_set_bytes) {
    device_sketch_bytes_ = sketch_bytes;
    device_hot_bytes_ = hot_set_bytes;
  }
  int64_t device_sketch_bytes() const { return device_sketch_bytes_; }
  int64_t device_hot_set_bytes() const { return device_hot_bytes_; }

  // Attention-mass recall per layer (eval): when on, the decoder reports each selection's
  // recall here.
  void set_measure_recall(bool on) { measure_recall_ = on; }
  bool measure_recall() const { return measure_recall_; }
  void add_recall(int layer, double recall);
  std::vector<double> recall_per_layer() const;  // [n_layer] mean recall (NaN: none measured)
  // The oracle selections' recall of the same steps (oracle_mass_recall, backend/cpu_sparse_attention.h).
  void add_oracle_recall(int layer, const OracleRecall& recall);
  std::vector<OracleRecall> oracle_recall_per_layer() const;  // [n_layer] means (NaN: none measured)

  SparseStats stats() const;
  void reset_stats();
  // Adds another runtime's counters (a tensor-parallel rank's, folded into the model's runtime
  // after each step: model/decoder.cpp).
  void add_stats(const SparseStats& s);

 private:
  int64_t device_sketch_bytes_ = 0, device_hot_bytes_ = 0;
  SparseRuntime() = default;
  // The counters of one selection of `chunks` over n_keys keys; rerank_rows: key rows the
  // rerank read.
  void count_selection(int32_t n_keys, std::span<const int32_t> chunks, int64_t rerank_rows = 0);

  SparseMode mode_ = SparseMode::kOff;
  SparseConfig cfg_;
  Geometry g_;
  std::unique_ptr<SketchBasis> basis_;
  std::unique_ptr<SketchStore> sketches_;
  std::unique_ptr<QuestStore> quest_;
  std::unique_ptr<ChunkValueMeans> means_;  // estimated tail only
  std::unique_ptr<ChunkSelector> selector_;   // with the rerank: the shortlist's selector
  std::unique_ptr<ExactReranker> rerank_;     // cfg.rerank_factor ≥ 2 only
  // select_batch scratch for the rerank.
  struct RerankTask {
    int64_t item, begin, end;  // score shortlisted chunks [begin, end) of selection `item`
  };
  std::vector<ExactReranker::Work> rerank_work_;  // [n selections]
  std::vector<RerankTask> rerank_tasks_;

  std::atomic<int64_t> sparse_heads_{0}, dense_heads_{0}, keys_total_{0}, keys_selected_{0}, score_bytes_{0},
      kv_bytes_{0};
  std::atomic<int64_t> resident_bytes_{0};
  std::atomic<int64_t> fetch_hits_{0}, fetch_misses_{0}, fetch_bytes_{0}, fetch_evictions_{0}, fetch_refused_{0},
      fetch_steps_{0};
  bool measure_recall_ = false;
  mutable std::mutex recall_mu_;
  std::vector<double> recall_sum_;   // [n_layer]
  std::vector<int64_t> recall_n_;    // [n_layer]
  std::vector<OracleRecall> oracle_sum_;  // [n_layer]
  std::vector<int64_t> oracle_n_;         // [n_layer]
};

// A random orthonormal basis per (layer, kv head) (speed benchmarks on dummy weights).
SketchBasis random_sketch_basis(int n_layer, int n_kv_heads, int head_dim, int rank, uint64_t seed);

}  // namespace hs
