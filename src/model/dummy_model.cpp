// model/dummy_model.cpp — config.json → an in-memory GGUF of random weights (dummy_model.h).
#include "model/dummy_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "core/fp16.h"
#include "core/quant.h"
#include "formats/gguf_builder.h"

namespace hs {
namespace {

using json = nlohmann::json;

// The shape the config describes, in the names of ModelConfig.
struct Shape {
  std::string arch;  // GGUF architecture: llama | qwen2 | gemma3 | qwen35 | qwen3next
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0, n_ctx = 4096;
  double rms_eps = 1e-5, rope_theta = 10000.0;
  int64_t sliding_window = 0;  // gemma3
  double softcap = 0;          // gemma3 final_logit_softcapping
  bool tied = false;
  // The hybrids (qwen35, qwen3next): Gated-DeltaNet layers (nk key / nv value heads of dk / dv,
  // causal conv of conv_kernel), partial RoPE on rope_dims of head_dim, the layer schedule.
  int64_t nk = 0, nv = 0, dk = 0, dv = 0, conv_kernel = 0, rope_dims = 0, attn_interval = 0;
  std::vector<bool> linear;  // [n_layer]: Gated DeltaNet, else gated full attention (empty: not hybrid)
  // qwen3next's MoE FFN on every layer.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  bool norm_topk = true;

  bool hybrid() const { return arch == "qwen35" || arch == "qwen3next"; }
  bool moe() const { return arch == "qwen3next"; }
  int64_t key_dim() const { return nk * dk; }
  int64_t value_dim() const { return nv * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

Result<int64_t> get_int(const json& j, const char* key, int64_t lo, int64_t hi, std::optional<int64_t> dflt = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    if (dflt) return *dflt;
    return make_error(StatusCode::kInvalidArgument, "dummy model config: '{}' is missing", key);
  }
  if (!j[key].is_number_integer())
    return make_error(StatusCode::kInvalidArgument, "dummy model config: '{}' must be an integer", key);
  const int64_t v = j[key].get<int64_t>();
  if (v < lo || v > hi)
    return make_error(StatusCode::kInvalidArgument, "dummy model config: '{}' = {} is out of range ({}..{})", key, v,
                      lo, hi);
  return v;
}

Result<double> get_number(const json& j, const char* key, double dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number()) return make_error(StatusCode::kInvalidArgument, "dummy model config: '{}' must be a number", key);
  return j[key].get<double>();
}

Result<bool> get_bool(const json& j, const char* key, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_boolean())
    return make_error(StatusCode::kInvalidArgument, "dummy model config: '{}' must be true or false", key);
  return j[key].get<bool>();
}

// The hybrids' fields (Hugging Face's Qwen3NextConfig / Qwen3_5TextConfig names and defaults;
// model/hf_model.cpp reads them the same way): linear_* heads, the conv kernel, RoPE from
// rope_parameters (transformers 5) or the top level, the schedule from layer_types or
// full_attention_interval, and qwen3next's experts.
Status read_hybrid(const json& j, const std::string& path, Shape& s) {
  HS_ASSIGN_OR_RETURN(s.nk, get_int(j, "linear_num_key_heads", 1, 4096, 16));
  HS_ASSIGN_OR_RETURN(s.nv, get_int(j, "linear_num_value_heads", 1, 4096, 32));
  HS_ASSIGN_OR_RETURN(s.dk, get_int(j, "linear_key_head_dim", 1, 4096, 128));
  HS_ASSIGN_OR_RETURN(s.dv, get_int(j, "linear_value_head_dim", 1, 4096, 128));
  HS_ASSIGN_OR_RETURN(s.conv_kernel, get_int(j, "linear_conv_kernel_dim", 1, 64, 4));
  if (s.nv % s.nk != 0)
    return make_error(StatusCode::kInvalidArgument, "dummy model config: linear_num_value_heads {} is not a multiple "
                      "of linear_num_key_heads {}", s.nv, s.nk);
  HS_ASSIGN_OR_RETURN(bool attn_bias, get_bool(j, "attention_bias", false));
  if (attn_bias) return make_error(StatusCode::kUnsupported, "dummy model config: attention_bias true is not supported");
  const json& rp = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"] : j;
  if (rp.contains("rope_type") && rp["rope_type"] != "default")
    spdlog::warn("dummy model: rope_type {} of {} is not applied (plain RoPE: the angles differ, the cost per token "
                 "does not)", rp["rope_type"].dump(), path);
  HS_ASSIGN_OR_RETURN(double theta, get_number(j, "rope_theta", 1e7));
  HS_ASSIGN_OR_RETURN(s.rope_theta, get_number(rp, "rope_theta", theta));
  HS_ASSIGN_OR_RETURN(double prf, get_number(j, "partial_rotary_factor", 0.25));
  HS_ASSIGN_OR_RETURN(prf, get_number(rp, "partial_rotary_factor", prf));
  s.rope_dims = static_cast<int64_t>(static_cast<double>(s.head_dim) * prf);
  if (s.rope_dims <= 0 || s.rope_dims > s.head_dim || s.rope_dims % 2 != 0)
    return make_error(StatusCode::kInvalidArgument, "dummy model config: partial_rotary_factor {} of head_dim {} gives "
                      "{} rotated dims (want an even count in 2..{})", prf, s.head_dim, s.rope_dims, s.head_dim);
  HS_ASSIGN_OR_RETURN(s.attn_interval, get_int(j, "full_attention_interval", 1, 4096, 4));
  s.linear.assign(static_cast<size_t>(s.n_layer), false);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& lt = j["layer_types"];
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != s.n_layer)
      return make_error(StatusCode::kInvalidArgument, "dummy model config: layer_types must list num_hidden_layers = {} "
                        "entries", s.n_layer);
    int64_t first_full = -1;
    for (int64_t il = 0; il < s.n_layer; ++il) {
      const std::string t = lt[il].is_string() ? lt[il].get<std::string>() : lt[il].dump();
      if (t != "linear_attention" && t != "full_attention")
        return make_error(StatusCode::kInvalidArgument, "dummy model config: layer_types[{}] = '{}' (linear_attention "
                          "or full_attention)", il, t);
      s.linear[il] = t == "linear_attention";
      if (!s.linear[il] && first_full < 0) first_full = il;
    }
    s.attn_interval = first_full < 0 ? s.n_layer + 1 : first_full + 1;  // the per-layer list is written too
  } else {
    for (int64_t il = 0; il < s.n_layer; ++il) s.linear[il] = (il + 1) % s.attn_interval != 0;
  }
  if (std::find(s.linear.begin(), s.linear.end(), false) == s.linear.end())
    return make_error(StatusCode::kInvalidArgument, "dummy model config: no full_attention layer among {}", s.n_layer);
  if (!s.moe()) return Status::ok();
  // Qwen3-Next: the sparse MoE block on every layer (as llama.cpp's qwen3next graph assumes).
  HS_ASSIGN_OR_RETURN(s.n_expert, get_int(j, "num_experts", 1, 1 << 16));
  HS_ASSIGN_OR_RETURN(s.n_expert_used, get_int(j, "num_experts_per_tok", 1, s.n_expert));
  HS_ASSIGN_OR_RETURN(s.n_ff_exp, get_int(j, "moe_intermediate_size", 1, 1 << 18));
  HS_ASSIGN_OR_RETURN(s.n_ff_shexp, get_int(j, "shared_expert_intermediate_size", 1, 1 << 18));
  HS_ASSIGN_OR_RETURN(int64_t sparse_step, get_int(j, "decoder_sparse_step", 1, 1024, 1));
  HS_ASSIGN_OR_RETURN(s.norm_topk, get_bool(j, "norm_topk_prob", true));
  const bool dense_layers = j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() &&
                            !j["mlp_only_layers"].empty();
  if (sparse_step != 1 || dense_layers)
    return make_error(StatusCode::kUnsupported, "dummy model config: dense layers in a qwen3_next model "
                      "(decoder_sparse_step {}, mlp_only_layers) are not supported", sparse_step);
  return Status::ok();
}

Result<Shape> read_shape(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(StatusCode::kNotFound, "dummy model: cannot open config '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json root = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return make_error(StatusCode::kInvalidArgument, "dummy model: '{}' is not a JSON object (a Hugging Face config.json)",
                      path);
  const json& j = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  std::string type = j.value("model_type", root.value("model_type", std::string()));
  Shape s;
  if (type == "llama" || type == "mistral") s.arch = "llama";
  else if (type == "qwen2") s.arch = "qwen2";
  else if (type == "gemma3" || type == "gemma3_text") s.arch = "gemma3";
  else if (type == "qwen3_5_text" || type == "qwen3_5") s.arch = "qwen35";
  else if (type == "qwen3_next") s.arch = "qwen3next";
  else
    return make_error(StatusCode::kUnsupported, "dummy model: model_type '{}' in '{}' is not supported (llama, qwen2, "
                      "gemma3_text, qwen3_5_text, qwen3_5, qwen3_next)", type, path);
  HS_ASSIGN_OR_RETURN(s.n_layer, get_int(j, "num_hidden_layers", 1, 1024));
  HS_ASSIGN_OR_RETURN(s.n_embd, get_int(j, "hidden_size", 8, 1 << 16));
  HS_ASSIGN_OR_RETURN(s.n_head, get_int(j, "num_attention_heads", 1, 1024));
  HS_ASSIGN_OR_RETURN(s.n_head_kv, get_int(j, "num_key_value_heads", 1, 1024, s.n_head));
  HS_ASSIGN_OR_RETURN(s.head_dim, get_int(j, "head_dim", 2, 1024, s.hybrid() ? 256 : s.n_embd / s.n_head));
  HS_ASSIGN_OR_RETURN(s.n_ff, get_int(j, "intermediate_size", 1, 1 << 18));
  HS_ASSIGN_OR_RETURN(s.n_vocab, get_int(j, "vocab_size", 1, 1 << 22));
  HS_ASSIGN_OR_RETURN(s.n_ctx, get_int(j, "max_position_embeddings", 16, 1 << 24, 4096));
  HS_ASSIGN_OR_RETURN(s.rms_eps, get_number(j, "rms_norm_eps", s.arch == "gemma3" || s.hybrid() ? 1e-6 : 1e-5));
  HS_ASSIGN_OR_RETURN(s.rope_theta, get_number(j, "rope_theta", s.arch == "qwen2" ? 1e6 : 10000.0));
  if (s.arch == "gemma3") {
    HS_ASSIGN_OR_RETURN(s.sliding_window, get_int(j, "sliding_window", 0, 1 << 24, 0));
    HS_ASSIGN_OR_RETURN(s.softcap, get_number(j, "final_logit_softcapping", 0.0));
  }
  const bool tied_default = s.arch == "gemma3";
  s.tied = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()
               ? j["tie_word_embeddings"].get<bool>()
               : root.value("tie_word_embeddings", tied_default);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
    spdlog::warn("dummy model: rope_scaling '{}' of {} is not applied (random weights: the angles differ, the cost per "
                 "token does not)", j["rope_scaling"].value("rope_type", j["rope_scaling"].value("type", "?")), path);
  if (s.n_head % s.n_head_kv != 0)
    return make_error(StatusCode::kInvalidArgument, "dummy model config: num_attention_heads {} is not a multiple of "
                      "num_key_value_heads {}", s.n_head, s.n_head_kv);
  if (s.hybrid()) HS_RETURN_IF_ERROR(read_hybrid(j, path, s));
  return s;
}

// One tensor of the model, and how its values are drawn.
enum class Init {
  kConst,        // every value `fill` (norm weights, biases, dt_bias)
  kRandom,       // rows of std ~ 1/sqrt(n_in) (matrices; the conv's rows of `kernel` taps)
  kNegUniform,   // -U(1, 16): ssm_a = -exp(A_log) with A_log = log U(1, 16)
};
struct TensorSpec {
  std::string name;
  DType type;
  int n_dims;                // 1, 2 or 3 (the experts' {n_in, n_out, n_expert})
  int64_t n_in, n_out, n_mat;  // ne[0] (contiguous), ne[1], ne[2]; 1 where the tensor has fewer dims
  Init init;
  float fill = 0.0f;
  uint64_t offset = 0, bytes = 0;
  int64_t n_rows() const { return n_out * n_mat; }
  int64_t n_elements() const { return n_in * n_rows(); }
};

std::vector<TensorSpec> tensor_list(const Shape& s, DType wt) {
  std::vector<TensorSpec> t;
  auto mat = [&](std::string name, int64_t n_in, int64_t n_out) {
    t.push_back({std::move(name), wt, 2, n_in, n_out, 1, Init::kRandom});
  };
  auto mat_f32 = [&](std::string name, int64_t n_in, int64_t n_out) {  // f32 whatever wt (as the converters keep them)
    t.push_back({std::move(name), DType::F32, 2, n_in, n_out, 1, Init::kRandom});
  };
  auto experts = [&](std::string name, int64_t n_in, int64_t n_out) {
    t.push_back({std::move(name), wt, 3, n_in, n_out, s.n_expert, Init::kRandom});
  };
  auto vec = [&](std::string name, int64_t n, float v) {
    t.push_back({std::move(name), DType::F32, 1, n, 1, 1, Init::kConst, v});
  };
  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  mat("token_embd.weight", s.n_embd, s.n_vocab);
  // Norm weights 1. The zero-centred norms (gemma's, and every hybrid norm but ssm_norm) are
  // stored as 1 + w (the converters add the 1): 1 is w = 0, an effective scale of 1 there too.
  const float norm_one = 1.0f;
  vec("output_norm.weight", s.n_embd, norm_one);
  if (!s.tied) mat("output.weight", s.n_embd, s.n_vocab);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    vec(p + "attn_norm.weight", s.n_embd, norm_one);
    if (s.hybrid()) {
      // model/weights.cpp's load_hybrid_layer: post_attention_norm is the pre-FFN norm.
      vec(p + "post_attention_norm.weight", s.n_embd, norm_one);
      if (s.moe()) {
        mat_f32(p + "ffn_gate_inp.weight", s.n_embd, s.n_expert);  // the router
        experts(p + "ffn_gate_exps.weight", s.n_embd, s.n_ff_exp);
        experts(p + "ffn_up_exps.weight", s.n_embd, s.n_ff_exp);
        experts(p + "ffn_down_exps.weight", s.n_ff_exp, s.n_embd);
        mat(p + "ffn_gate_shexp.weight", s.n_embd, s.n_ff_shexp);
        mat(p + "ffn_up_shexp.weight", s.n_embd, s.n_ff_shexp);
        mat(p + "ffn_down_shexp.weight", s.n_ff_shexp, s.n_embd);
        mat_f32(p + "ffn_gate_inp_shexp.weight", s.n_embd, 1);  // the converter's {n_embd, 1}
      } else {
        mat(p + "ffn_gate.weight", s.n_embd, s.n_ff);
        mat(p + "ffn_up.weight", s.n_embd, s.n_ff);
        mat(p + "ffn_down.weight", s.n_ff, s.n_embd);
      }
      if (!s.linear[il]) {  // gated full attention: q and its gate interleaved per head
        mat(p + "attn_q.weight", s.n_embd, 2 * q_dim);
        mat(p + "attn_k.weight", s.n_embd, kv_dim);
        mat(p + "attn_v.weight", s.n_embd, kv_dim);
        mat(p + "attn_output.weight", q_dim, s.n_embd);
        vec(p + "attn_q_norm.weight", s.head_dim, norm_one);
        vec(p + "attn_k_norm.weight", s.head_dim, norm_one);
        continue;
      }
      mat(p + "attn_qkv.weight", s.n_embd, s.conv_dim());
      mat(p + "attn_gate.weight", s.n_embd, s.value_dim());
      if (s.moe()) {
        mat(p + "ssm_ba.weight", s.n_embd, 2 * s.nv);
      } else {
        mat(p + "ssm_beta.weight", s.n_embd, s.nv);
        mat(p + "ssm_alpha.weight", s.n_embd, s.nv);
      }
      mat(p + "ssm_out.weight", s.value_dim(), s.n_embd);
      mat_f32(p + "ssm_conv1d.weight", s.conv_kernel, s.conv_dim());  // {kernel, conv_dim}: std 1/sqrt(kernel)
      t.push_back({p + "ssm_a", DType::F32, 1, s.nv, 1, 1, Init::kNegUniform});
      vec(p + "ssm_dt.bias", s.nv, 1.0f);
      vec(p + "ssm_norm.weight", s.dv, norm_one);  // the gated norm: plain w (not 1 + w), 1
      continue;
    }
    mat(p + "attn_q.weight", s.n_embd, q_dim);
    mat(p + "attn_k.weight", s.n_embd, kv_dim);
    mat(p + "attn_v.weight", s.n_embd, kv_dim);
    mat(p + "attn_output.weight", q_dim, s.n_embd);
    if (s.arch == "qwen2") {
      vec(p + "attn_q.bias", q_dim, 0.0f);
      vec(p + "attn_k.bias", kv_dim, 0.0f);
      vec(p + "attn_v.bias", kv_dim, 0.0f);
    }
    if (s.arch == "gemma3") {
      vec(p + "attn_q_norm.weight", s.head_dim, norm_one);
      vec(p + "attn_k_norm.weight", s.head_dim, norm_one);
      vec(p + "post_attention_norm.weight", s.n_embd, norm_one);
      vec(p + "post_ffw_norm.weight", s.n_embd, norm_one);
    }
    vec(p + "ffn_norm.weight", s.n_embd, norm_one);
    mat(p + "ffn_gate.weight", s.n_embd, s.n_ff);
    mat(p + "ffn_up.weight", s.n_embd, s.n_ff);
    mat(p + "ffn_down.weight", s.n_ff, s.n_embd);
  }
  return t;
}

// The tensors of the config at weight type wt, with their offsets and bytes in the data section;
// an error when a row of a wt tensor is not whole blocks.
Result<std::vector<TensorSpec>> layout(const Shape& s, DType wt, uint64_t* data_bytes) {
  const auto info = dtype_info(wt);
  if (!info) return make_error(StatusCode::kInvalidArgument, "dummy model: unknown weight type");
  std::vector<TensorSpec> tensors = tensor_list(s, wt);
  uint64_t offset = 0;
  for (TensorSpec& t : tensors) {
    const auto ti = dtype_info(t.type);
    if (t.n_in % ti->block_elems != 0)
      return make_error(StatusCode::kInvalidArgument,
                        "dummy model: a row of {} elements ({}) is not whole {} blocks of {}", t.n_in, t.name,
                        dtype_name(t.type), ti->block_elems);
    t.offset = offset;
    t.bytes = static_cast<uint64_t>(t.n_rows()) * static_cast<uint64_t>(t.n_in / ti->block_elems) * ti->block_bytes;
    offset = (offset + t.bytes + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
  }
  *data_bytes = offset;
  return tensors;
}

// Counter-based generator: one stream per (seed, tensor, row), so the fill is the same for any
// thread count.
struct Rng {
  uint64_t state;
  static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  Rng(uint64_t seed, uint64_t tensor, uint64_t row) : state(mix(seed ^ mix(tensor * 0x100000001b3ull ^ mix(row)))) {}
  uint64_t next() { return mix(state += 0x9e3779b97f4a7c15ull); }
  float uniform() { return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }  // [-1, 1)
};

// Row r of a matrix of `type` with values of standard deviation ~sd.
void fill_row(DType type, uint8_t* dst, int64_t n, float sd, Rng& rng) {
  const float a = sd * std::sqrt(3.0f);  // uniform(-a, a) has std sd
  switch (type) {
    case DType::F32: {
      float* f = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) f[i] = a * rng.uniform();
      return;
    }
    case DType::F16:
    case DType::BF16: {
      for (int64_t i = 0; i < n; ++i) {
        const float v = a * rng.uniform();
        const uint16_t h = type == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    }
    case DType::Q8_0: {  // q uniform in [-127, 127]: std 73.3 d
      const uint16_t d = fp32_to_fp16(sd / 73.3f);
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ8_0 blk;
        blk.d = d;
        for (int i = 0; i < kQK; ++i) blk.qs[i] = static_cast<int8_t>(static_cast<int>(rng.next() % 255) - 127);
        std::memcpy(dst + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
      }
      return;
    }
    case DType::Q4_0: {  // (q - 8) with q uniform in 0..15: std 4.6 d
      const uint16_t d = fp32_to_fp16(sd / 4.6f);
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ4_0 blk;
        blk.d = d;
        const uint64_t r0 = rng.next(), r1 = rng.next();
        std::memcpy(blk.qs, &r0, 8);
        std::memcpy(blk.qs + 8, &r1, 8);
        std::memcpy(dst + b * sizeof(BlockQ4_0), &blk, sizeof(blk));
      }
      return;
    }
    case DType::Q4_K: {  // d * sc * q - dmin * m, sc and m 6-bit (mean 31.5), q 0..15; dmin = 7.5 d centres it
      const float d = sd / (31.5f * 4.6f);
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        BlockQ4K blk;
        blk.d = fp32_to_fp16(d);
        blk.dmin = fp32_to_fp16(7.5f * d);
        for (int i = 0; i < kKScaleBytes; ++i) blk.scales[i] = static_cast<uint8_t>(rng.next());
        for (int i = 0; i < kQK_K / 2; i += 8) {
          const uint64_t r = rng.next();
          std::memcpy(blk.qs + i, &r, 8);
        }
        std::memcpy(dst + b * sizeof(BlockQ4K), &blk, sizeof(blk));
      }
      return;
    }
    default:
      return;  // parse_dummy_dtype admits only the types above
  }
}

// The synthetic byte-level vocabulary: GPT-2's byte spelling of the 256 bytes (bytes_to_unicode),
// ChatML specials, then unreachable control tokens.
void write_synthetic_vocab(gguf::GgufBuilder& b, int64_t n_vocab) {
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<size_t>(n_vocab));
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  uint32_t extra = 0;
  for (uint32_t byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
    tokens.push_back(utf8(printable ? byte : 256 + extra++));
  }
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (const char* sp : specials) tokens.emplace_back(sp);
  // Fillers are normal tokens that decode to visible text ("w300 ") but that no text encodes
  // to (there are no merges): a random model's output streams one visible piece per token.
  while (static_cast<int64_t>(tokens.size()) < n_vocab) tokens.push_back(fmt::format("w{}\u0120", tokens.size()));
  std::vector<int32_t> types(tokens.size(), 1);                // normal
  std::fill(types.begin() + 256, types.begin() + 259, 3);      // the specials: control
  b.kv_str("tokenizer.ggml.model", "gpt2");
  b.kv_str("tokenizer.ggml.pre", "default");
  b.kv_str_array("tokenizer.ggml.tokens", tokens);
  b.kv_i32_array("tokenizer.ggml.token_type", types);
  b.kv_str_array("tokenizer.ggml.merges", {});
  b.kv_u32("tokenizer.ggml.bos_token_id", 256);
  b.kv_u32("tokenizer.ggml.eos_token_id", 258);
  b.kv_bool("tokenizer.ggml.add_bos_token", false);
  b.kv_str("tokenizer.chat_template",
           "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
           "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
}

Status copy_vocab(gguf::GgufBuilder& b, const std::string& path, int64_t n_vocab) {
  HS_ASSIGN_OR_RETURN(auto vf, gguf::File::open(path));
  HS_ASSIGN_OR_RETURN(auto tokens, vf->get_string_array("tokenizer.ggml.tokens"));
  if (static_cast<int64_t>(tokens.size()) != n_vocab)
    return make_error(StatusCode::kInvalidArgument, "dummy model: the vocabulary '{}' has {} tokens, the config's "
                      "vocab_size is {}", path, tokens.size(), n_vocab);
  for (const auto& [key, value] : vf->metadata())
    if (key.rfind("tokenizer.", 0) == 0) b.kv_value(key, value);
  return Status::ok();
}

}  // namespace

Result<DType> parse_dummy_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "q8_0") return DType::Q8_0;
  if (name == "q4_0") return DType::Q4_0;
  if (name == "q4_k") return DType::Q4_K;
  return make_error(StatusCode::kInvalidArgument, "dummy weight type '{}' (use f32, f16, bf16, q8_0, q4_0 or q4_k)", name);
}

Result<DummyModelInfo> describe_dummy_model(const DummyModelSpec& spec) {
  HS_ASSIGN_OR_RETURN(Shape s, read_shape(spec.config_path));
  DummyModelInfo info;
  HS_ASSIGN_OR_RETURN(std::vector<TensorSpec> tensors, layout(s, spec.weight_type, &info.weight_bytes));
  info.arch = s.arch;
  info.n_layer = s.n_layer;
  info.layer_is_linear = s.linear;
  info.n_tensors = static_cast<int64_t>(tensors.size());
  for (const TensorSpec& t : tensors) info.n_params += t.n_elements();
  return info;
}

Result<std::unique_ptr<gguf::File>> make_dummy_model(const DummyModelSpec& spec, ThreadPool& pool) {
  HS_ASSIGN_OR_RETURN(Shape s, read_shape(spec.config_path));
  uint64_t data_bytes = 0;
  HS_ASSIGN_OR_RETURN(std::vector<TensorSpec> tensors, layout(s, spec.weight_type, &data_bytes));

  gguf::GgufBuilder b(3, gguf::kDefaultAlignment);
  const std::string a = s.arch + ".";
  auto u32 = [&](const std::string& key, int64_t v) { b.kv_u32(a + key, static_cast<uint32_t>(v)); };
  b.kv_str("general.architecture", s.arch);
  b.kv_str("general.name", fmt::format("dummy {} (random {} weights)", s.arch, dtype_name(spec.weight_type)));
  u32("block_count", s.n_layer);
  u32("embedding_length", s.n_embd);
  u32("attention.head_count", s.n_head);
  u32("attention.head_count_kv", s.n_head_kv);
  u32("attention.key_length", s.head_dim);
  u32("attention.value_length", s.head_dim);
  u32("feed_forward_length", s.n_ff);
  u32("context_length", s.n_ctx);
  b.kv_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(s.rms_eps));
  b.kv_f32(a + "rope.freq_base", static_cast<float>(s.rope_theta));
  if (s.sliding_window > 0) u32("attention.sliding_window", s.sliding_window);
  if (s.softcap > 0) b.kv_f32(a + "final_logit_softcapping", static_cast<float>(s.softcap));
  if (s.hybrid()) {  // llama.cpp's converter's keys (models-and-gguf.md §5), as model/hf_model.cpp writes them
    u32("rope.dimension_count", s.rope_dims);
    u32("ssm.conv_kernel", s.conv_kernel);
    u32("ssm.state_size", s.dk);
    u32("ssm.group_count", s.nk);
    u32("ssm.time_step_rank", s.nv);
    u32("ssm.inner_size", s.value_dim());
    u32("full_attention_interval", s.attn_interval);
    std::vector<int32_t> recurrent(s.linear.begin(), s.linear.end());
    b.kv_i32_array(a + "attention.recurrent_layers", recurrent);
    if (s.moe()) {
      u32("expert_count", s.n_expert);
      u32("expert_used_count", s.n_expert_used);
      u32("expert_feed_forward_length", s.n_ff_exp);
      u32("expert_shared_feed_forward_length", s.n_ff_shexp);
      b.kv_bool(a + "expert_weights_norm", s.norm_topk);
    }
  }
  if (spec.vocab_path.empty()) {
    if (s.n_vocab < 259)
      return make_error(StatusCode::kInvalidArgument, "dummy model: vocab_size {} < 259 (256 bytes + 3 specials)",
                        s.n_vocab);
    write_synthetic_vocab(b, s.n_vocab);
  } else {
    HS_RETURN_IF_ERROR(copy_vocab(b, spec.vocab_path, s.n_vocab));
  }

  for (const TensorSpec& t : tensors) {
    std::vector<uint64_t> ne{static_cast<uint64_t>(t.n_in), static_cast<uint64_t>(t.n_out),
                             static_cast<uint64_t>(t.n_mat)};
    ne.resize(static_cast<size_t>(t.n_dims));
    b.tensor(t.name, ne, static_cast<uint32_t>(t.type), t.offset);
  }
  std::vector<uint8_t>& header = b.bytes();
  const uint64_t data_at = (header.size() + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
  const uint64_t total = data_at + data_bytes;
  std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[total]);
  if (!buf)
    return make_error(StatusCode::kIoError, "dummy model: cannot allocate {:.1f} GiB of host memory for the weights",
                      static_cast<double>(total) / (1ull << 30));
  std::memcpy(buf.get(), header.data(), header.size());
  std::memset(buf.get() + header.size(), 0, data_at - header.size());
  uint8_t* data = buf.get() + data_at;

  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const TensorSpec& t = tensors[ti];
    uint8_t* dst = data + t.offset;
    if (t.init == Init::kConst) {
      for (int64_t i = 0; i < t.n_in; ++i) std::memcpy(dst + 4 * i, &t.fill, 4);
      continue;
    }
    if (t.init == Init::kNegUniform) {
      Rng rng(spec.seed, ti, 0);
      for (int64_t i = 0; i < t.n_in; ++i) {
        const float v = -(8.5f + 7.5f * rng.uniform());  // -U(1, 16)
        std::memcpy(dst + 4 * i, &v, 4);
      }
      continue;
    }
    const uint64_t row_bytes = t.bytes / static_cast<uint64_t>(t.n_rows());
    const float sd = 1.0f / std::sqrt(static_cast<float>(t.n_in));
    pool.parallel_for(t.n_rows(), [&, dst, row_bytes, sd](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) {
        Rng rng(spec.seed, ti, static_cast<uint64_t>(r));
        fill_row(t.type, dst + static_cast<uint64_t>(r) * row_bytes, t.n_in, sd, rng);
      }
    });
  }
  return gguf::File::from_buffer(std::move(buf), total,
                                 fmt::format("dummy {} from {}", dtype_name(spec.weight_type), spec.config_path));
}

Result<std::unique_ptr<gguf::File>> make_vocab_file(const std::string& vocab_path, int64_t n_vocab) {
  gguf::GgufBuilder b(3, gguf::kDefaultAlignment);
  b.kv_str("general.name", "vocabulary " + vocab_path);
  if (vocab_path == "synthetic") {
    if (n_vocab < 259)
      return make_error(StatusCode::kInvalidArgument, "synthetic vocabulary: {} tokens < 259 (256 bytes + 3 specials)",
                        n_vocab);
    write_synthetic_vocab(b, n_vocab);
  } else {
    HS_RETURN_IF_ERROR(copy_vocab(b, vocab_path, n_vocab));
  }
  std::vector<uint8_t>& header = b.bytes();
  const uint64_t total = (header.size() + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
  std::unique_ptr<uint8_t[]> buf(new uint8_t[total]());
  std::memcpy(buf.get(), header.data(), header.size());
  return gguf::File::from_buffer(std::move(buf), total, "vocabulary " + vocab_path);
}

}  // namespace hs
