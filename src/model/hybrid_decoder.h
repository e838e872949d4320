// model/hybrid_decoder.h — the forward pass of the hybrid Gated-DeltaNet models (qwen35:
// Qwen3.5 dense; qwen3next: Qwen3-Next, MoE), written once against the Backend op table like
// model/decoder.h; the two differ only where the config says so (below).
//
// Per layer: x += mixer(attn_norm(x)); x += ffn(post_attention_norm(x)); norms are
// zero-centred, stored as 1 + w. The FFN is a SiLU GLU (qwen35) or, config.is_moe()
// (qwen3next), the MoE block: softmax router → top-k (renormalised) → the chosen experts' SiLU
// GLUs weighted (Backend moe_route / moe_experts), plus the shared expert's GLU times
// sigmoid(x · ffn_gate_inp_shexp) (add_sigmoid_gated). The mixer is either
//  - Gated DeltaNet (config.layer_is_linear): qkv / z / b / a projections (qwen3next: b and a
//    from one ssm_ba projection grouped per key head, split at run time), depthwise causal
//    conv (kernel 4) + SiLU over q|k|v, L2-normed q (scaled by k_dim^-0.5) and k, gates
//    g = ssm_a · softplus(a + dt_bias), beta = sigmoid(b), the gated delta rule (chunked for
//    prefill, recurrent for decode) over the sequence's recurrent state, gated RMSNorm with z,
//    out projection (V heads tiled for qwen35 files, grouped for qwen3next: config.ssm_v_tiled); or
//  - gated full attention: q and gate interleaved per head in one projection, QK RMSNorm,
//    partial NeoX RoPE (rope_dims of head_dim), paged-KV attention, output * sigmoid(gate).
// Only the full-attention layers have KV: the caller's KvCache has kv_geometry()'s
// n_attn_layers layers. Recurrent state lives in slots handed out by a RecurrentPool
// (kv/recurrent_pool.h) made over that KvCache; this decoder holds the slot memory, per linear
// layer a conv tensor [n_slots][(kernel - 1) · conv_dim] and a delta tensor
// [n_slots][n_v · k_dim · v_dim] f32 in its backend (allocated for the first pool it sees, or by
// reserve_states). A sequence's state cannot be rebuilt from KV: a sequence resumed at a position
// > 0 without its slot (unless the prefix cache restored a checkpoint into it) is refused.
// The engine drives it through LanguageModel (model/language_model.h) once set_states() has
// attached the pool of its KvCache: the pool's n_total() slots (live + checkpoints) are the
// state memory, and the pool's checkpoint copies are this decoder's copy_state().
// Runs on the CPU and CUDA backends (CUDA: MoE experts in 16-bit). Sparse attention (LanguageModel::
// set_sparse) and the key observer act on the full-attention layers, by KV layer. Not yet: MTP.
// Tensor parallelism (model/tensor_parallel.h, model/rank_group.h): each rank runs the same layer
// code over its share, described by its rank_config (its attention and kv heads, FFN or every
// expert's columns, linear-layer key and value heads), with its own recurrent state slots (the
// pool's slot numbers on every rank); the o of each mixer and FFN is summed over the ranks and
// the logits' vocabulary shares gathered, as in Decoder.
// Cost per token: the weights once per batch (matmuls), O(context · q_dim) attention on the
// full layers, 4 · n_v · k_dim · v_dim flops per linear layer for the delta rule; state memory
// n_linear · ((kernel - 1) · conv_dim + n_v · k_dim · v_dim) · 4 bytes per slot.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "kv/kv_cache.h"
#include "kv/recurrent_pool.h"
#include "model/batch.h"
#include "model/language_model.h"
#include "model/model_config.h"
#include "model/rank_group.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace hs {

class HybridDecoder final : public LanguageModel {
 public:
  // A GGUF file with llama.cpp's qwen35 / qwen3next names.
  // tensor_parallel: ranks (CUDA: GPUs 0..N-1; CPU: N backends sharing the thread pool, for tests).
  static Result<std::unique_ptr<HybridDecoder>> load(const std::string& path, Device device = Device::kCpu,
                                                     int tensor_parallel = 1);
  // A Hugging Face checkpoint directory (config.json + model.safetensors; model/hf_model.h).
  static Result<std::unique_ptr<HybridDecoder>> load_hf(const std::string& dir, Device device = Device::kCpu,
                                                        int tensor_parallel = 1);
  static Result<std::unique_ptr<HybridDecoder>> create(std::unique_ptr<gguf::File> file, Device device = Device::kCpu,
                                                       int tensor_parallel = 1);

  const ModelConfig& config() const override { return config_; }
  const gguf::File& file() const override { return *file_; }
  // Rank 0's backend (the one a single-rank model has).
  Backend& backend() const override { return *ranks_.front().backend; }
  int tensor_parallel_size() const override { return ranks_.size(); }
  // What rank r owns (heads, FFN columns, key heads, vocabulary rows).
  const TpSlice& rank_slice(int r) const { return ranks_[r].slice; }
  Status rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) override;
  Status set_kv_tier(const Backend::KvTier& t) override;
  int64_t weight_bytes() const override;
  void set_matmul_precision(MatmulPrecision p) {
    for (Rank& r : ranks_.ranks()) r.backend->set_matmul_precision(p);
  }
  MatmulPrecision matmul_precision() const { return backend().matmul_precision(); }
  // The KvCache geometry this model needs: one layer per full-attention layer.
  KvGeometry kv_geometry(int page_tokens = 16, KvDtype dtype = kDefaultKvDtype) const override;
  // Every full-attention layer may be sparse (the KV layers are only those).
  std::vector<bool> sparse_kv_layers() const override { return std::vector<bool>(config_.n_attn_layers(), true); }
  // Bytes of recurrent state per sequence slot (every rank's share together).
  int64_t state_bytes_per_slot() const;

  Status reserve(int64_t max_tokens) override;
  // State memory for n_slots sequences (drops what was there: call before sequences run).
  Status reserve_states(int32_t n_slots);
  // The pool the engine's forward() uses (made over the engine's KvCache; must outlive its use;
  // null detaches): state memory for its n_total() slots (dropping what was there), and its
  // checkpoint copier.
  Status set_states(RecurrentPool* states);
  RecurrentPool* states() const override { return states_; }
  // Copies the state of slot src to slot dst (every linear layer's conv and delta state, every rank).
  Status copy_state(int32_t src, int32_t dst);

  // LanguageModel::forward over the attached pool (an error when none is attached).
  Result<std::span<float>> forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                   ThreadPool& pool) override;

  // As Decoder::forward; `states` must be made over `kv`.
  Result<std::span<float>> forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, RecurrentPool& states,
                                   ThreadPool& pool);
  Status forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, RecurrentPool& states, ThreadPool& pool,
                 std::vector<float>& logits);

 private:
  struct Rank;
  HybridDecoder() = default;
  Status prepare_weights(Rank& R);
  Status reserve_logits(int64_t rows);
  Status bind_sparse() override;
  Status run_layers(int64_t n);
  // Σ over the ranks of the workspace's o (rows [0, n)); nothing with one rank.
  Status all_reduce_o(int64_t n);
  // One rank's share of a layer: the mixer, then (after the sum of o) the residual add and the FFN.
  Status linear_mixer(Rank& R, int il, int64_t n);
  Status attention_mixer(Rank& R, int il, int64_t n);
  Status dense_ffn(Rank& R, int il, int64_t n);  // h -> o
  Status moe_ffn(Rank& R, int il, int64_t n);    // h -> o

  struct LayerTensors {
    Tensor attn_norm, ffn_norm, w_gate, w_up, w_down;
    Tensor wq, wk, wv, wo, q_norm, k_norm;                                     // full attention
    Tensor ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_out, ssm_conv, ssm_a, ssm_dt_bias, ssm_norm;  // linear
    Tensor ssm_ba;                                                             // linear, qwen3next
    Tensor ffn_gate_inp, gate_exps, up_exps, down_exps;                        // MoE (weights.h shapes)
    Tensor gate_shexp, up_shexp, down_shexp, gate_inp_shexp;                   // MoE shared expert
    int kv_layer = -1;     // full attention: its layer in the KvCache
    int state_layer = -1;  // linear: its index among the state tensors
  };
  // Activations of one step, [capacity rows][width] f32.
  struct Workspace {
    Buffer mem;
    int64_t capacity = 0;
    Tensor x, h, o;              // [n][n_embd]
    Tensor qg;                   // [n][2 · q_dim] q | gate per head (the gate is read in place)
    Tensor q, att;               // [n][q_dim]
    Tensor k, v, k_pre;          // [n][kv_dim] (k_pre: keys before RoPE, for the key observer)
    Tensor ffn_gate, ffn_up;     // [n][max(n_ff, n_ff_shexp)] (dense or shared-expert GLU)
    Tensor shexp, shexp_gate;    // [n][n_embd] shared expert out, [n][1] its gate logit (MoE)
    Tensor router, moe_w;        // [n][n_expert] router logits, [n][n_expert_used] weights (MoE)
    Tensor moe_ids;              // [n][n_expert_used] I32 chosen experts (MoE)
    Tensor ssm_ba;               // [n][2 · n_v] fused b | a per key head (qwen3next)
    Tensor qkv, conv;            // [n][conv_dim] projection, conv output (q | k | v)
    Tensor z, core;              // [n][value_dim]
    Tensor ssm_b, ssm_a;         // [n][n_v] beta, then g
    LogitRows out;               // hsel, logits [n_out][rank n_vocab] (and their host copy)
  };
  // One tensor-parallel rank (rank_group.h) with its model view, weights, workspace and state.
  struct Rank : RankBase {
    ModelConfig cfg;  // rank_config: this rank's heads, FFN columns, key / value heads
    Tensor token_embd, output, output_norm;
    std::vector<LayerTensors> layers;
    Workspace ws;     // widths of cfg
    Buffer state_mem;
    std::vector<Tensor> conv_state, delta_state;  // [n_linear] of [n_slots][...] of cfg (see the header)
  };
  // Bytes of one slot's recurrent state for the linear layers of model view c.
  static int64_t state_bytes(const ModelConfig& c);

  std::unique_ptr<gguf::File> file_;
  ModelConfig config_;
  ModelWeights weights_;
  ShardStore shards_;  // N > 1: the ranks' gathered rows, columns and vectors
  RankGroup<Rank> ranks_;
  RecurrentPool* states_ = nullptr;
  int32_t state_slots_ = 0;
  ForwardPlan plan_;
  std::vector<int32_t> next_pos_;
};

}  // namespace hs
