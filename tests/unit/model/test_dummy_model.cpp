// tests/unit/model/test_dummy_model.cpp — random-weight models from a config.json
// (model/dummy_model.h): the shape read, every weight type, a forward pass with finite logits,
// the same weights for any thread count, a copied vocabulary, and clear errors for bad configs.
// The hybrids (qwen35 from qwen3_5 / qwen3_5_text, qwen3next from qwen3_next): tiny configs with
// the real full / linear pattern load through HybridDecoder (the loader's config and tensor
// checks) and give finite logits over a prefill and decode steps; the committed configs'
// (configs/*.json) shapes, schedules and parameter counts without building them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>

#include "kv/recurrent_pool.h"
#include "model/decoder.h"
#include "model/dummy_model.h"
#include "model/hybrid_decoder.h"
#include "tokenizer/tokenizer.h"

namespace hs {
namespace {

std::string write_config(const std::string& name, const std::string& json) {
  const auto path = std::filesystem::temp_directory_path() / ("hs_dummy_" + name + ".json");
  std::ofstream(path) << json;
  return path.string();
}

const char* kTiny = R"({"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "max_position_embeddings": 2048, "tie_word_embeddings": false})";

Result<std::unique_ptr<gguf::File>> make(const std::string& config, DType type, int threads = 2,
                                         const std::string& vocab = "") {
  ThreadPool pool(threads);
  DummyModelSpec spec;
  spec.config_path = config;
  spec.weight_type = type;
  spec.vocab_path = vocab;
  return make_dummy_model(spec, pool);
}

TEST(DummyModel, ReadsTheShapeAndRunsEveryWeightType) {
  const std::string cfg = write_config("tiny", kTiny);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    auto file = make(cfg, t);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    EXPECT_EQ((*file)->find_tensor("blk.1.ffn_down.weight")->type, t);
    EXPECT_EQ((*file)->find_tensor("blk.0.attn_norm.weight")->type, DType::F32);
    auto dec = Decoder::create(std::move(*file));
    ASSERT_TRUE(dec.is_ok()) << dec.status().message();
    const ModelConfig& c = (*dec)->config();
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_embd, 128);
    EXPECT_EQ(c.n_head_kv, 2);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_FALSE(c.tied_output);
    EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);

    KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, KvDtype::kF16}, 8);
    ThreadPool pool(2);
    SeqKv seq;
    SeqKv* seqs[] = {&seq};
    Batch b;
    for (int i = 0; i < 20; ++i) b.add((i * 37) % 512, i, 0, i == 19);
    std::vector<float> logits;
    ASSERT_TRUE((*dec)->forward(b, seqs, kv, pool, logits).is_ok());
    ASSERT_EQ(logits.size(), 512u);
    float spread = 0;
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v)) << dtype_name(t);
      spread = std::max(spread, std::fabs(v - logits[0]));
    }
    EXPECT_GT(spread, 1e-3f) << dtype_name(t) << ": the logits do not depend on the token";
    kv.release(seq);
  }
}

TEST(DummyModel, SameWeightsForAnyThreadCountAndQ4K) {
  const std::string cfg = write_config("q4k", R"({"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 300, "tie_word_embeddings": true})");
  auto a = make(cfg, DType::Q4_K, 1), b = make(cfg, DType::Q4_K, 3);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ((*a)->file_size(), (*b)->file_size());
  const auto* ta = (*a)->find_tensor("blk.0.ffn_up.weight");
  const auto* tb = (*b)->find_tensor("blk.0.ffn_up.weight");
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(0, std::memcmp(ta->data, tb->data, ta->n_bytes));
  EXPECT_EQ((*a)->find_tensor("output.weight"), nullptr);          // tied
  EXPECT_NE((*a)->find_tensor("blk.0.attn_q.bias"), nullptr);      // qwen2 biases
  auto dec = Decoder::create(std::move(*a));
  ASSERT_TRUE(dec.is_ok()) << dec.status().message();
  EXPECT_EQ((*dec)->config().arch, Arch::kQwen2);
  auto tok = make_tokenizer((*dec)->file());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  auto ids = (*tok)->encode("def f(x): return x", false, false);
  EXPECT_EQ(ids.size(), 18u);  // the synthetic vocabulary: one token per byte
  EXPECT_EQ((*tok)->decode(ids, false), "def f(x): return x");
}

TEST(DummyModel, CopiesAVocabularyFromAGguf) {
  const char* model = "models/smollm2-135m-instruct-q4_1.gguf";
  const auto path = std::filesystem::path(HS_SOURCE_DIR) / model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << model << " is absent (make setup fetches it)";
  auto src = gguf::File::open(path.string());
  ASSERT_TRUE(src.is_ok());
  auto n = (*src)->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(n.is_ok());
  const std::string cfg = write_config(
      "vocab", fmt::format(R"({{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": {}}})", n->size()));
  auto file = make(cfg, DType::F16, 2, path.string());
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto ours = make_tokenizer(**file), theirs = make_tokenizer(**src);
  ASSERT_TRUE(ours.is_ok() && theirs.is_ok());
  EXPECT_EQ((*ours)->encode("Hello, world!", true, false), (*theirs)->encode("Hello, world!", true, false));
  // A vocabulary of another size is refused, naming both.
  const std::string small = write_config("vocab_small", R"({"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 1000})");
  auto bad = make(small, DType::F16, 2, path.string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("vocab_size is 1000"), std::string::npos) << bad.status().message();
}

TEST(DummyModel, BadConfigsAreClearErrors) {
  struct Case {
    const char* json;
    const char* message;
  } cases[] = {
      {"not json", "not a JSON object"},
      {R"({"model_type": "mamba"})", "model_type 'mamba'"},
      {R"({"model_type": "llama", "hidden_size": 128})", "'num_hidden_layers' is missing"},
      {R"({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 1, "num_attention_heads": 3,
          "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 300})", "not a multiple"},
      {R"({"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 1})", "'hidden_size' must be an integer"},
      {R"({"model_type": "llama", "hidden_size": 100, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 64, "vocab_size": 300})", "not whole"},
      {R"({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 64, "vocab_size": 100})", "vocab_size 100"},
  };
  int i = 0;
  for (const Case& c : cases) {
    auto r = make(write_config("bad" + std::to_string(i++), c.json), DType::Q4_0);
    ASSERT_FALSE(r.is_ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
  auto missing = make("/nonexistent/config.json", DType::BF16);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  EXPECT_FALSE(parse_dummy_dtype("q5_k").is_ok());
}

// --- hybrids ---

// Qwen3.5 in its checkpoint layout (model_type qwen3_5, fields under text_config, RoPE in
// rope_parameters), with a field the builder does not know ("_source").
const char* kTinyQwen35 = R"({"_source": "a test config", "model_type": "qwen3_5",
  "architectures": ["Qwen3_5ForConditionalGeneration"], "tie_word_embeddings": false,
  "text_config": {"model_type": "qwen3_5_text", "hidden_size": 128, "intermediate_size": 192,
    "num_hidden_layers": 8, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
    "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
    "vocab_size": 512, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                        "mrope_interleaved": true, "mrope_section": [11, 11, 10]}}})";

// Qwen3-Next, flat, with the per-layer schedule.
const char* kTinyQwen3Next = R"({"_source": "a test config", "model_type": "qwen3_next", "hidden_size": 128,
  "intermediate_size": 192, "num_hidden_layers": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
  "head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
  "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "num_experts": 4, "num_experts_per_tok": 2,
  "moe_intermediate_size": 64, "shared_expert_intermediate_size": 96, "norm_topk_prob": true,
  "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 512, "rms_norm_eps": 1e-6,
  "tie_word_embeddings": false, "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
  "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                  "linear_attention", "linear_attention", "linear_attention", "full_attention"]})";

std::vector<float> floats(const gguf::TensorInfo* t) {
  std::vector<float> v(static_cast<size_t>(t->n_elements()));
  std::memcpy(v.data(), t->data, v.size() * 4);
  return v;
}

// A prefill of 20 tokens then 3 decode steps on one sequence: every logit finite and the
// logits depend on the token; returns the last step's logits.
void run_hybrid(HybridDecoder& dec, std::string_view what) {
  const ModelConfig& c = dec.config();
  ThreadPool pool(2);
  KvCache kv(dec.kv_geometry(), 16);
  RecurrentPool states(kv, 2);
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  std::vector<float> logits, first;
  for (int step = 0; step < 4; ++step) {
    Batch b;
    if (step == 0)
      for (int i = 0; i < 20; ++i) b.add((i * 37) % c.n_vocab, i, 0, i == 19);
    else
      b.add((step * 101) % c.n_vocab, 19 + step, 0, true);
    const Status st = dec.forward(b, seqs, kv, states, pool, logits);
    ASSERT_TRUE(st.is_ok()) << what << ": " << st.to_string();
    ASSERT_EQ(logits.size(), static_cast<size_t>(c.n_vocab)) << what;
    float spread = 0;
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v)) << what << " step " << step;
      spread = std::max(spread, std::fabs(v - logits[0]));
    }
    EXPECT_GT(spread, 1e-3f) << what << " step " << step << ": the logits do not depend on the token";
    if (step == 0) first = logits;
  }
  EXPECT_NE(first, logits) << what << ": decode steps gave the prefill's logits";
  kv.release(seq);
}

std::vector<bool> schedule(int n_layer, int interval) {
  std::vector<bool> v(static_cast<size_t>(n_layer));
  for (int il = 0; il < n_layer; ++il) v[il] = (il + 1) % interval != 0;
  return v;
}

TEST(DummyModel, Qwen35FromTextConfigLoadsAndRuns) {
  const std::string cfg = write_config("qwen35", kTinyQwen35);
  for (DType t : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    auto file = make(cfg, t);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    const gguf::File& f = **file;
    EXPECT_EQ(f.find_tensor("blk.0.attn_qkv.weight")->type, t);
    EXPECT_EQ(f.find_tensor("blk.3.attn_q.weight")->ne[1], 2 * 2 * 64);  // q and gate
    EXPECT_EQ(f.find_tensor("blk.3.attn_qkv.weight"), nullptr);          // a full-attention layer
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight"), nullptr);            // a linear one
    EXPECT_EQ(f.find_tensor("blk.0.ssm_ba.weight"), nullptr);            // qwen35: beta and alpha
    EXPECT_NE(f.find_tensor("blk.0.ssm_beta.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.8.attn_norm.weight"), nullptr);         // no MTP block
    // Gates and norms as the converter would store them.
    for (float a : floats(f.find_tensor("blk.4.ssm_a"))) {
      EXPECT_LE(a, -1.0f);
      EXPECT_GE(a, -16.0f);
    }
    for (float v : floats(f.find_tensor("blk.4.ssm_dt.bias"))) EXPECT_EQ(v, 1.0f);
    for (const char* n : {"blk.4.ssm_norm.weight", "blk.3.attn_q_norm.weight", "blk.5.post_attention_norm.weight",
                          "output_norm.weight"})
      for (float v : floats(f.find_tensor(n))) EXPECT_EQ(v, 1.0f) << n;
    const gguf::TensorInfo* conv = f.find_tensor("blk.0.ssm_conv1d.weight");
    ASSERT_EQ(conv->type, DType::F32);
    ASSERT_EQ(conv->ne[0], 4);
    ASSERT_EQ(conv->ne[1], 2 * 2 * 32 + 4 * 32);
    double sq = 0;
    for (float v : floats(conv)) sq += v * v;
    EXPECT_NEAR(std::sqrt(sq / static_cast<double>(conv->n_elements())), 0.5, 0.05);  // 1/sqrt(kernel)

    auto dec = HybridDecoder::create(std::move(*file));
    ASSERT_TRUE(dec.is_ok()) << dec.status().message();
    const ModelConfig& c = (*dec)->config();
    EXPECT_EQ(c.arch, Arch::kQwen35);
    EXPECT_EQ(c.n_layer, 8);
    EXPECT_EQ(c.layer_is_linear, schedule(8, 4));
    EXPECT_EQ(c.n_attn_layers(), 2);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.rope_dims, 16);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e7f);
    EXPECT_EQ(c.ssm_n_k_heads, 2);
    EXPECT_EQ(c.ssm_n_v_heads, 4);
    EXPECT_EQ(c.ssm_k_dim, 32);
    EXPECT_EQ(c.ssm_v_dim, 32);
    EXPECT_EQ(c.ssm_conv_kernel, 4);
    EXPECT_TRUE(c.ssm_v_tiled);
    EXPECT_FALSE(c.ssm_fused_ba);
    EXPECT_FALSE(c.is_moe());
    EXPECT_FALSE(c.tied_output);  // tie_word_embeddings from the top level
    EXPECT_EQ(c.n_mtp_layers, 0);
    run_hybrid(**dec, dtype_name(t));
  }
}

TEST(DummyModel, Qwen3NextWithLayerTypesLoadsAndRuns) {
  const std::string cfg = write_config("qwen3next", kTinyQwen3Next);
  for (DType t : {DType::BF16, DType::Q8_0}) {
    auto file = make(cfg, t);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    const gguf::File& f = **file;
    const gguf::TensorInfo* router = f.find_tensor("blk.2.ffn_gate_inp.weight");
    ASSERT_NE(router, nullptr);
    EXPECT_EQ(router->type, DType::F32);
    EXPECT_EQ(router->ne[0], 128);
    EXPECT_EQ(router->ne[1], 4);
    EXPECT_EQ(f.find_tensor("blk.2.ffn_gate_inp_shexp.weight")->type, DType::F32);
    const gguf::TensorInfo* down = f.find_tensor("blk.2.ffn_down_exps.weight");
    ASSERT_EQ(down->n_dims, 3);
    EXPECT_EQ(down->type, t);
    EXPECT_EQ(down->ne[0], 64);
    EXPECT_EQ(down->ne[1], 128);
    EXPECT_EQ(down->ne[2], 4);
    EXPECT_NE(f.find_tensor("blk.0.ssm_ba.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.0.ssm_beta.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);  // MoE on every layer

    auto dec = HybridDecoder::create(std::move(*file));
    ASSERT_TRUE(dec.is_ok()) << dec.status().message();
    const ModelConfig& c = (*dec)->config();
    EXPECT_EQ(c.arch, Arch::kQwen3Next);
    EXPECT_EQ(c.layer_is_linear, schedule(8, 4));
    EXPECT_EQ(c.n_expert, 4);
    EXPECT_EQ(c.n_expert_used, 2);
    EXPECT_EQ(c.n_ff_exp, 64);
    EXPECT_EQ(c.n_ff_shexp, 96);
    EXPECT_TRUE(c.expert_norm_topk);
    EXPECT_TRUE(c.ssm_fused_ba);
    EXPECT_FALSE(c.ssm_v_tiled);
    EXPECT_EQ(c.rope_dims, 16);
    run_hybrid(**dec, dtype_name(t));
  }
  // The per-layer list wins over the interval: an irregular schedule reaches the loader as written.
  std::string odd = kTinyQwen3Next;
  const std::string from = R"(["linear_attention", "linear_attention", "linear_attention", "full_attention",)";
  odd.replace(odd.find(from), from.size(), R"(["full_attention", "linear_attention", "full_attention", "linear_attention",)");
  auto file = make(write_config("qwen3next_odd", odd), DType::BF16);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto dec = HybridDecoder::create(std::move(*file));
  ASSERT_TRUE(dec.is_ok()) << dec.status().message();
  EXPECT_EQ((*dec)->config().layer_is_linear,
            (std::vector<bool>{false, true, false, true, true, true, true, false}));
  run_hybrid(**dec, "irregular schedule");
}

// Parameters of a qwen35 / qwen3next text model from its config numbers (no MTP), counted here
// from the Hugging Face module shapes, independently of the builder's tensor list.
struct HybridNumbers {
  int64_t V, H, L, F, nh, nkv, hd, nk, nv, dk, dv, K, interval;
  bool tied;
  int64_t E = 0, Fe = 0, S = 0;  // qwen3next
};
int64_t hybrid_params(const HybridNumbers& n) {
  const int64_t q = n.nh * n.hd, kv = n.nkv * n.hd, kd = n.nk * n.dk, vd = n.nv * n.dv, conv = 2 * kd + vd;
  int64_t p = n.V * n.H * (n.tied ? 1 : 2) + n.H;  // embed_tokens, lm_head, norm
  const int64_t ffn = n.E ? n.H * n.E + 3 * n.E * n.H * n.Fe + 3 * n.H * n.S + n.H : 3 * n.H * n.F;
  const int64_t attn = n.H * 2 * q + 2 * n.H * kv + q * n.H + 2 * n.hd;  // q_proj (q + gate), k, v, o, q/k norm
  const int64_t linear = n.H * conv + n.H * vd + 2 * n.H * n.nv + vd * n.H + conv * n.K + 2 * n.nv + n.dv;
  for (int64_t il = 0; il < n.L; ++il) p += 2 * n.H + ffn + ((il + 1) % n.interval ? linear : attn);
  return p;
}

TEST(DummyModel, CommittedHybridConfigsShapesWithoutWeights) {
  struct Want {
    const char* file;
    const char* arch;
    int n_layer;
    HybridNumbers n;
    double lo, hi;  // plausible total parameters (text model, no MTP)
  } wants[] = {
      {"qwen3.5-0.8b.json", "qwen35", 24, {248320, 1024, 24, 3584, 8, 2, 256, 16, 16, 128, 128, 4, 4, true}, 0.7e9, 0.8e9},
      {"qwen3.5-9b.json", "qwen35", 32, {248320, 4096, 32, 12288, 16, 4, 256, 16, 32, 128, 128, 4, 4, false}, 8.5e9, 9.5e9},
      {"qwen3.5-27b.json", "qwen35", 64, {248320, 5120, 64, 17408, 24, 4, 256, 16, 48, 128, 128, 4, 4, false}, 26e9, 27.5e9},
      {"qwen3-next-80b-a3b.json", "qwen3next", 48,
       {151936, 2048, 48, 5120, 16, 2, 256, 16, 32, 128, 128, 4, 4, false, 512, 512, 512}, 78e9, 81e9},
  };
  for (const Want& w : wants) {
    DummyModelSpec spec;
    spec.config_path = (std::filesystem::path(HS_SOURCE_DIR) / "configs" / w.file).string();
    spec.weight_type = DType::Q4_K;  // every row of these shapes is whole q4_k blocks
    auto info = describe_dummy_model(spec);
    ASSERT_TRUE(info.is_ok()) << w.file << ": " << info.status().message();
    EXPECT_EQ(info->arch, w.arch) << w.file;
    EXPECT_EQ(info->n_layer, w.n_layer) << w.file;
    EXPECT_EQ(info->layer_is_linear, schedule(w.n_layer, 4)) << w.file;
    EXPECT_EQ(info->n_params, hybrid_params(w.n)) << w.file;
    EXPECT_GT(static_cast<double>(info->n_params), w.lo) << w.file;
    EXPECT_LT(static_cast<double>(info->n_params), w.hi) << w.file;
    // q4_k: 4.5 bits per weight; the f32 conv, gates, norms and (qwen3next) routers add a little.
    EXPECT_GT(static_cast<double>(info->weight_bytes), info->n_params * 4.5 / 8) << w.file;
    EXPECT_LT(static_cast<double>(info->weight_bytes), info->n_params * 4.7 / 8) << w.file;
    std::printf("%-24s %s, %d layers (%d full attention), %.3f B parameters, %.2f GB at q4_k, %ld tensors\n", w.file,
                w.arch, w.n_layer, w.n_layer / 4, static_cast<double>(info->n_params) / 1e9,
                static_cast<double>(info->weight_bytes) / 1e9, static_cast<long>(info->n_tensors));
  }
}

TEST(DummyModel, BadHybridConfigsAreClearErrors) {
  const std::string base = R"("hidden_size": 128, "intermediate_size": 192, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "linear_num_key_heads": 2,
    "linear_key_head_dim": 32, "linear_value_head_dim": 32, "vocab_size": 512)";
  struct Case {
    std::string json;
    const char* message;
  } cases[] = {
      {R"({"model_type": "qwen3_5_text", "linear_num_value_heads": 3, )" + base + "}", "not a multiple"},
      {R"({"model_type": "qwen3_5_text", "layer_types": ["full_attention"], )" + base + "}", "layer_types must list"},
      {R"({"model_type": "qwen3_5_text", "layer_types": ["full_attention", "mamba", "full_attention",
          "full_attention"], )" + base + "}", "layer_types[1] = 'mamba'"},
      {R"({"model_type": "qwen3_5_text", "partial_rotary_factor": 0.01, )" + base + "}", "rotated dims"},
      {R"({"model_type": "qwen3_5_text", "full_attention_interval": 8, )" + base + "}", "no full_attention layer"},
      {R"({"model_type": "qwen3_5_text", "attention_bias": true, )" + base + "}", "attention_bias"},
      {R"({"model_type": "qwen3_next", )" + base + "}", "'num_experts' is missing"},
      {R"({"model_type": "qwen3_next", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
          "shared_expert_intermediate_size": 64, "mlp_only_layers": [0], )" + base + "}", "dense layers"},
      {R"({"model_type": "qwen3_next", "num_experts": 4, "num_experts_per_tok": 5, "moe_intermediate_size": 64,
          "shared_expert_intermediate_size": 64, )" + base + "}", "'num_experts_per_tok' = 5"},
      {R"({"model_type": "qwen3_next", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
          "shared_expert_intermediate_size": 64, )" + base + "}", "not whole"},
  };
  int i = 0;
  for (const Case& c : cases) {
    auto r = make(write_config("bad_hybrid" + std::to_string(i++), c.json), DType::Q4_0);
    ASSERT_FALSE(r.is_ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
}

// A real shape on demand (too large for the unit run): HS_DUMMY_CONFIG=configs/qwen3.5-0.8b.json
// [HS_DUMMY_DTYPE=q4_0] builds it, loads it through HybridDecoder and times a 64-token prefill
// and 8 decode steps (finite logits), as `bench -p 64 -n 8` would for a non-hybrid model.
TEST(DummyModel, RealHybridConfigOnDemand) {
  const char* path = std::getenv("HS_DUMMY_CONFIG");
  if (!path) GTEST_SKIP() << "set HS_DUMMY_CONFIG to a hybrid config.json (e.g. configs/qwen3.5-0.8b.json)";
  const char* dtype = std::getenv("HS_DUMMY_DTYPE");
  auto t = parse_dummy_dtype(dtype ? dtype : "q4_0");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  auto file = make(path, *t, threads);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const double gb = static_cast<double>((*file)->file_size()) / 1e9;
  auto dec = HybridDecoder::create(std::move(*file));
  ASSERT_TRUE(dec.is_ok()) << dec.status().message();
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const ModelConfig& c = (*dec)->config();
  ThreadPool pool(threads);
  KvCache kv((*dec)->kv_geometry(), 16);
  RecurrentPool states(kv, 1);
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  std::vector<float> logits;
  auto step = [&](int first, int n) {
    Batch b;
    for (int i = 0; i < n; ++i) b.add(((first + i) * 7919) % c.n_vocab, first + i, 0, i == n - 1);
    const Status st = (*dec)->forward(b, seqs, kv, states, pool, logits);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  };
  auto p0 = Clock::now();
  step(0, 64);
  const double pp_s = std::chrono::duration<double>(Clock::now() - p0).count();
  auto d0 = Clock::now();
  for (int i = 0; i < 8; ++i) step(64 + i, 1);
  const double tg_s = std::chrono::duration<double>(Clock::now() - d0).count();
  kv.release(seq);
  fmt::print("{}\n{} {}, {:.2f} GB, built + loaded in {:.1f} s, {} threads: pp64 {:.1f} tok/s, tg8 {:.2f} tok/s\n",
             describe(c), path, dtype_name(*t), gb, load_s, threads, 64 / pp_s, 8 / tg_s);
}

}  // namespace
}  // namespace hs
