// model/model_config.h — architecture hyper-parameters read from GGUF metadata.
//
// One plain struct for every supported decoder architecture; the per-architecture forward
// passes read only this (never the GGUF keys). Derived values (head_dim, per-layer
// sliding-window flags, embedding scale) are computed once at load.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "formats/gguf.h"

namespace hs {

enum class Arch { kLlama, kGemma3, kQwen2, kQwen35, kQwen3Next };
enum class RopeStyle {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]) — llama GGUFs (Q/K rows permuted by the converter)
  kNeox,    // rotate halves (x[i], x[i + d/2]) — HF rotate_half; gemma3 and qwen2 GGUFs (not permuted)
};
enum class FfnActivation { kSilu, kGeluTanh };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;    // per-head K/Q/V width
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;

  RopeStyle rope_style = RopeStyle::kNormal;
  int rope_dims = 0;              // rotated dims per head (== head_dim for these archs)
  float rope_theta = 10000.0f;    // global (full-attention) layers
  float rope_theta_local = 10000.0f;  // sliding-window layers (gemma3)

  int sliding_window = 0;         // 0: no sliding-window layers
  std::vector<bool> layer_is_swa; // [n_layer]
  float embed_scale = 1.0f;       // gemma: sqrt(n_embd)
  float attn_scale = 1.0f;        // softmax scale, 1/sqrt(head_dim)
  float final_logit_softcap = 0;  // 0: none
  FfnActivation ffn_act = FfnActivation::kSilu;
  bool qk_norm = false;           // gemma3: RMSNorm on q and k per head
  bool post_norms = false;        // gemma3: post-attention and post-FFN norms
  bool qkv_bias = false;          // qwen2 (and llama files that have them): biases on q, k, v
  bool tied_output = false;       // output projection is token_embd

  // Hybrid models (qwen35: Qwen3.5 dense, qwen3next: Qwen3-Next MoE; model/hybrid_decoder.h):
  // Gated-DeltaNet layers beside gated full-attention layers. Empty layer_is_linear: not hybrid.
  std::vector<bool> layer_is_linear;  // [n_layer] true: Gated DeltaNet (recurrent state, no KV)
  int ssm_n_k_heads = 0;              // linear attention key heads (GGUF ssm.group_count)
  int ssm_n_v_heads = 0;              // value heads (ssm.time_step_rank)
  int ssm_k_dim = 0;                  // key head dim (ssm.state_size)
  int ssm_v_dim = 0;                  // value head dim (ssm.inner_size / n_v)
  int ssm_conv_kernel = 0;            // depthwise causal conv kernel (ssm.conv_kernel, 4)
  int n_mtp_layers = 0;               // MTP blocks after the n_layer decoder blocks (not run)
  bool attn_output_gate = false;      // q projection holds [q | gate] per head; out *= sigmoid(gate)
  // How the Gated-DeltaNet tensors are laid out (models-and-gguf.md §5): qwen35 files reorder the
  // V heads to tiled order (v-head j reads k-head j % n_k) and store beta / alpha apart; qwen3next
  // files keep transformers' grouped order (j / (n_v / n_k)) and one ssm_ba projection grouped per
  // key head ([b of its n_v / n_k v-heads | a of them] per k-head), split at run time.
  bool ssm_v_tiled = true;
  bool ssm_fused_ba = false;

  // Mixture-of-experts FFN on every layer (qwen3next); n_expert == 0: a dense FFN of n_ff.
  int n_expert = 0;            // expert_count
  int n_expert_used = 0;       // expert_used_count (top-k)
  int n_ff_exp = 0;            // expert_feed_forward_length
  int n_ff_shexp = 0;          // expert_shared_feed_forward_length (the sigmoid-gated shared expert)
  bool expert_norm_topk = true;  // expert_weights_norm: renormalise the top-k probabilities
  bool is_moe() const { return n_expert > 0; }

  bool is_hybrid() const { return !layer_is_linear.empty(); }
  int ssm_key_dim() const { return ssm_n_k_heads * ssm_k_dim; }
  int ssm_value_dim() const { return ssm_n_v_heads * ssm_v_dim; }
  int ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
  // Layers with KV: all but the linear ones.
  int n_attn_layers() const {
    int n = 0;
    for (int il = 0; il < n_layer; ++il) n += !is_hybrid() || !layer_is_linear[il];
    return n;
  }

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
};

Result<ModelConfig> load_model_config(const gguf::File& file);
std::string describe(const ModelConfig& c);

}  // namespace hs
