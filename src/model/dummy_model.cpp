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
  std::string arch;  // GGUF architecture: llama | qwen2 | gemma3
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0, n_ctx = 4096;
  double rms_eps = 1e-5, rope_theta = 10000.0;
  int64_t sliding_window = 0;  // gemma3
  double softcap = 0;          // gemma3 final_logit_softcapping
  bool tied = false;
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
  else
    return make_error(StatusCode::kUnsupported, "dummy model: model_type '{}' in '{}' is not supported (llama, qwen2, "
                      "gemma3_text)", type, path);
  HS_ASSIGN_OR_RETURN(s.n_layer, get_int(j, "num_hidden_layers", 1, 1024));
  HS_ASSIGN_OR_RETURN(s.n_embd, get_int(j, "hidden_size", 8, 1 << 16));
  HS_ASSIGN_OR_RETURN(s.n_head, get_int(j, "num_attention_heads", 1, 1024));
  HS_ASSIGN_OR_RETURN(s.n_head_kv, get_int(j, "num_key_value_heads", 1, 1024, s.n_head));
  HS_ASSIGN_OR_RETURN(s.head_dim, get_int(j, "head_dim", 2, 1024, s.n_embd / s.n_head));
  HS_ASSIGN_OR_RETURN(s.n_ff, get_int(j, "intermediate_size", 1, 1 << 18));
  HS_ASSIGN_OR_RETURN(s.n_vocab, get_int(j, "vocab_size", 1, 1 << 22));
  HS_ASSIGN_OR_RETURN(s.n_ctx, get_int(j, "max_position_embeddings", 16, 1 << 24, 4096));
  HS_ASSIGN_OR_RETURN(s.rms_eps, get_number(j, "rms_norm_eps", s.arch == "gemma3" ? 1e-6 : 1e-5));
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
  return s;
}

// One matrix or vector of the model, and how its values are drawn.
struct TensorSpec {
  std::string name;
  DType type;
  int64_t n_in, n_out;  // ne[0] (contiguous), ne[1]; n_out = 1 and is_vector for 1-D tensors
  bool is_vector;
  float fill;           // vectors: the constant value (norm weights 1, biases 0)
  uint64_t offset = 0, bytes = 0;
};

std::vector<TensorSpec> tensor_list(const Shape& s, DType wt) {
  std::vector<TensorSpec> t;
  auto mat = [&](std::string name, int64_t n_in, int64_t n_out) {
    t.push_back({std::move(name), wt, n_in, n_out, false, 0.0f});
  };
  auto vec = [&](std::string name, int64_t n, float v) { t.push_back({std::move(name), DType::F32, n, 1, true, v}); };
  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  mat("token_embd.weight", s.n_embd, s.n_vocab);
  // Norm weights 1 (gemma's GGUF stores 1 + w: the converter adds the 1 of its (1 + w) scaling).
  const float norm_one = 1.0f;
  vec("output_norm.weight", s.n_embd, norm_one);
  if (!s.tied) mat("output.weight", s.n_embd, s.n_vocab);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    vec(p + "attn_norm.weight", s.n_embd, norm_one);
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

Result<std::unique_ptr<gguf::File>> make_dummy_model(const DummyModelSpec& spec, ThreadPool& pool) {
  HS_ASSIGN_OR_RETURN(Shape s, read_shape(spec.config_path));
  const auto info = dtype_info(spec.weight_type);
  if (!info) return make_error(StatusCode::kInvalidArgument, "dummy model: unknown weight type");
  const int64_t blk = info->block_elems;
  for (int64_t n_in : {s.n_embd, s.n_head * s.head_dim, s.n_ff})
    if (n_in % blk != 0)
      return make_error(StatusCode::kInvalidArgument, "dummy model: a row of {} elements is not whole {} blocks of {}",
                        n_in, dtype_name(spec.weight_type), blk);

  gguf::GgufBuilder b(3, gguf::kDefaultAlignment);
  const std::string a = s.arch + ".";
  b.kv_str("general.architecture", s.arch);
  b.kv_str("general.name", fmt::format("dummy {} (random {} weights)", s.arch, dtype_name(spec.weight_type)));
  b.kv_u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
  b.kv_u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  b.kv_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  b.kv_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  b.kv_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  b.kv_u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  b.kv_u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  b.kv_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
  b.kv_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(s.rms_eps));
  b.kv_f32(a + "rope.freq_base", static_cast<float>(s.rope_theta));
  if (s.sliding_window > 0) b.kv_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (s.softcap > 0) b.kv_f32(a + "final_logit_softcapping", static_cast<float>(s.softcap));
  if (spec.vocab_path.empty()) {
    if (s.n_vocab < 259)
      return make_error(StatusCode::kInvalidArgument, "dummy model: vocab_size {} < 259 (256 bytes + 3 specials)",
                        s.n_vocab);
    write_synthetic_vocab(b, s.n_vocab);
  } else {
    HS_RETURN_IF_ERROR(copy_vocab(b, spec.vocab_path, s.n_vocab));
  }

  std::vector<TensorSpec> tensors = tensor_list(s, spec.weight_type);
  uint64_t offset = 0;
  for (TensorSpec& t : tensors) {
    const auto ti = dtype_info(t.type);
    t.offset = offset;
    t.bytes = static_cast<uint64_t>(t.n_out) * static_cast<uint64_t>(t.n_in / ti->block_elems) * ti->block_bytes;
    offset = (offset + t.bytes + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
    if (t.is_vector) b.tensor(t.name, {static_cast<uint64_t>(t.n_in)}, static_cast<uint32_t>(t.type), t.offset);
    else
      b.tensor(t.name, {static_cast<uint64_t>(t.n_in), static_cast<uint64_t>(t.n_out)}, static_cast<uint32_t>(t.type),
               t.offset);
  }
  std::vector<uint8_t>& header = b.bytes();
  const uint64_t data_at = (header.size() + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
  const uint64_t total = data_at + offset;
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
    if (t.is_vector) {
      for (int64_t i = 0; i < t.n_in; ++i) std::memcpy(dst + 4 * i, &t.fill, 4);
      continue;
    }
    const uint64_t row_bytes = t.bytes / static_cast<uint64_t>(t.n_out);
    const float sd = 1.0f / std::sqrt(static_cast<float>(t.n_in));
    pool.parallel_for(t.n_out, [&, dst, row_bytes, sd](int64_t begin, int64_t end, int) {
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
