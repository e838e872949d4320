// model/model_config.cpp — GGUF keys → ModelConfig (conventions in
// ../shared/reference/models-and-gguf.md §6).
#include "model/model_config.h"

#include <cmath>

namespace hs {
namespace {

Status check_positive(const char* what, int64_t v, int64_t max = 1 << 24) {
  if (v <= 0 || v > max)
    return make_error(StatusCode::kCorrupt, "model config: {} = {} is out of range (1..{})", what, v, max);
  return Status::ok();
}

// The hybrids (llama.cpp's qwen35 / qwen3next keys, models-and-gguf.md §5): every
// full_attention_interval-th layer is gated full attention (q and gate interleaved per head,
// QK norm, partial NeoX RoPE: the interleaved MRoPE of a text-only qwen35 is plain RoPE on
// rope.dimension_count dims), the others Gated DeltaNet. Norm weights are stored as 1 + w.
Status load_hybrid_fields(const gguf::File& f, const std::string& p, ModelConfig& c) {
  HS_ASSIGN_OR_RETURN(int64_t kernel, f.get_int(p + "ssm.conv_kernel"));
  HS_ASSIGN_OR_RETURN(int64_t dk, f.get_int(p + "ssm.state_size"));
  HS_ASSIGN_OR_RETURN(int64_t nk, f.get_int(p + "ssm.group_count"));
  HS_ASSIGN_OR_RETURN(int64_t nv, f.get_int(p + "ssm.time_step_rank"));
  HS_ASSIGN_OR_RETURN(int64_t inner, f.get_int(p + "ssm.inner_size"));
  HS_ASSIGN_OR_RETURN(int64_t interval, f.get_int_or(p + "full_attention_interval", 4));
  HS_ASSIGN_OR_RETURN(int64_t n_mtp, f.get_int_or(p + "nextn_predict_layers", 0));
  HS_RETURN_IF_ERROR(check_positive("ssm.conv_kernel", kernel, 64));
  HS_RETURN_IF_ERROR(check_positive("ssm.state_size", dk, 4096));
  HS_RETURN_IF_ERROR(check_positive("ssm.group_count", nk, 4096));
  HS_RETURN_IF_ERROR(check_positive("ssm.time_step_rank", nv, 4096));
  HS_RETURN_IF_ERROR(check_positive("ssm.inner_size", inner));
  HS_RETURN_IF_ERROR(check_positive("full_attention_interval", interval, 4096));
  if (nv % nk != 0 || inner % nv != 0)
    return make_error(StatusCode::kCorrupt,
                      "model config: ssm heads {} v / {} k and inner size {} do not divide ({})", nv, nk, inner,
                      c.arch_name);
  if (n_mtp < 0 || n_mtp >= c.n_layer)
    return make_error(StatusCode::kCorrupt, "model config: nextn_predict_layers {} of {} blocks", n_mtp, c.n_layer);
  if (c.rope_dims <= 0 || c.rope_dims > c.head_dim || c.rope_dims % 2)
    return make_error(StatusCode::kCorrupt, "model config: rope.dimension_count {} for head dim {}", c.rope_dims,
                      c.head_dim);
  c.n_mtp_layers = static_cast<int>(n_mtp);
  c.n_layer -= c.n_mtp_layers;  // block_count counts the MTP blocks (kept for the MTP issue, not run)
  c.ssm_conv_kernel = static_cast<int>(kernel);
  c.ssm_k_dim = static_cast<int>(dk);
  c.ssm_n_k_heads = static_cast<int>(nk);
  c.ssm_n_v_heads = static_cast<int>(nv);
  c.ssm_v_dim = static_cast<int>(inner / nv);
  c.layer_is_swa.assign(c.n_layer, false);
  c.layer_is_linear.assign(c.n_layer, false);
  for (int il = 0; il < c.n_layer; ++il) c.layer_is_linear[il] = (il + 1) % interval != 0;
  // The per-layer schedule when the file has it (llama.cpp writes it; it wins over the interval).
  if (f.has(p + "attention.recurrent_layers")) {
    HS_ASSIGN_OR_RETURN(std::vector<int64_t> rec, f.get_int_array(p + "attention.recurrent_layers"));
    if (static_cast<int64_t>(rec.size()) < c.n_layer)
      return make_error(StatusCode::kCorrupt, "model config: attention.recurrent_layers has {} entries for {} layers",
                        rec.size(), c.n_layer);
    for (int il = 0; il < c.n_layer; ++il) c.layer_is_linear[il] = rec[il] != 0;
  }
  c.rope_style = RopeStyle::kNeox;
  c.ffn_act = FfnActivation::kSilu;
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.ssm_v_tiled = c.arch == Arch::kQwen35;
  c.ssm_fused_ba = c.arch == Arch::kQwen3Next;
  return Status::ok();
}

// Qwen3-Next's MoE FFN (llama.cpp's qwen3next loader): expert_count experts of
// expert_feed_forward_length, expert_used_count per token, and a shared expert of
// expert_shared_feed_forward_length (llama.cpp: feed_forward_length when absent). llama.cpp's
// qwen3next graph always renormalises the top-k; expert_weights_norm, when a file has it, says so.
Status load_moe_fields(const gguf::File& f, const std::string& p, ModelConfig& c) {
  HS_ASSIGN_OR_RETURN(int64_t n_expert, f.get_int(p + "expert_count"));
  HS_ASSIGN_OR_RETURN(int64_t n_used, f.get_int(p + "expert_used_count"));
  HS_ASSIGN_OR_RETURN(int64_t n_ff_exp, f.get_int(p + "expert_feed_forward_length"));
  HS_ASSIGN_OR_RETURN(int64_t n_ff_shexp, f.get_int_or(p + "expert_shared_feed_forward_length", c.n_ff));
  HS_RETURN_IF_ERROR(check_positive("expert_count", n_expert, 1 << 16));
  HS_RETURN_IF_ERROR(check_positive("expert_used_count", n_used, n_expert));
  HS_RETURN_IF_ERROR(check_positive("expert_feed_forward_length", n_ff_exp));
  HS_RETURN_IF_ERROR(check_positive("expert_shared_feed_forward_length", n_ff_shexp));
  c.n_expert = static_cast<int>(n_expert);
  c.n_expert_used = static_cast<int>(n_used);
  c.n_ff_exp = static_cast<int>(n_ff_exp);
  c.n_ff_shexp = static_cast<int>(n_ff_shexp);
  if (f.has(p + "expert_weights_norm")) {
    HS_ASSIGN_OR_RETURN(bool norm, f.get_bool(p + "expert_weights_norm"));
    c.expert_norm_topk = norm;
  }
  return Status::ok();
}

}  // namespace

Result<ModelConfig> load_model_config(const gguf::File& f) {
  ModelConfig c;
  HS_ASSIGN_OR_RETURN(std::string_view arch, f.get_string("general.architecture"));
  c.arch_name = std::string(arch);
  if (arch == "llama") c.arch = Arch::kLlama;
  else if (arch == "gemma3") c.arch = Arch::kGemma3;
  else if (arch == "qwen2") c.arch = Arch::kQwen2;
  else if (arch == "qwen35") c.arch = Arch::kQwen35;
  else if (arch == "qwen3next") c.arch = Arch::kQwen3Next;
  else
    return make_error(StatusCode::kUnsupported,
                      "unknown architecture '{}' (supported: llama, gemma3, qwen2, qwen35, qwen3next)", arch);
  const bool hybrid = c.arch == Arch::kQwen35 || c.arch == Arch::kQwen3Next;
  const std::string p = c.arch_name + ".";

  HS_ASSIGN_OR_RETURN(int64_t n_layer, f.get_int(p + "block_count"));
  HS_ASSIGN_OR_RETURN(int64_t n_embd, f.get_int(p + "embedding_length"));
  HS_ASSIGN_OR_RETURN(int64_t n_head, f.get_int(p + "attention.head_count"));
  HS_ASSIGN_OR_RETURN(int64_t n_head_kv, f.get_int_or(p + "attention.head_count_kv", n_head));
  HS_ASSIGN_OR_RETURN(int64_t n_ff, f.get_int(p + "feed_forward_length"));
  HS_ASSIGN_OR_RETURN(int64_t n_ctx, f.get_int_or(p + "context_length", 4096));
  HS_ASSIGN_OR_RETURN(double eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  HS_ASSIGN_OR_RETURN(int64_t head_dim, f.get_int_or(p + "attention.key_length", n_head > 0 ? n_embd / n_head : 0));
  HS_ASSIGN_OR_RETURN(double theta, f.get_float_or(p + "rope.freq_base", 10000.0));
  HS_RETURN_IF_ERROR(check_positive("block_count", n_layer, 4096));
  HS_RETURN_IF_ERROR(check_positive("embedding_length", n_embd));
  HS_RETURN_IF_ERROR(check_positive("head_count", n_head, 4096));
  HS_RETURN_IF_ERROR(check_positive("head_count_kv", n_head_kv, 4096));
  HS_RETURN_IF_ERROR(check_positive("feed_forward_length", n_ff));
  HS_RETURN_IF_ERROR(check_positive("key_length", head_dim, 4096));
  if (n_head % n_head_kv != 0)
    return make_error(StatusCode::kCorrupt, "model config: head_count {} is not a multiple of head_count_kv {}",
                      n_head, n_head_kv);
  if (head_dim % 2 != 0)
    return make_error(StatusCode::kCorrupt, "model config: head dim {} is odd", head_dim);
  HS_ASSIGN_OR_RETURN(int64_t value_dim, f.get_int_or(p + "attention.value_length", head_dim));
  if (value_dim != head_dim)
    return make_error(StatusCode::kUnsupported, "model config: value_length {} differs from key_length {}",
                      value_dim, head_dim);

  c.n_layer = static_cast<int>(n_layer);
  c.n_embd = static_cast<int>(n_embd);
  c.n_head = static_cast<int>(n_head);
  c.n_head_kv = static_cast<int>(n_head_kv);
  c.n_ff = static_cast<int>(n_ff);
  c.n_ctx_train = static_cast<int>(n_ctx);
  c.head_dim = static_cast<int>(head_dim);
  c.rms_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  c.rope_theta_local = c.rope_theta;
  HS_ASSIGN_OR_RETURN(int64_t rope_dims, f.get_int_or(p + "rope.dimension_count", head_dim));
  c.rope_dims = static_cast<int>(rope_dims);
  if (c.rope_dims != c.head_dim && !hybrid)
    return make_error(StatusCode::kUnsupported, "model config: partial RoPE ({} of {} dims) is not supported for {}",
                      c.rope_dims, c.head_dim, arch);
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.layer_is_swa.assign(c.n_layer, false);

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return make_error(StatusCode::kNotFound, "model: tensor 'token_embd.weight' is missing");
  c.n_vocab = static_cast<int>(embd->ne[1]);
  c.tied_output = f.find_tensor("output.weight") == nullptr;

  if (c.arch == Arch::kLlama) {
    c.rope_style = RopeStyle::kNormal;
    c.ffn_act = FfnActivation::kSilu;
    // Optional in llama files (llama.cpp's TENSOR_NOT_REQUIRED); permuted with Q/K by the converter.
    c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  } else if (c.arch == Arch::kQwen2) {
    // The llama graph with q/k/v biases (required, as in llama.cpp) and NeoX RoPE: the qwen2
    // converter does not permute Q/K. theta from rope.freq_base (1e6 for Qwen2.5).
    c.rope_style = RopeStyle::kNeox;
    c.ffn_act = FfnActivation::kSilu;
    c.qkv_bias = true;
    if (f.has(p + "rope.scaling.type")) {  // YaRN files for > 32K contexts
      HS_ASSIGN_OR_RETURN(std::string_view scaling, f.get_string(p + "rope.scaling.type"));
      if (scaling != "none")
        return make_error(StatusCode::kUnsupported, "model config: qwen2 RoPE scaling '{}' is not supported yet",
                          scaling);
    }
  } else if (hybrid) {
    HS_RETURN_IF_ERROR(load_hybrid_fields(f, p, c));
    if (c.arch == Arch::kQwen3Next) HS_RETURN_IF_ERROR(load_moe_fields(f, p, c));
  } else {  // gemma3
    c.rope_style = RopeStyle::kNeox;
    c.ffn_act = FfnActivation::kGeluTanh;
    c.qk_norm = true;
    c.post_norms = true;
    c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
    c.rope_theta_local = 10000.0f;  // not stored in GGUF; llama.cpp hard-codes it too
    HS_ASSIGN_OR_RETURN(int64_t swa, f.get_int_or(p + "attention.sliding_window", 0));
    c.sliding_window = static_cast<int>(swa);
    if (c.sliding_window > 0)
      for (int il = 0; il < c.n_layer; ++il) c.layer_is_swa[il] = il % 6 < 5;  // pattern 6: 5 local, 1 global
    HS_ASSIGN_OR_RETURN(double cap, f.get_float_or(p + "final_logit_softcapping", 0.0));
    c.final_logit_softcap = static_cast<float>(cap);
    if (f.has(p + "rope.scaling.type") || f.has(p + "rope.scaling.factor"))
      return make_error(StatusCode::kUnsupported, "model config: gemma3 RoPE scaling is not supported yet");
  }
  return c;
}

std::string describe(const ModelConfig& c) {
  int n_swa = 0;
  for (bool b : c.layer_is_swa) n_swa += b;
  return fmt::format(
      "{}: {} layers, d_model {}, {} heads / {} kv heads x {}, ffn {}, vocab {}, ctx {}, rope {} theta {:g}{}, "
      "{}{}{}",
      c.arch_name, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_vocab, c.n_ctx_train,
      c.rope_style == RopeStyle::kNeox ? "neox" : "normal", c.rope_theta,
      n_swa ? fmt::format(" (local {:g})", c.rope_theta_local) : "",
      n_swa ? fmt::format("{} sliding-window layers (window {}), ", n_swa, c.sliding_window) : "",
      c.tied_output ? "tied output" : "separate output", c.qkv_bias ? ", q/k/v bias" : "") +
         (c.is_hybrid() ? fmt::format(", {} Gated-DeltaNet layers ({} k / {} v heads x {}/{}, conv {}), rope {} of {} dims",
                                      c.n_layer - c.n_attn_layers(), c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_k_dim,
                                      c.ssm_v_dim, c.ssm_conv_kernel, c.rope_dims, c.head_dim)
                        : std::string()) +
         (c.is_moe() ? fmt::format(", {} experts (top {}{}) x {} + shared {}", c.n_expert, c.n_expert_used,
                                   c.expert_norm_topk ? ", renormalised" : "", c.n_ff_exp, c.n_ff_shexp)
                     : std::string());
}

}  // namespace hs
