// app/bench_cost.h — what a step of `hindsight bench` costs, from the model's shape: the FLOPs
// of a prefill (the roofline of the pp rows) and the bytes a decode step moves, by kind (the
// MB/step columns and the roofline of the decode rows):
//  - weights: every tensor once per step, except a MoE model's routed experts (qwen3next), of
//    which only the experts the step's tokens pick are read: the expected share under uniform
//    routing, 1 - (1 - k/E)^tokens of each layer's experts (k = 1 token: k/E);
//  - KV: K|V of the layers that have KV (hybrids: only the full-attention layers, whose KvCache
//    layers model.kv_geometry() gives), n_keys tokens each (sliding-window layers: their window);
//  - recurrent state (hybrids): per sequence, each Gated-DeltaNet layer reads its conv state
//    ((kernel - 1) · conv_dim floats) and delta-rule state (n_v · k_dim · v_dim floats) and
//    writes them back once per token: 2 · state bytes per slot.
// Header-only: the unit tests (tests/unit/app/test_bench_cost.cpp) link no app sources.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "formats/gguf.h"
#include "kv/kv_cache.h"
#include "model/model_config.h"

namespace hs::app {

// Whether layer l keeps KV (every layer but a hybrid's Gated-DeltaNet ones).
inline bool layer_has_kv(const ModelConfig& c, int l) { return !c.is_hybrid() || !c.layer_is_linear[l]; }

// Recurrent-state bytes of one sequence (HybridDecoder::state_bytes_per_slot); 0 without state.
inline int64_t recurrent_state_bytes(const ModelConfig& c) {
  if (!c.is_hybrid()) return 0;
  const int64_t per_layer = int64_t{c.ssm_conv_kernel - 1} * c.ssm_conv_dim() +
                            int64_t{c.ssm_n_v_heads} * c.ssm_k_dim * c.ssm_v_dim;
  return (c.n_layer - c.n_attn_layers()) * per_layer * 4;
}

// State bytes one decode step moves per sequence: read once and written once.
inline double state_bytes_per_step(const ModelConfig& c) { return 2.0 * static_cast<double>(recurrent_state_bytes(c)); }

// Bytes of the routed-expert tensors (ffn_{gate,up,down}_exps); 0 for a model without experts.
inline int64_t expert_weight_bytes(const gguf::File& f) {
  int64_t n = 0;
  for (const auto& t : f.tensors())
    if (std::string_view(t.name).ends_with("_exps.weight")) n += static_cast<int64_t>(t.n_bytes);
  return n;
}

// Weight bytes a decode step of n_tokens tokens (one per sequence) reads: all but the expert
// tensors, plus the expected share of the experts picked (see the file comment).
inline double decode_weight_bytes(const ModelConfig& c, int64_t weight_bytes, int64_t expert_bytes,
                                  int64_t n_tokens) {
  if (!c.is_moe() || expert_bytes <= 0 || c.n_expert <= 0) return static_cast<double>(weight_bytes);
  const double miss = 1.0 - static_cast<double>(c.n_expert_used) / c.n_expert;  // one token skips an expert
  const double touched = 1.0 - std::pow(miss, static_cast<double>(std::max<int64_t>(n_tokens, 1)));
  return static_cast<double>(weight_bytes - expert_bytes) + touched * static_cast<double>(expert_bytes);
}

// K|V bytes the attentions of one decode step at n_keys read without sparse attention in the
// layers with KV that `skip` (a KV layer index -> bool: the sparse runtime's numbering, which
// counts only the layers with KV) does not claim.
template <typename Skip>
double dense_kv_bytes(const ModelConfig& c, const KvGeometry& g, int32_t n_keys, Skip skip) {
  double bytes = 0;
  for (int l = 0, kv_layer = 0; l < c.n_layer; ++l) {
    if (!layer_has_kv(c, l)) continue;
    if (skip(kv_layer++)) continue;
    const bool swa = c.layer_is_swa[l] && c.sliding_window > 0;
    const int32_t keys = swa ? std::min(n_keys, c.sliding_window) : n_keys;
    bytes += static_cast<double>(keys) * g.n_kv_heads * kv_token_bytes(g.dtype, g.head_dim);
  }
  return bytes;
}
inline double dense_kv_bytes(const ModelConfig& c, const KvGeometry& g, int32_t n_keys) {
  return dense_kv_bytes(c, g, n_keys, [](int) { return false; });
}

// FLOPs of n tokens through the layers plus n_out logit rows: the matmuls (2 per weight element
// a token meets; MoE: the router, the k chosen experts' and the shared expert's GLUs), the
// attention of token i over depth + i + 1 keys (QK and PV: 4 · keys · q_dim; windows applied)
// and, per Gated-DeltaNet layer and token, HybridDecoder's 4 · n_v · k_dim · v_dim of the delta
// rule. Hybrid mixers: full attention projects q | gate (2 · q_dim), k, v and back (q_dim);
// a linear layer q|k|v (conv_dim), z (value_dim), beta and a (n_v each) and back (value_dim).
inline double step_flops(const ModelConfig& c, int64_t n, int64_t n_out, int64_t depth) {
  const double H = c.n_embd;
  const double ffn = c.is_moe() ? H * c.n_expert + 3.0 * H * c.n_ff_exp * c.n_expert_used +
                                      3.0 * H * c.n_ff_shexp + H
                                : 3.0 * H * c.n_ff;
  double f = 2.0 * n_out * H * c.n_vocab;
  for (int l = 0; l < c.n_layer; ++l) {
    if (!layer_has_kv(c, l)) {
      const double proj = H * (c.ssm_conv_dim() + c.ssm_value_dim() + 2.0 * c.ssm_n_v_heads) + c.ssm_value_dim() * H;
      f += 2.0 * n * (proj + ffn) + 4.0 * n * c.ssm_n_v_heads * c.ssm_k_dim * static_cast<double>(c.ssm_v_dim);
      continue;
    }
    const double q_out = c.is_hybrid() ? 2.0 * c.q_dim() : c.q_dim();  // hybrid: q | gate per head
    f += 2.0 * n * (H * (q_out + c.q_dim() + 2.0 * c.kv_dim()) + ffn);
    const bool swa = c.layer_is_swa[l] && c.sliding_window > 0;
    for (int64_t i = 0; i < n; ++i) {
      const double keys = swa ? std::min<int64_t>(depth + i + 1, c.sliding_window) : depth + i + 1;
      f += 4.0 * keys * c.q_dim();
    }
  }
  return f;
}

}  // namespace hs::app
