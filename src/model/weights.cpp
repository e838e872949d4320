// model/weights.cpp — tensor lookup with name/type/shape checks (see weights.h).
#include "model/weights.h"

#include "core/quant.h"

namespace hs {
namespace {

Result<const gguf::TensorInfo*> find(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return make_error(StatusCode::kNotFound, "model: tensor '{}' is missing", name);
  return t;
}

Result<WeightView> matrix(const gguf::File& f, const std::string& name, int64_t n_in, int64_t n_out) {
  HS_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(f, name));
  if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
    return make_error(StatusCode::kCorrupt, "model: tensor '{}' has shape {}, expected [{}, {}]", name,
                      t->shape_string(), n_in, n_out);
  auto info = dtype_info(t->type);
  if (!info || !info->supported)
    return make_error(StatusCode::kUnsupported, "model: tensor '{}' has unsupported type {}", name,
                      dtype_name(t->type));
  return WeightView{t->type, n_in, n_out, t->data};
}

// A 3-D expert tensor {n_in, n_out, n_expert} as the matrix [n_expert · n_out][n_in].
Result<WeightView> experts(const gguf::File& f, const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
  HS_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(f, name));
  if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert)
    return make_error(StatusCode::kCorrupt, "model: tensor '{}' has shape {}, expected [{}, {}, {}]", name,
                      t->shape_string(), n_in, n_out, n_expert);
  auto info = dtype_info(t->type);
  if (!info || !info->supported)
    return make_error(StatusCode::kUnsupported, "model: tensor '{}' has unsupported type {}", name,
                      dtype_name(t->type));
  return WeightView{t->type, n_in, n_out * n_expert, t->data};
}

Result<std::vector<float>> vector_f32(const gguf::File& f, const std::string& name, int64_t n) {
  HS_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(f, name));
  if (t->n_elements() != n)
    return make_error(StatusCode::kCorrupt, "model: tensor '{}' has shape {}, expected [{}]", name,
                      t->shape_string(), n);
  std::vector<float> out(n);
  HS_RETURN_IF_ERROR(dequantize_row(t->type, t->data, t->n_bytes, out.data(), n));
  return out;
}

// qwen3next's MoE FFN (llama.cpp's names): the f32 router ffn_gate_inp, the stacked experts
// ffn_{gate,up,down}_exps, the shared expert ffn_{gate,up,down}_shexp and its gate.
Status load_moe_ffn(const gguf::File& f, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  const int64_t H = c.n_embd, E = c.n_expert, F = c.n_ff_exp, S = c.n_ff_shexp;
  HS_ASSIGN_OR_RETURN(L.ffn_gate_inp, matrix(f, p + "ffn_gate_inp.weight", H, E));
  HS_ASSIGN_OR_RETURN(L.ffn_gate_exps, experts(f, p + "ffn_gate_exps.weight", H, F, E));
  HS_ASSIGN_OR_RETURN(L.ffn_up_exps, experts(f, p + "ffn_up_exps.weight", H, F, E));
  HS_ASSIGN_OR_RETURN(L.ffn_down_exps, experts(f, p + "ffn_down_exps.weight", F, H, E));
  HS_ASSIGN_OR_RETURN(L.ffn_gate_shexp, matrix(f, p + "ffn_gate_shexp.weight", H, S));
  HS_ASSIGN_OR_RETURN(L.ffn_up_shexp, matrix(f, p + "ffn_up_shexp.weight", H, S));
  HS_ASSIGN_OR_RETURN(L.ffn_down_shexp, matrix(f, p + "ffn_down_shexp.weight", S, H));
  // llama.cpp declares it {n_embd}; its converter writes the HF [1, n_embd] as {n_embd, 1}.
  const std::string gname = p + "ffn_gate_inp_shexp.weight";
  HS_ASSIGN_OR_RETURN(const gguf::TensorInfo* g, find(f, gname));
  if (g->n_dims == 1) {
    if (g->ne[0] != H)
      return make_error(StatusCode::kCorrupt, "model: tensor '{}' has shape {}, expected [{}]", gname, g->shape_string(), H);
    L.ffn_gate_inp_shexp = WeightView{g->type, H, 1, g->data};
  } else {
    HS_ASSIGN_OR_RETURN(L.ffn_gate_inp_shexp, matrix(f, gname, H, 1));
  }
  return Status::ok();
}

// llama.cpp's qwen35 / qwen3next names (models-and-gguf.md §5): every layer has attn_norm, the
// pre-FFN post_attention_norm and the SiLU FFN (dense, or MoE for qwen3next); full-attention
// layers attn_q (q and gate, 2 · q_dim rows), attn_k/v/output and the QK norms; Gated-DeltaNet
// layers attn_qkv, attn_gate, ssm_* (ssm_beta + ssm_alpha, or qwen3next's fused ssm_ba).
Status load_hybrid_layer(const gguf::File& f, const ModelConfig& c, int il, LayerWeights& L) {
  const std::string p = "blk." + std::to_string(il) + ".";
  HS_ASSIGN_OR_RETURN(L.attn_norm, vector_f32(f, p + "attn_norm.weight", c.n_embd));
  HS_ASSIGN_OR_RETURN(L.ffn_norm, vector_f32(f, p + "post_attention_norm.weight", c.n_embd));
  if (c.is_moe()) {
    HS_RETURN_IF_ERROR(load_moe_ffn(f, c, p, L));
  } else {
    HS_ASSIGN_OR_RETURN(L.w_gate, matrix(f, p + "ffn_gate.weight", c.n_embd, c.n_ff));
    HS_ASSIGN_OR_RETURN(L.w_up, matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff));
    HS_ASSIGN_OR_RETURN(L.w_down, matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  if (!c.layer_is_linear[il]) {
    HS_ASSIGN_OR_RETURN(L.wq, matrix(f, p + "attn_q.weight", c.n_embd, 2 * c.q_dim()));
    HS_ASSIGN_OR_RETURN(L.wk, matrix(f, p + "attn_k.weight", c.n_embd, c.kv_dim()));
    HS_ASSIGN_OR_RETURN(L.wv, matrix(f, p + "attn_v.weight", c.n_embd, c.kv_dim()));
    HS_ASSIGN_OR_RETURN(L.wo, matrix(f, p + "attn_output.weight", c.q_dim(), c.n_embd));
    HS_ASSIGN_OR_RETURN(L.q_norm, vector_f32(f, p + "attn_q_norm.weight", c.head_dim));
    HS_ASSIGN_OR_RETURN(L.k_norm, vector_f32(f, p + "attn_k_norm.weight", c.head_dim));
    return Status::ok();
  }
  HS_ASSIGN_OR_RETURN(L.ssm_qkv, matrix(f, p + "attn_qkv.weight", c.n_embd, c.ssm_conv_dim()));
  HS_ASSIGN_OR_RETURN(L.ssm_z, matrix(f, p + "attn_gate.weight", c.n_embd, c.ssm_value_dim()));
  if (c.ssm_fused_ba) {
    HS_ASSIGN_OR_RETURN(L.ssm_ba, matrix(f, p + "ssm_ba.weight", c.n_embd, 2 * c.ssm_n_v_heads));
  } else {
    HS_ASSIGN_OR_RETURN(L.ssm_beta, matrix(f, p + "ssm_beta.weight", c.n_embd, c.ssm_n_v_heads));
    HS_ASSIGN_OR_RETURN(L.ssm_alpha, matrix(f, p + "ssm_alpha.weight", c.n_embd, c.ssm_n_v_heads));
  }
  HS_ASSIGN_OR_RETURN(L.ssm_out, matrix(f, p + "ssm_out.weight", c.ssm_value_dim(), c.n_embd));
  HS_ASSIGN_OR_RETURN(L.ssm_conv, vector_f32(f, p + "ssm_conv1d.weight", int64_t{c.ssm_conv_dim()} * c.ssm_conv_kernel));
  HS_ASSIGN_OR_RETURN(L.ssm_a, vector_f32(f, p + "ssm_a", c.ssm_n_v_heads));
  HS_ASSIGN_OR_RETURN(L.ssm_dt_bias, vector_f32(f, p + "ssm_dt.bias", c.ssm_n_v_heads));
  HS_ASSIGN_OR_RETURN(L.ssm_norm, vector_f32(f, p + "ssm_norm.weight", c.ssm_v_dim));
  return Status::ok();
}

}  // namespace

Result<ModelWeights> load_weights(const gguf::File& f, const ModelConfig& c) {
  ModelWeights w;
  HS_ASSIGN_OR_RETURN(w.token_embd, matrix(f, "token_embd.weight", c.n_embd, c.n_vocab));
  HS_ASSIGN_OR_RETURN(w.output_norm, vector_f32(f, "output_norm.weight", c.n_embd));
  if (c.tied_output) {
    w.output = w.token_embd;
  } else {
    HS_ASSIGN_OR_RETURN(w.output, matrix(f, "output.weight", c.n_embd, c.n_vocab));
  }
  w.layers.resize(c.n_layer);
  if (c.is_hybrid()) {
    for (int il = 0; il < c.n_layer; ++il) HS_RETURN_IF_ERROR(load_hybrid_layer(f, c, il, w.layers[il]));
    return w;
  }
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    HS_ASSIGN_OR_RETURN(L.attn_norm, vector_f32(f, p + "attn_norm.weight", c.n_embd));
    HS_ASSIGN_OR_RETURN(L.wq, matrix(f, p + "attn_q.weight", c.n_embd, c.q_dim()));
    HS_ASSIGN_OR_RETURN(L.wk, matrix(f, p + "attn_k.weight", c.n_embd, c.kv_dim()));
    HS_ASSIGN_OR_RETURN(L.wv, matrix(f, p + "attn_v.weight", c.n_embd, c.kv_dim()));
    HS_ASSIGN_OR_RETURN(L.wo, matrix(f, p + "attn_output.weight", c.q_dim(), c.n_embd));
    if (c.qkv_bias) {
      HS_ASSIGN_OR_RETURN(L.bq, vector_f32(f, p + "attn_q.bias", c.q_dim()));
      HS_ASSIGN_OR_RETURN(L.bk, vector_f32(f, p + "attn_k.bias", c.kv_dim()));
      HS_ASSIGN_OR_RETURN(L.bv, vector_f32(f, p + "attn_v.bias", c.kv_dim()));
    }
    HS_ASSIGN_OR_RETURN(L.ffn_norm, vector_f32(f, p + "ffn_norm.weight", c.n_embd));
    HS_ASSIGN_OR_RETURN(L.w_gate, matrix(f, p + "ffn_gate.weight", c.n_embd, c.n_ff));
    HS_ASSIGN_OR_RETURN(L.w_up, matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff));
    HS_ASSIGN_OR_RETURN(L.w_down, matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd));
    if (c.qk_norm) {
      HS_ASSIGN_OR_RETURN(L.q_norm, vector_f32(f, p + "attn_q_norm.weight", c.head_dim));
      HS_ASSIGN_OR_RETURN(L.k_norm, vector_f32(f, p + "attn_k_norm.weight", c.head_dim));
    }
    if (c.post_norms) {
      HS_ASSIGN_OR_RETURN(L.post_attn_norm, vector_f32(f, p + "post_attention_norm.weight", c.n_embd));
      HS_ASSIGN_OR_RETURN(L.post_ffn_norm, vector_f32(f, p + "post_ffw_norm.weight", c.n_embd));
    }
  }
  return w;
}

}  // namespace hs
