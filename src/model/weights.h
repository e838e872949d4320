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

  // qwen35 Gated-DeltaNet layers (config.layer_is_linear): wq..wo, q_norm, k_norm stay empty.
  // V heads in the tiled order of llama.cpp's qwen35 files (v-head j reads k-head j % n_k).
  WeightView ssm_qkv;                 // [conv_dim x n_embd]  rows q | k | v (attn_qkv)
  WeightView ssm_z;                   // [value_dim x n_embd] output gate (attn_gate)
  WeightView ssm_beta, ssm_alpha;     // [n_v x n_embd] x2
  WeightView ssm_out;                 // [n_embd x value_dim]
  std::vector<float> ssm_conv;        // [conv_dim][kernel]
  std::vector<float> ssm_a;           // [n_v] -exp(A_log)
  std::vector<float> ssm_dt_bias;     // [n_v]
  std::vector<float> ssm_norm;        // [v_dim] gated RMSNorm weight (plain w, not 1 + w)
};

struct ModelWeights {
  WeightView token_embd;           // [n_vocab rows of n_embd]
  std::vector<float> output_norm;  // [n_embd]
  WeightView output;               // [n_vocab rows of n_embd]; == token_embd when tied
  std::vector<LayerWeights> layers;
};

Result<ModelWeights> load_weights(const gguf::File& file, const ModelConfig& config);

}  // namespace hs
