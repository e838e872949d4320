// tests/unit/app/test_bench_cost.cpp — app/bench_cost.h, what `hindsight bench` counts per step,
// on tiny dummy models (model/dummy_model.h): the recurrent-state bytes equal HybridDecoder's
// slot size and are zero for a dense model; KV only on a hybrid's full-attention layers; the
// matmul FLOPs equal 2 x the matrix elements a token meets (counted from the file's tensors,
// MoE experts at k/E); the routed expert share of the weight bytes; the committed 0.8B shape's
// state bytes by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string_view>

#include "app/bench_cost.h"
#include "model/decoder.h"
#include "model/dummy_model.h"
#include "model/hybrid_decoder.h"

namespace hs::app {
namespace {

std::string write_config(const std::string& name, const std::string& json) {
  const auto path = std::filesystem::temp_directory_path() / ("hs_bench_cost_" + name + ".json");
  std::ofstream(path) << json;
  return path.string();
}

std::unique_ptr<gguf::File> make(const std::string& name, const std::string& json) {
  ThreadPool pool(2);
  DummyModelSpec spec;
  spec.config_path = write_config(name, json);
  spec.weight_type = DType::F32;
  auto f = make_dummy_model(spec, pool);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  return f.is_ok() ? std::move(*f) : nullptr;
}

const char* kLlama = R"({"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "max_position_embeddings": 2048, "tie_word_embeddings": false})";

const char* kQwen35 = R"({"model_type": "qwen3_5_text", "hidden_size": 128, "intermediate_size": 192,
  "num_hidden_layers": 8, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
  "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
  "vocab_size": 512, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": false,
  "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25}})";

const char* kQwen3Next = R"({"model_type": "qwen3_next", "hidden_size": 128,
  "intermediate_size": 192, "num_hidden_layers": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
  "head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
  "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "num_experts": 4, "num_experts_per_tok": 2,
  "moe_intermediate_size": 64, "shared_expert_intermediate_size": 96, "norm_topk_prob": true,
  "vocab_size": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
  "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
  "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                  "linear_attention", "linear_attention", "linear_attention", "full_attention"]})";

// 2 x the elements of the weight matrices one token's matmuls read: every matrix of the blocks
// but the conv filter (not a matmul), the experts at k/E, plus the output projection.
double matmul_flops_from_tensors(const gguf::File& f, const ModelConfig& c) {
  double elems = 0;
  for (const auto& t : f.tensors()) {
    const std::string_view name(t.name);
    if (t.n_dims < 2 || name.starts_with("token_embd") || name.ends_with("ssm_conv1d.weight")) continue;
    const double share = name.ends_with("_exps.weight") ? static_cast<double>(c.n_expert_used) / c.n_expert : 1.0;
    elems += share * static_cast<double>(t.n_elements());
  }
  return 2.0 * elems;
}

// The attention and delta-rule FLOPs of one token at position 0 (one key).
double non_matmul_flops(const ModelConfig& c) {
  double f = 0;
  for (int l = 0; l < c.n_layer; ++l)
    f += layer_has_kv(c, l) ? 4.0 * c.q_dim() : 4.0 * c.ssm_n_v_heads * c.ssm_k_dim * c.ssm_v_dim;
  return f;
}

TEST(BenchCost, DenseModelHasNoStateAndKvOnEveryLayer) {
  auto f = make("llama", kLlama);
  ASSERT_TRUE(f);
  auto c = load_model_config(*f);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(recurrent_state_bytes(*c), 0);
  EXPECT_EQ(state_bytes_per_step(*c), 0.0);
  EXPECT_EQ(expert_weight_bytes(*f), 0);
  EXPECT_EQ(decode_weight_bytes(*c, 1000, 0, 64), 1000.0);
  const KvGeometry g{c->n_layer, c->n_head_kv, c->head_dim, 16, KvDtype::kF16};
  EXPECT_DOUBLE_EQ(dense_kv_bytes(*c, g, 100), 2.0 * 100 * 2 * kv_token_bytes(KvDtype::kF16, 32));
  // The dense count as bench had it before the hybrids: 2 n (H (2 q + 2 kv) + 3 H ff) L + 2 H V
  // + 4 keys q per layer.
  const double H = 128, q = 128, kv = 64, ff = 256, L = 2, V = 512;
  EXPECT_DOUBLE_EQ(step_flops(*c, 1, 1, 0), 2 * (H * (2 * q + 2 * kv) + 3 * H * ff) * L + 2 * H * V + 4 * q * L);
  EXPECT_DOUBLE_EQ(step_flops(*c, 1, 1, 0) - non_matmul_flops(*c), matmul_flops_from_tensors(*f, *c));
}

TEST(BenchCost, HybridStateAndKvOfTheFullLayers) {
  for (const auto& [name, json] : {std::pair{"qwen35", kQwen35}, std::pair{"qwen3next", kQwen3Next}}) {
    auto f = make(name, json);
    ASSERT_TRUE(f);
    auto c = load_model_config(*f);
    ASSERT_TRUE(c.is_ok());
    ASSERT_TRUE(c->is_hybrid());
    EXPECT_EQ(c->n_attn_layers(), 2) << name;
    // Per linear layer (6 of 8): conv (4 - 1) x (2 x 2 x 32 + 4 x 32) and delta 4 x 32 x 32 floats.
    const int64_t want = 6 * ((4 - 1) * 256 + 4 * 32 * 32) * 4;
    EXPECT_EQ(recurrent_state_bytes(*c), want) << name;
    EXPECT_EQ(state_bytes_per_step(*c), 2.0 * want) << name;
    const double matmul = matmul_flops_from_tensors(*f, *c);
    EXPECT_NEAR(step_flops(*c, 1, 1, 0) - non_matmul_flops(*c), matmul, 1e-9 * matmul) << name;
    // n tokens: n x the per-token matmuls, plus attention over depth + i + 1 keys.
    EXPECT_NEAR(step_flops(*c, 3, 0, 10) - (step_flops(*c, 3, 0, 0)),
                2.0 * 3 * 10 * 4.0 * c->q_dim(), 1e-6) << name;
    auto dec = HybridDecoder::create(std::move(f));
    ASSERT_TRUE(dec.is_ok()) << dec.status().message();
    EXPECT_EQ(recurrent_state_bytes(*c), (*dec)->state_bytes_per_slot()) << name;
    // KV: only the full-attention layers, as the model's KvCache geometry has them.
    const KvGeometry g = (*dec)->kv_geometry(16, KvDtype::kF16);
    EXPECT_EQ(g.n_layer, 2) << name;
    EXPECT_DOUBLE_EQ(dense_kv_bytes(*c, g, 100), g.n_layer * 100.0 * g.n_kv_heads * kv_token_bytes(g.dtype, g.head_dim))
        << name;
    // The skip predicate gets KV layer indices (the sparse runtime's numbering): 0 and 1 here,
    // never a model layer index (3 and 7 are the full-attention layers).
    std::vector<int> asked;
    const double kept = dense_kv_bytes(*c, g, 100, [&](int l) {
      asked.push_back(l);
      return l == 1;
    });
    EXPECT_EQ(asked, (std::vector<int>{0, 1})) << name;
    EXPECT_DOUBLE_EQ(kept, 100.0 * g.n_kv_heads * kv_token_bytes(g.dtype, g.head_dim)) << name;
    // Weights: all of them for the dense FFN; the experts' routed share for MoE.
    const int64_t total = (*dec)->weight_bytes(), experts = expert_weight_bytes((*dec)->file());
    if (c->is_moe()) {
      ASSERT_GT(experts, 0) << name;
      EXPECT_DOUBLE_EQ(decode_weight_bytes(*c, total, experts, 1), (total - experts) + experts * 0.5);  // k/E = 2/4
      EXPECT_DOUBLE_EQ(decode_weight_bytes(*c, total, experts, 2), (total - experts) + experts * 0.75);
      EXPECT_NEAR(decode_weight_bytes(*c, total, experts, 1000), static_cast<double>(total), 1.0);
    } else {
      EXPECT_EQ(experts, 0) << name;
      EXPECT_EQ(decode_weight_bytes(*c, total, experts, 1), static_cast<double>(total)) << name;
    }
  }
}

TEST(BenchCost, Qwen35_08BStateBytes) {
  // configs/qwen3.5-0.8b.json: 18 linear layers, conv_dim 2 x 16 x 128 + 16 x 128 = 6144,
  // delta 16 x 128 x 128 per layer.
  ModelConfig c;
  c.n_layer = 24;
  for (int l = 0; l < 24; ++l) c.layer_is_linear.push_back((l + 1) % 4 != 0);
  c.ssm_n_k_heads = 16;
  c.ssm_n_v_heads = 16;
  c.ssm_k_dim = 128;
  c.ssm_v_dim = 128;
  c.ssm_conv_kernel = 4;
  EXPECT_EQ(recurrent_state_bytes(c), int64_t{18} * (3 * 6144 + 16 * 128 * 128) * 4);  // 19.3 MiB
}

}  // namespace
}  // namespace hs::app
