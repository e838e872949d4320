// model/decoder.h — the pre-norm transformer decoder shared by llama and gemma3.
//
// Both architectures are the same graph up to flags in ModelConfig: gemma3 adds embedding
// scaling, per-head QK RMSNorm, post-attention/post-FFN norms, GELU-tanh gating, NeoX RoPE
// with a local theta on sliding-window layers. (Hybrid models such as Qwen3-Next get their
// own file.) forward() runs one Batch of several sequences in one pass: matmuls over all
// batch tokens at once, attention per (token, head) over each sequence's pages.
// Cost per token: the weights once per batch (matmul), plus O(context * q_dim) attention.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "kv/kv_quant.h"
#include "sparse/hot_chunks.h"
#include "sparse/sparse_attention.h"
#include "sparse/sparse_runtime.h"

namespace hs {

// How matmuls treat activations (docs/cpu-engine.md, "Matmul precision"):
//  kExact  float32 activations, weights dequantized in registers (cpu::matmul_exact);
//  kInt8x2 8-bit activations plus an 8-bit residual, integer dots (cpu::matmul);
//  kInt8   8-bit activations as llama.cpp does: fastest, but moves logits by ~0.1.
// kExact and kInt8x2 both agree with transformers (golden tests); kInt8 does not.
enum class MatmulPrecision { kExact, kInt8x2, kInt8 };
inline constexpr MatmulPrecision kDefaultMatmulPrecision = MatmulPrecision::kInt8x2;
const char* matmul_precision_name(MatmulPrecision p);
Result<MatmulPrecision> parse_matmul_precision(std::string_view name);  // exact | int8x2 | int8

class Decoder {
 public:
  // Opens and maps the GGUF file, reads config and weights (checked).
  static Result<std::unique_ptr<Decoder>> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const gguf::File& file() const { return *file_; }
  // Bytes of every tensor in the file: what one decode step streams from memory for weights.
  int64_t weight_bytes() const;
  void set_matmul_precision(MatmulPrecision p) { precision_ = p; }
  MatmulPrecision matmul_precision() const { return precision_; }

  // Sparse attention (null: dense everywhere). Not owned; must outlive the decoder's use.
  void set_sparse(SparseRuntime* rt) { sparse_ = rt; }
  SparseRuntime* sparse() const { return sparse_; }
  // Device tier of the sparse path (null: sparse attention reads the KV pages directly). Not
  // owned. Used for the full-attention layers it has slots for, when its chunk size is the
  // sparse runtime's: the selected chunks other than sinks, window and the chunk being
  // filled are fetched into hot slots and attention reads them there; the fetch counters
  // of each step go to the sparse runtime's stats (docs/sparse-attention.md).
  void set_hot_chunks(HotChunks* h) { hot_ = h; }
  HotChunks* hot_chunks() const { return hot_; }
  // Called once per layer per forward with the step's keys before and after RoPE and its
  // queries after RoPE (`hindsight fit-sketch`): k_pre, k_post [n][kv_dim], q_post [n][q_dim].
  using KeyObserver =
      std::function<void(int layer, const float* k_pre, const float* k_post, const float* q_post, const float* v,
                         int64_t n)>;
  void set_key_observer(KeyObserver fn) { key_observer_ = std::move(fn); }

  // Appends K/V of every batch token to its sequence (reserving pages) and writes
  // logits rows for tokens with want_logits: logits [n_logit_rows][n_vocab].
  Status forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, ThreadPool& pool,
                 std::vector<float>& logits);

 private:
  Decoder() = default;
  Status mm(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool& pool) const;
  // Several weights on the same input in one pool dispatch (q/k/v, gate/up).
  Status mm_multi(std::span<const WeightView> ws, const float* x, int64_t n, std::span<float* const> ys,
                  ThreadPool& pool) const;
  void attention(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, int layer, ThreadPool& pool);
  // Fills sel_index_/selected_ for the (token, kv head) pairs that attend sparsely.
  void select_chunks(const Batch& batch, std::span<SeqKv* const> seqs, const KvCache& kv, int layer,
                     ThreadPool& pool);
  // Whether `layer`'s sparse attentions go through the device tier.
  bool tiered(int layer) const;
  // Leases for the selecting sequences, then the hot chunks of every selection into slots
  // (sel_slots_), one thread per kv head (each (layer, head) has its own hot set).
  void fetch_chunks(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, int layer, ThreadPool& pool);

  std::unique_ptr<gguf::File> file_;
  ModelConfig config_;
  ModelWeights weights_;
  MatmulPrecision precision_ = kDefaultMatmulPrecision;
  SparseRuntime* sparse_ = nullptr;
  HotChunks* hot_ = nullptr;
  bool hot_used_ = false;  // a fetch ran this step: end_step() is due
  KeyObserver key_observer_;

  // Scratch, grown to the largest batch seen.
  std::vector<float> x_, h_, q_, k_, v_, att_, o_, gate_, up_;  // [n][...]
  std::vector<float> rope_global_, rope_local_;                 // [n][cos | sin of head_dim / 2]
  struct AttnTask {
    int32_t token, kv_head, begin, end;  // keys [begin, end) of one kv head for one batch token
    int32_t piece_begin = -1, piece_end = -1;  // tiered: its chunks are pieces_[piece_begin, piece_end)
    int32_t tail_sel = -1;                     // >= 0: the estimated tail of selection tail_sel instead
  };
  std::vector<AttnTask> tasks_;                       // [n_tasks]
  std::vector<std::pair<int32_t, int32_t>> spans_;    // [n * n_kv_heads] task range per (token, kv head)
  std::vector<float> partials_;                       // [n_tasks][group][2 + head_dim]
  std::vector<cpu::AttnPartial> parts_;               // [n_tasks] views into partials_
  // Sparse selection (decode tokens on full-attention layers past min_context).
  std::vector<int32_t> seq_tokens_;                   // [n_seqs] batch tokens per sequence
  std::vector<int32_t> sel_items_;                    // [n_sel] t * n_kv_heads + kv_head
  std::vector<int32_t> sel_index_;                    // [n * n_kv_heads] index into sel_items_ or -1
  std::vector<std::vector<int32_t>> selected_;        // [n_sel] chosen chunk ids
  std::vector<SelectInput> sel_inputs_;               // [n_sel]
  BatchSelectScratch sel_scratch_;
  std::vector<KeyRange> ranges_;                      // scratch
  // Device tier (tiered layers only).
  std::vector<std::vector<int32_t>> sel_slots_;       // [n_sel][selected chunks] hot slot, or -1: read the page
  std::vector<std::pair<int32_t, int32_t>> sel_hot_;  // [n_sel] [begin, end) of the fetched chunks in selected_
  std::vector<std::vector<HotChunks::PendingCopy>> sel_copies_;  // [n_sel] misses to copy into their slots
  std::vector<uint8_t> sel_resident_;                 // [n_sel] the sequence has a sinks + ring region
  std::vector<PieceSpan> pieces_;                     // [n pieces of the layer's tiered tasks]
  std::vector<const uint8_t*> piece_src_;             // [n pieces] host piece to copy in first, or null
  std::vector<const uint8_t*> pending_;               // scratch [selected chunks]
  std::vector<float> k_pre_;                          // [n][kv_dim] keys before RoPE (observer only)
};

}  // namespace hs
