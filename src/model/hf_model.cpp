// model/hf_model.cpp — config.json + safetensors → in-memory qwen35 / qwen3next GGUF (hf_model.h).
#include "model/hf_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "core/dtype.h"
#include "formats/gguf_builder.h"
#include "formats/safetensors.h"
#include "formats/safetensors_checkpoint.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace hs {
namespace {

using json = nlohmann::json;

// One tensor of the GGUF to build: ggml shape (ne0 first) and its bytes.
struct OutTensor {
  std::string name;
  std::vector<uint64_t> ne;
  DType type = DType::F32;
  std::vector<uint8_t> bytes;
};

struct HfShape {
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0, n_ctx = 0;
  int64_t nk = 0, nv = 0, dk = 0, dv = 0, kernel = 0, interval = 0, rope_dims = 0;
  double eps = 1e-6, theta = 1e7;
  bool tied = false;
  bool next = false;  // qwen3_next: fused qkvz / ba, grouped V heads, MoE FFN
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  bool norm_topk = true;
  std::vector<bool> linear;  // [n_layer]
};

Result<int64_t> get_int(const json& j, const char* key, std::optional<int64_t> dflt = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    if (dflt) return *dflt;
    return make_error(StatusCode::kNotFound, "config.json: '{}' is missing", key);
  }
  if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0 || j[key].get<int64_t>() > (int64_t{1} << 30))
    return make_error(StatusCode::kCorrupt, "config.json: '{}' must be a positive integer", key);
  return j[key].get<int64_t>();
}

Result<double> get_number(const json& j, const char* key, double dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number()) return make_error(StatusCode::kCorrupt, "config.json: '{}' must be a number", key);
  return j[key].get<double>();
}

Result<HfShape> read_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(StatusCode::kNotFound, "hf model: cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json root = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return make_error(StatusCode::kCorrupt, "hf model: '{}' is not a JSON object", path);
  const json& j = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  const std::string type = j.value("model_type", root.value("model_type", std::string()));
  if (type != "qwen3_5_text" && type != "qwen3_5" && type != "qwen3_next")
    return make_error(StatusCode::kUnsupported,
                      "hf model: model_type '{}' in '{}' is not supported (qwen3_5_text, qwen3_5, qwen3_next)", type, path);
  HfShape s;
  s.next = type == "qwen3_next";
  HS_ASSIGN_OR_RETURN(s.n_layer, get_int(j, "num_hidden_layers"));
  HS_ASSIGN_OR_RETURN(s.n_embd, get_int(j, "hidden_size"));
  HS_ASSIGN_OR_RETURN(s.n_ff, get_int(j, "intermediate_size"));
  HS_ASSIGN_OR_RETURN(s.n_head, get_int(j, "num_attention_heads"));
  HS_ASSIGN_OR_RETURN(s.n_head_kv, get_int(j, "num_key_value_heads", s.n_head));
  HS_ASSIGN_OR_RETURN(s.head_dim, get_int(j, "head_dim", 256));
  HS_ASSIGN_OR_RETURN(s.n_vocab, get_int(j, "vocab_size"));
  HS_ASSIGN_OR_RETURN(s.n_ctx, get_int(j, "max_position_embeddings", 32768));
  HS_ASSIGN_OR_RETURN(s.nk, get_int(j, "linear_num_key_heads", 16));
  HS_ASSIGN_OR_RETURN(s.nv, get_int(j, "linear_num_value_heads", 32));
  HS_ASSIGN_OR_RETURN(s.dk, get_int(j, "linear_key_head_dim", 128));
  HS_ASSIGN_OR_RETURN(s.dv, get_int(j, "linear_value_head_dim", 128));
  HS_ASSIGN_OR_RETURN(s.kernel, get_int(j, "linear_conv_kernel_dim", 4));
  HS_ASSIGN_OR_RETURN(s.eps, get_number(j, "rms_norm_eps", 1e-6));
  s.tied = j.value("tie_word_embeddings", root.value("tie_word_embeddings", false));
  if (j.value("attention_bias", false))
    return make_error(StatusCode::kUnsupported, "hf model: attention_bias true is not supported");
  if (s.next) {
    // Qwen3-Next: the sparse MoE block on every layer (decoder_sparse_step 1, no mlp_only_layers),
    // as llama.cpp's qwen3next graph assumes.
    HS_ASSIGN_OR_RETURN(s.n_expert, get_int(j, "num_experts"));
    HS_ASSIGN_OR_RETURN(s.n_expert_used, get_int(j, "num_experts_per_tok"));
    HS_ASSIGN_OR_RETURN(s.n_ff_exp, get_int(j, "moe_intermediate_size"));
    HS_ASSIGN_OR_RETURN(s.n_ff_shexp, get_int(j, "shared_expert_intermediate_size"));
    HS_ASSIGN_OR_RETURN(int64_t sparse_step, get_int(j, "decoder_sparse_step", 1));
    s.norm_topk = j.value("norm_topk_prob", true);
    if (sparse_step != 1 || (j.contains("mlp_only_layers") && !j["mlp_only_layers"].empty()))
      return make_error(StatusCode::kUnsupported,
                        "hf model: dense layers in a qwen3_next model (decoder_sparse_step {}, mlp_only_layers) are not "
                        "supported", sparse_step);
    if (s.n_expert_used > s.n_expert)
      return make_error(StatusCode::kCorrupt, "hf model: num_experts_per_tok {} of {} experts", s.n_expert_used,
                        s.n_expert);
  }
  if (s.nv % s.nk != 0)
    return make_error(StatusCode::kCorrupt, "hf model: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                      s.nv, s.nk);
  if (s.n_head % s.n_head_kv != 0)
    return make_error(StatusCode::kCorrupt, "hf model: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                      s.n_head, s.n_head_kv);
  // RoPE: rope_parameters (transformers 5) or the older top-level fields.
  const json rp = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"] : j;
  const std::string rope_type = rp.value("rope_type", std::string("default"));
  if (rope_type != "default")
    return make_error(StatusCode::kUnsupported, "hf model: rope_type '{}' is not supported (default only)", rope_type);
  HS_ASSIGN_OR_RETURN(s.theta, get_number(rp, "rope_theta", 1e7));
  HS_ASSIGN_OR_RETURN(double prf, get_number(rp, "partial_rotary_factor", 0.25));
  s.rope_dims = static_cast<int64_t>(s.head_dim * prf);
  if (s.rope_dims <= 0 || s.rope_dims % 2)
    return make_error(StatusCode::kCorrupt, "hf model: partial_rotary_factor {} of head_dim {} gives {} rotated dims", prf,
                      s.head_dim, s.rope_dims);
  // Layer schedule: layer_types, else full_attention_interval (written per layer as
  // attention.recurrent_layers, as llama.cpp does).
  HS_ASSIGN_OR_RETURN(s.interval, get_int(j, "full_attention_interval", 4));
  s.linear.assign(s.n_layer, false);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const json& lt = j["layer_types"];
    if (static_cast<int64_t>(lt.size()) != s.n_layer)
      return make_error(StatusCode::kCorrupt, "hf model: layer_types has {} entries for {} layers", lt.size(), s.n_layer);
    int64_t first_full = -1;
    for (int64_t il = 0; il < s.n_layer; ++il) {
      const std::string t = lt[il].is_string() ? lt[il].get<std::string>() : "";
      if (t != "linear_attention" && t != "full_attention")
        return make_error(StatusCode::kUnsupported, "hf model: layer_types[{}] = '{}'", il, t);
      s.linear[il] = t == "linear_attention";
      if (!s.linear[il] && first_full < 0) first_full = il;
    }
    s.interval = first_full < 0 ? s.n_layer + 1 : first_full + 1;  // the per-layer list is written too
  } else {
    for (int64_t il = 0; il < s.n_layer; ++il) s.linear[il] = (il + 1) % s.interval != 0;
  }
  return s;
}

Result<DType> matrix_type(const safetensors::TensorInfo& t) {
  switch (t.dtype) {
    case safetensors::Dtype::kF32: return DType::F32;
    case safetensors::Dtype::kF16: return DType::F16;
    case safetensors::Dtype::kBF16: return DType::BF16;
    default:
      return make_error(StatusCode::kUnsupported, "hf model: tensor '{}' has dtype {} (F32, F16, BF16 only)", t.name,
                        safetensors::dtype_name(t.dtype));
  }
}

class Converter {
 public:
  Converter(const safetensors::Checkpoint& st, const HfShape& s) : st_(st), s_(s) {}

  Status find_prefix() {
    for (const char* p : {"model.language_model.", "model.", ""})
      if (st_.find(std::string(p) + "embed_tokens.weight")) {
        prefix_ = p;
        return Status::ok();
      }
    return make_error(StatusCode::kNotFound, "hf model: tensor 'model.embed_tokens.weight' is missing");
  }

  Result<const safetensors::TensorInfo*> get(const std::string& name, std::vector<int64_t> shape) const {
    const safetensors::TensorInfo* t = st_.find(name);
    if (!t) return make_error(StatusCode::kNotFound, "hf model: tensor '{}' is missing", name);
    if (t->shape != shape) {
      std::string want = "[";
      for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
      return make_error(StatusCode::kCorrupt, "hf model: tensor '{}' has shape {}, expected {}]", name, t->shape_string(),
                        want);
    }
    return t;
  }

  // A matrix [rows][cols] in its stored type; row_src[r] = the source row of output row r
  // (empty: identity), col_src the same for columns (applied in blocks of the element size);
  // out_rows >= 0 keeps only that many output rows (a row subset picked by row_src).
  Status matrix(const std::string& out, const std::string& in, int64_t rows, int64_t cols,
                const std::vector<int64_t>& row_src = {}, const std::vector<int64_t>& col_src = {},
                int64_t out_rows = -1) {
    HS_ASSIGN_OR_RETURN(const safetensors::TensorInfo* t, get(in, {rows, cols}));
    HS_ASSIGN_OR_RETURN(DType type, matrix_type(*t));
    const int64_t es = safetensors::dtype_size(t->dtype);
    if (out_rows < 0) out_rows = rows;
    OutTensor o{out, {static_cast<uint64_t>(cols), static_cast<uint64_t>(out_rows)}, type, {}};
    o.bytes.resize(static_cast<size_t>(out_rows * cols * es));
    for (int64_t r = 0; r < out_rows; ++r) {
      const uint8_t* src = t->data + (row_src.empty() ? r : row_src[r]) * cols * es;
      uint8_t* dst = o.bytes.data() + r * cols * es;
      if (col_src.empty()) std::memcpy(dst, src, static_cast<size_t>(cols * es));
      else
        for (int64_t c = 0; c < cols; ++c) std::memcpy(dst + c * es, src + col_src[c] * es, static_cast<size_t>(es));
    }
    out_.push_back(std::move(o));
    return Status::ok();
  }

  // A tensor as f32 values (norms, gates, the conv), transformed by `fn` (index, value).
  template <typename F>
  Status vector(const std::string& out, const std::string& in, std::vector<int64_t> shape, std::vector<uint64_t> ne,
                F&& fn) {
    HS_ASSIGN_OR_RETURN(const safetensors::TensorInfo* t, get(in, shape));
    HS_ASSIGN_OR_RETURN(std::vector<float> v, safetensors::File::to_f32(*t));
    std::vector<float> res(v.size());
    for (size_t i = 0; i < v.size(); ++i) res[i] = fn(static_cast<int64_t>(i), v);
    OutTensor o{out, std::move(ne), DType::F32, {}};
    o.bytes.resize(res.size() * 4);
    std::memcpy(o.bytes.data(), res.data(), o.bytes.size());
    out_.push_back(std::move(o));
    return Status::ok();
  }
  // A matrix [rows][cols] stored as f32 whatever its type (the converter's f32 router tensors).
  Status matrix_f32(const std::string& out, const std::string& in, int64_t rows, int64_t cols) {
    return vector(out, in, {rows, cols}, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)},
                  [](int64_t i, const std::vector<float>& v) { return v[i]; });
  }
  // Per-expert matrices `fmt`(e) [rows][cols], e < n, stacked into the 3-D {cols, rows, n} of
  // llama.cpp's *_exps tensors, in their stored type (all experts must share it).
  Status stacked(const std::string& out, const std::string& fmt_prefix, const std::string& fmt_suffix, int64_t n,
                 int64_t rows, int64_t cols) {
    OutTensor o{out, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), static_cast<uint64_t>(n)}, DType::F32, {}};
    for (int64_t e = 0; e < n; ++e) {
      const std::string in = fmt_prefix + std::to_string(e) + fmt_suffix;
      HS_ASSIGN_OR_RETURN(const safetensors::TensorInfo* t, get(in, {rows, cols}));
      HS_ASSIGN_OR_RETURN(DType type, matrix_type(*t));
      if (e == 0) o.type = type;
      else if (type != o.type)
        return make_error(StatusCode::kUnsupported, "hf model: tensor '{}' is {}, expert 0's is {}", in,
                          dtype_name(type), dtype_name(o.type));
      o.bytes.insert(o.bytes.end(), t->data, t->data + t->n_bytes);
    }
    out_.push_back(std::move(o));
    return Status::ok();
  }
  // Qwen3-Next's MoE block: router, stacked experts, shared expert and its gate.
  Status moe(const std::string& gp, const std::string& hp) {
    const int64_t H = s_.n_embd, E = s_.n_expert, F = s_.n_ff_exp, S = s_.n_ff_shexp;
    const std::string m = hp + "mlp.";
    HS_RETURN_IF_ERROR(matrix_f32(gp + "ffn_gate_inp.weight", m + "gate.weight", E, H));
    HS_RETURN_IF_ERROR(stacked(gp + "ffn_gate_exps.weight", m + "experts.", ".gate_proj.weight", E, F, H));
    HS_RETURN_IF_ERROR(stacked(gp + "ffn_up_exps.weight", m + "experts.", ".up_proj.weight", E, F, H));
    HS_RETURN_IF_ERROR(stacked(gp + "ffn_down_exps.weight", m + "experts.", ".down_proj.weight", E, H, F));
    HS_RETURN_IF_ERROR(matrix(gp + "ffn_gate_shexp.weight", m + "shared_expert.gate_proj.weight", S, H));
    HS_RETURN_IF_ERROR(matrix(gp + "ffn_up_shexp.weight", m + "shared_expert.up_proj.weight", S, H));
    HS_RETURN_IF_ERROR(matrix(gp + "ffn_down_shexp.weight", m + "shared_expert.down_proj.weight", H, S));
    return matrix_f32(gp + "ffn_gate_inp_shexp.weight", m + "shared_expert_gate.weight", 1, H);
  }

  Status norm(const std::string& out, const std::string& in, int64_t n, bool plus_one) {
    return vector(out, in, {n}, {static_cast<uint64_t>(n)},
                  [&](int64_t i, const std::vector<float>& v) { return plus_one ? v[i] + 1.0f : v[i]; });
  }

  Status convert() {
    HS_RETURN_IF_ERROR(find_prefix());
    const std::string m = prefix_;
    const int64_t H = s_.n_embd, V = s_.n_vocab;
    HS_RETURN_IF_ERROR(matrix("token_embd.weight", m + "embed_tokens.weight", V, H));
    if (!s_.tied) HS_RETURN_IF_ERROR(matrix("output.weight", "lm_head.weight", V, H));
    HS_RETURN_IF_ERROR(norm("output_norm.weight", m + "norm.weight", H, true));
    // qwen35: grouped → tiled V heads (tiled head j' is grouped head (j' % nk) · r + j' / nk);
    // qwen3next keeps the grouped order.
    const int64_t nk = s_.nk, nv = s_.nv, r = nv / nk, dk = s_.dk, dv = s_.dv;
    const int64_t key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
    auto src_head = [&](int64_t j) { return s_.next ? j : (j % nk) * r + j / nk; };
    std::vector<int64_t> head_src(nv), v_rows(value_dim), qkv_rows(conv_dim);
    for (int64_t j = 0; j < nv; ++j) head_src[j] = src_head(j);
    for (int64_t i = 0; i < value_dim; ++i) v_rows[i] = src_head(i / dv) * dv + i % dv;
    for (int64_t i = 0; i < conv_dim; ++i) qkv_rows[i] = i < 2 * key_dim ? i : 2 * key_dim + v_rows[i - 2 * key_dim];
    const int64_t q_dim = s_.n_head * s_.head_dim, kv_dim = s_.n_head_kv * s_.head_dim;
    for (int64_t il = 0; il < s_.n_layer; ++il) {
      const std::string hp = m + "layers." + std::to_string(il) + ".";
      const std::string gp = "blk." + std::to_string(il) + ".";
      HS_RETURN_IF_ERROR(norm(gp + "attn_norm.weight", hp + "input_layernorm.weight", H, true));
      HS_RETURN_IF_ERROR(norm(gp + "post_attention_norm.weight", hp + "post_attention_layernorm.weight", H, true));
      if (s_.next) {
        HS_RETURN_IF_ERROR(moe(gp, hp));
      } else {
        HS_RETURN_IF_ERROR(matrix(gp + "ffn_gate.weight", hp + "mlp.gate_proj.weight", s_.n_ff, H));
        HS_RETURN_IF_ERROR(matrix(gp + "ffn_up.weight", hp + "mlp.up_proj.weight", s_.n_ff, H));
        HS_RETURN_IF_ERROR(matrix(gp + "ffn_down.weight", hp + "mlp.down_proj.weight", H, s_.n_ff));
      }
      if (!s_.linear[il]) {
        const std::string a = hp + "self_attn.";
        HS_RETURN_IF_ERROR(matrix(gp + "attn_q.weight", a + "q_proj.weight", 2 * q_dim, H));
        HS_RETURN_IF_ERROR(matrix(gp + "attn_k.weight", a + "k_proj.weight", kv_dim, H));
        HS_RETURN_IF_ERROR(matrix(gp + "attn_v.weight", a + "v_proj.weight", kv_dim, H));
        HS_RETURN_IF_ERROR(matrix(gp + "attn_output.weight", a + "o_proj.weight", H, q_dim));
        HS_RETURN_IF_ERROR(norm(gp + "attn_q_norm.weight", a + "q_norm.weight", s_.head_dim, true));
        HS_RETURN_IF_ERROR(norm(gp + "attn_k_norm.weight", a + "k_norm.weight", s_.head_dim, true));
        continue;
      }
      const std::string a = hp + "linear_attn.";
      if (s_.next) {
        // in_proj_qkvz rows per k-head g: [q (dk) | k (dk) | v (r · dv) | z (r · dv)] → attn_qkv =
        // [all q | all k | all v] and attn_gate = all z; in_proj_ba stays grouped (ssm_ba).
        const int64_t blk = 2 * dk + 2 * r * dv;
        std::vector<int64_t> qkv_src(conv_dim), z_src(value_dim);
        for (int64_t g = 0; g < nk; ++g) {
          for (int64_t i = 0; i < dk; ++i) {
            qkv_src[g * dk + i] = g * blk + i;
            qkv_src[key_dim + g * dk + i] = g * blk + dk + i;
          }
          for (int64_t i = 0; i < r * dv; ++i) {
            qkv_src[2 * key_dim + g * r * dv + i] = g * blk + 2 * dk + i;
            z_src[g * r * dv + i] = g * blk + 2 * dk + r * dv + i;
          }
        }
        HS_RETURN_IF_ERROR(matrix(gp + "attn_qkv.weight", a + "in_proj_qkvz.weight", 2 * key_dim + 2 * value_dim, H,
                                  qkv_src, {}, conv_dim));
        HS_RETURN_IF_ERROR(matrix(gp + "attn_gate.weight", a + "in_proj_qkvz.weight", 2 * key_dim + 2 * value_dim, H,
                                  z_src, {}, value_dim));
        HS_RETURN_IF_ERROR(matrix(gp + "ssm_ba.weight", a + "in_proj_ba.weight", 2 * nv, H));
      } else {
        HS_RETURN_IF_ERROR(matrix(gp + "attn_qkv.weight", a + "in_proj_qkv.weight", conv_dim, H, qkv_rows));
        HS_RETURN_IF_ERROR(matrix(gp + "attn_gate.weight", a + "in_proj_z.weight", value_dim, H, v_rows));
        HS_RETURN_IF_ERROR(matrix(gp + "ssm_beta.weight", a + "in_proj_b.weight", nv, H, head_src));
        HS_RETURN_IF_ERROR(matrix(gp + "ssm_alpha.weight", a + "in_proj_a.weight", nv, H, head_src));
      }
      HS_RETURN_IF_ERROR(matrix(gp + "ssm_out.weight", a + "out_proj.weight", H, value_dim, {}, v_rows));
      const int64_t K = s_.kernel;
      HS_RETURN_IF_ERROR(vector(gp + "ssm_conv1d.weight", a + "conv1d.weight", {conv_dim, 1, K},
                                {static_cast<uint64_t>(K), static_cast<uint64_t>(conv_dim)},
                                [&](int64_t i, const std::vector<float>& v) { return v[qkv_rows[i / K] * K + i % K]; }));
      HS_RETURN_IF_ERROR(vector(gp + "ssm_a", a + "A_log", {nv}, {static_cast<uint64_t>(nv)},
                                [&](int64_t i, const std::vector<float>& v) { return -std::exp(v[head_src[i]]); }));
      HS_RETURN_IF_ERROR(vector(gp + "ssm_dt.bias", a + "dt_bias", {nv}, {static_cast<uint64_t>(nv)},
                                [&](int64_t i, const std::vector<float>& v) { return v[head_src[i]]; }));
      HS_RETURN_IF_ERROR(norm(gp + "ssm_norm.weight", a + "norm.weight", dv, false));
    }
    return Status::ok();
  }

  Result<std::unique_ptr<gguf::File>> build(const std::string& label, const std::string& dir) {
    gguf::GgufBuilder b(3, gguf::kDefaultAlignment);
    const HfShape& s = s_;
    const std::string arch = s.next ? "qwen3next" : "qwen35";
    const std::string p = arch + ".";
    b.kv_str("general.architecture", arch);
    b.kv_str("general.name", label);
    b.kv_u32(p + "block_count", static_cast<uint32_t>(s.n_layer));
    b.kv_u32(p + "context_length", static_cast<uint32_t>(s.n_ctx));
    b.kv_u32(p + "embedding_length", static_cast<uint32_t>(s.n_embd));
    b.kv_u32(p + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
    b.kv_u32(p + "attention.head_count", static_cast<uint32_t>(s.n_head));
    b.kv_u32(p + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
    b.kv_u32(p + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    b.kv_u32(p + "attention.value_length", static_cast<uint32_t>(s.head_dim));
    b.kv_f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(s.eps));
    b.kv_f32(p + "rope.freq_base", static_cast<float>(s.theta));
    b.kv_u32(p + "rope.dimension_count", static_cast<uint32_t>(s.rope_dims));
    b.kv_u32(p + "ssm.conv_kernel", static_cast<uint32_t>(s.kernel));
    b.kv_u32(p + "ssm.state_size", static_cast<uint32_t>(s.dk));
    b.kv_u32(p + "ssm.group_count", static_cast<uint32_t>(s.nk));
    b.kv_u32(p + "ssm.time_step_rank", static_cast<uint32_t>(s.nv));
    b.kv_u32(p + "ssm.inner_size", static_cast<uint32_t>(s.nv * s.dv));
    b.kv_u32(p + "full_attention_interval", static_cast<uint32_t>(s.interval));
    if (s.next) {
      b.kv_u32(p + "expert_count", static_cast<uint32_t>(s.n_expert));
      b.kv_u32(p + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
      b.kv_u32(p + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
      b.kv_u32(p + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.n_ff_shexp));
      b.kv_bool(p + "expert_weights_norm", s.norm_topk);  // llama.cpp's converter leaves it out (always true there)
    }
    std::vector<int32_t> recurrent(s.linear.begin(), s.linear.end());
    b.kv_i32_array(p + "attention.recurrent_layers", recurrent);  // llama.cpp writes bools; both read alike
    HS_RETURN_IF_ERROR(tok::write_hf_tokenizer(dir, s.n_vocab, b).status());  // tokenizer.json, when there is one
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const OutTensor& t : out_) {
      offsets.push_back(offset);
      b.tensor(t.name, t.ne, static_cast<uint32_t>(t.type), offset);
      offset = (offset + t.bytes.size() + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
    }
    std::vector<uint8_t>& header = b.bytes();
    const uint64_t data_at =
        (header.size() + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
    const uint64_t total = data_at + offset;
    std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[total]);
    if (!buf)
      return make_error(StatusCode::kIoError, "hf model: cannot allocate {:.1f} GiB of host memory for the weights",
                        static_cast<double>(total) / (1ull << 30));
    std::memset(buf.get(), 0, total);
    std::memcpy(buf.get(), header.data(), header.size());
    for (size_t i = 0; i < out_.size(); ++i)
      std::memcpy(buf.get() + data_at + offsets[i], out_[i].bytes.data(), out_[i].bytes.size());
    out_.clear();
    return gguf::File::from_buffer(std::move(buf), total, label);
  }

 private:
  const safetensors::Checkpoint& st_;
  const HfShape& s_;
  std::string prefix_;
  std::vector<OutTensor> out_;
};

}  // namespace

static Result<std::unique_ptr<gguf::File>> load_hf_model_impl(const std::string& dir) {
  HS_ASSIGN_OR_RETURN(HfShape s, read_config(dir + "/config.json"));
  HS_ASSIGN_OR_RETURN(auto st, safetensors::Checkpoint::open_dir(dir));
  Converter conv(*st, s);
  HS_RETURN_IF_ERROR(conv.convert());
  return conv.build(fmt::format("{} from {}", s.next ? "qwen3next" : "qwen35", dir), dir);
}

Result<std::unique_ptr<gguf::File>> load_hf_model(const std::string& dir) {
  // nlohmann's typed accessors throw on a field of the wrong type ("hidden_size": "128"): an
  // error naming the file, never a crash.
  try {
    return load_hf_model_impl(dir);
  } catch (const json::exception& e) {
    return make_error(StatusCode::kCorrupt, "hf model: {}/config.json: {}", dir, e.what());
  }
}

}  // namespace hs
