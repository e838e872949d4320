// model/decoder.h — the pre-norm transformer decoder shared by llama, gemma3 and qwen2,
// written once against the Backend op table (backend/backend.h).
//
// The architectures are the same graph up to flags in ModelConfig: gemma3 adds embedding
// scaling, per-head QK RMSNorm, post-attention/post-FFN norms, GELU-tanh gating, NeoX RoPE
// with a local theta on sliding-window layers; qwen2 adds biases to the q/k/v projections
// and rotates NeoX-style. (Hybrid models such as Qwen3-Next get their
// own file.) forward() plans the step on the host (model/forward_plan.h), then runs one Batch
// of several sequences as backend ops: matmuls over all batch tokens at once, attention
// per (token, head) over each sequence's pages. No kernel is called from here.
// Memory: the backend's copy of the weights (the CPU reads the mmap'd GGUF in place; CUDA
// holds f16 or bf16) and a Workspace of activations sized for the largest step (grown, never per
// step). Cost per token: the weights once per batch (matmul), plus O(context * q_dim)
// attention.
// Tensor parallelism (model/tensor_parallel.h): with N > 1 ranks the same layer code runs once per
// rank in lockstep, each rank on its own backend with its heads' and FFN columns' weights, its own
// workspace and its kv heads' pages (a KvCache per rank under the engine's block ids); the
// communicator sums the partial outputs of the o and down projections and gathers the vocabulary
// shares of the logits. N = 1 is the plain decoder: one rank, the engine's cache, no collective.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/language_model.h"
#include "model/model_config.h"
#include "model/rank_group.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "model/workspace.h"
#include "sparse/hot_chunks.h"
#include "sparse/sparse_runtime.h"

namespace hs {

class Decoder final : public LanguageModel {
 public:
  // Opens and maps the GGUF file, reads config and weights (checked) and hands the weights
  // to a backend for `device` (cuda: uploaded as f16 or bf16; a clear error when no GPU or too little
  // memory).
  // tensor_parallel: ranks (CUDA: GPUs 0..N-1; CPU: N backends sharing the thread pool, for tests).
  static Result<std::unique_ptr<Decoder>> load(const std::string& path, Device device = Device::kCpu,
                                               int tensor_parallel = 1);
  // The same over a parsed file the decoder takes over (an in-memory model: model/dummy_model.h).
  static Result<std::unique_ptr<Decoder>> create(std::unique_ptr<gguf::File> file, Device device = Device::kCpu,
                                                 int tensor_parallel = 1);

  const ModelConfig& config() const override { return config_; }
  const gguf::File& file() const override { return *file_; }
  // Rank 0's backend (the one a single-rank model has).
  Backend& backend() const override { return *ranks_.front().backend; }
  int tensor_parallel_size() const override { return ranks_.size(); }
  Status rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) override;
  Status set_kv_tier(const Backend::KvTier& t) override;
  // What rank r owns (heads, FFN columns, vocabulary rows).
  const TpSlice& rank_slice(int r) const { return ranks_[r].slice; }
  // Bytes of every tensor in the file: what one decode step streams from memory for weights.
  int64_t weight_bytes() const override;
  // One KV layer per model layer.
  KvGeometry kv_geometry(int page_tokens = 16, KvDtype dtype = kDefaultKvDtype) const override {
    return KvGeometry{config_.n_layer, config_.n_head_kv, config_.head_dim, page_tokens, dtype};
  }
  void set_matmul_precision(MatmulPrecision p) {
    for (Rank& r : ranks_.ranks()) r.backend->set_matmul_precision(p);
  }
  MatmulPrecision matmul_precision() const { return backend().matmul_precision(); }

  // Every layer may be sparse but gemma3's sliding-window ones.
  std::vector<bool> sparse_kv_layers() const override;

  // Size the workspace for steps of up to max_tokens tokens (forward grows it when a step is
  // larger; call this at start with the scheduler's token budget to keep growth off the path).
  Status reserve(int64_t max_tokens) override;

  // Appends K/V of every batch token to its sequence (reserving pages) and returns the
  // logits rows of the tokens with want_logits, [n_logit_rows][n_vocab] in host memory this
  // decoder owns (the caller may change them in place: sampling does), valid until the next forward: on the CPU the workspace itself, on a device a
  // page-locked copy (Backend::alloc_host: a pageable destination halves the copy rate or worse).
  Result<std::span<float>> forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                   ThreadPool& pool) override;
  // The same, copied into `logits` (callers that keep the rows past the next step).
  Status forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, ThreadPool& pool,
                 std::vector<float>& logits);

 private:
  struct LayerTensors {
    Tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn_norm, ffn_norm, w_gate, w_up, w_down, post_ffn_norm;
    Tensor bq, bk, bv;  // [q_dim], [kv_dim] x2; empty when the model has no q/k/v biases
  };
  // Activations of one step, [capacity rows][width] f32 on the rank's device; q / k / v / gate /
  // up are the rank's share (q_dim, kv_dim, n_ff over the ranks).
  struct Workspace {
    Buffer mem;
    int64_t capacity = 0;     // tokens
    Tensor x, h, o;           // [n][n_embd] residual stream, normed input, projection output
    Tensor q, att;            // [n][rank q_dim]
    Tensor k, v, k_pre;       // [n][rank kv_dim] (k_pre: keys before RoPE, for the key observer)
    Tensor gate, up;          // [n][rank n_ff]
    LogitRows out;            // hsel, logits [n_out][rank n_vocab] (and their host copy)
  };
  // One tensor-parallel rank (rank_group.h: its backend, slice, pages, runtime and plan), with its
  // weights and workspace.
  struct Rank : RankBase {
    Tensor token_embd, output, output_norm;
    std::vector<LayerTensors> layers;
    Workspace ws;
  };

  Decoder() = default;
  Status prepare_weights(Rank& R);
  Status reserve_logits(int64_t rows);
  Status bind_sparse() override;
  // Σ over the ranks of workspace tensor `which` (rows [0, n)); nothing with one rank.
  Status all_reduce(Tensor Workspace::*which, int64_t n);
  Status run_layers(int64_t n);
  // One layer's halves on one rank: attention ending in o = att · wo (a partial sum across ranks);
  // the residual add and the FFN ending in o = act · down (partial); the residual add that closes it.
  Status attention_block(Rank& R, int il, int64_t n);
  Status ffn_block(Rank& R, int il, int64_t n);
  Status close_layer(Rank& R, int il, int64_t n);
  Status output_rows(Rank& R, int64_t n_out);

  std::unique_ptr<gguf::File> file_;
  ModelConfig config_;
  ModelWeights weights_;             // host views (mmap'd GGUF) and host norm vectors
  ShardStore shards_;                // N > 1: the ranks' column slices and sliced vectors
  RankGroup<Rank> ranks_;            // [N]
  ForwardPlan plan_;
  std::vector<int32_t> next_pos_;
};

}  // namespace hs
