// model/weights.h — a decoder's weight tensors, viewed in place in the mmap'd GGUF.
//
// Matrices stay in their stored (quantized) type (each backend reads or uploads them:
// model/weight_prep.h); only the small norm vectors are copied out as float32. Loading checks every tensor's
// presence, type and shape against the ModelConfig, so a mismatched file fails here with
// the tensor's name instead of mis-computing later.
#pragma once

#include <vector>

#include "core/weight_view.h"
#include "formats/gguf.h"
#include "model/model_config.h"

namespace hs {

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  WeightView wq, wk, wv, wo;          // [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim]
  std::vector<float> bq, bk, bv;      // [q_dim], [kv_dim] x2 (qwen2); empty when the model has none
  std::vector<float> q_norm, k_norm;  // [head_dim] (gemma3)
  std::vector<float> post_attn_norm;  // [n_embd] (gemma3)
  std::vector<float> ffn_norm;        // [n_embd]
  WeightView w_gate, w_up, w_down;    // [n_ff x n_embd] x2, [n_embd x n_ff]
  std::vector<float> post_ffn_norm;   // [n_embd] (gemma3)

  // Hybrid Gated-DeltaNet layers (config.layer_is_linear): wq..wo, q_norm, k_norm stay empty.
  // V heads in the order of the file (config.ssm_v_tiled: qwen35 tiled, qwen3next grouped).
  WeightView ssm_qkv;                 // [conv_dim x n_embd]  rows q | k | v (attn_qkv)
  WeightView ssm_z;                   // [value_dim x n_embd] output gate (attn_gate)
  WeightView ssm_beta, ssm_alpha;     // [n_v x n_embd] x2 (qwen35)
  WeightView ssm_ba;                  // [2 n_v x n_embd] per k-head [b x r | a x r], r = n_v / n_k (qwen3next)
  WeightView ssm_out;                 // [n_embd x value_dim]
  std::vector<float> ssm_conv;        // [conv_dim][kernel]
  std::vector<float> ssm_a;           // [n_v] -exp(A_log)
  std::vector<float> ssm_dt_bias;     // [n_v]
  std::vector<float> ssm_norm;        // [v_dim] gated RMSNorm weight (plain w, not 1 + w)

  // MoE FFN (config.is_moe(); w_gate / w_up / w_down stay empty). GGUF's 3-D expert tensors
  // {n_embd, n_ff_exp, n_expert} are viewed as matrices of n_expert stacked blocks of rows.
  WeightView ffn_gate_inp;              // [n_expert x n_embd] router (f32 in llama.cpp's files)
  WeightView ffn_gate_exps, ffn_up_exps;  // [n_expert · n_ff_exp x n_embd] x2
  WeightView ffn_down_exps;             // [n_expert · n_embd x n_ff_exp]
  WeightView ffn_gate_shexp, ffn_up_shexp;  // [n_ff_shexp x n_embd] x2 shared expert
  WeightView ffn_down_shexp;            // [n_embd x n_ff_shexp]
  WeightView ffn_gate_inp_shexp;        // [1 x n_embd] the shared expert's sigmoid gate
};

struct ModelWeights {
  WeightView token_embd;           // [n_vocab rows of n_embd]
  std::vector<float> output_norm;  // [n_embd]
  WeightView output;               // [n_vocab rows of n_embd]; == token_embd when tied
  std::vector<LayerWeights> layers;
};

Result<ModelWeights> load_weights(const gguf::File& file, const ModelConfig& config);

}  // namespace hs
