// tests/unit/model/test_tensor_parallel.cpp — tensor parallelism on the CPU (model/tensor_parallel.h,
// backend/communicator.h, the Decoder's ranks): the split plan covers every head, FFN column and
// vocabulary row once (kv heads replicated when ranks outnumber them) and refuses what does not
// divide; column slices equal the dequantized columns (kept quantized on whole blocks); the host
// communicator sums in rank order and gathers side by side; and a model split over 2 / 3 / 4 / 8
// ranks gives the logits and greedy tokens of the same model on one rank — dummy models of every
// weight type and architecture flag (qwen2 biases, gemma3 norms and softcap, replicated kv heads),
// and the golden models (SmolLM2 over 3 ranks, Gemma 3 over 2 and 4, Qwen2.5-Coder over 2); the
// hybrid qwen35 (Gated-DeltaNet layers split by key head, tiled and grouped value heads) over 2 and 4
// ranks, dummy and the transformers-made tiny model, equal to one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <cstdlib>
#include <random>

#include "backend/communicator.h"
#include "core/quant.h"
#include "kv/recurrent_pool.h"
#include "model/decoder.h"
#include "model/dummy_model.h"
#include "model/hybrid_decoder.h"
#include "model/tensor_parallel.h"
#include "sparse/sparse_runtime.h"

namespace hs {
namespace {

std::string write_config(const std::string& name, const std::string& json) {
  const auto path = std::filesystem::temp_directory_path() / ("hs_tp_" + name + ".json");
  std::ofstream(path) << json;
  return path.string();
}

ModelConfig config_of(int n_head, int n_kv, int n_ff, int n_vocab) {
  ModelConfig c;
  c.arch_name = "llama";
  c.n_head = n_head;
  c.n_head_kv = n_kv;
  c.head_dim = 16;
  c.n_embd = n_head * 16;
  c.n_ff = n_ff;
  c.n_vocab = n_vocab;
  return c;
}

TEST(TensorParallelPlan, CoversEveryHeadColumnAndRowOnce) {
  struct Case { int heads, kv, ff, vocab, size, align; };
  for (const Case& k : {Case{8, 4, 512, 1000, 2, 256}, Case{8, 4, 512, 1000, 4, 256}, Case{8, 4, 512, 1000, 8, 1},
                        Case{14, 2, 4864, 151936, 2, 256}, Case{9, 3, 1536, 49152, 3, 32}, Case{4, 1, 2048, 262144, 4, 1}}) {
    const ModelConfig c = config_of(k.heads, k.kv, k.ff, k.vocab);
    auto plan = plan_tensor_parallel(c, k.size, k.align);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    ASSERT_EQ(static_cast<int>(plan->size()), k.size);
    int q = 0;
    int64_t ff = 0, vocab = 0;
    for (const TpSlice& s : *plan) {
      EXPECT_EQ(s.q_head0, q);
      q += s.n_q_heads;
      EXPECT_EQ(s.ff0, ff);
      ff += s.n_ff;
      EXPECT_GT(s.n_ff, 0);
      EXPECT_EQ(s.vocab0, vocab);
      vocab += s.n_vocab;
      // Every query head of the rank reads one of the rank's kv heads.
      const int group = k.heads / k.kv;
      for (int h = s.q_head0; h < s.q_head0 + s.n_q_heads; ++h) {
        EXPECT_GE(h / group, s.kv_head0);
        EXPECT_LT(h / group, s.kv_head0 + s.n_kv_heads);
      }
      EXPECT_EQ(s.n_kv_heads, std::max(1, k.kv / k.size));
    }
    EXPECT_EQ(q, k.heads);
    EXPECT_EQ(ff, k.ff);
    EXPECT_EQ(vocab, k.vocab);
  }
  // FFN shares stay on the down projection's blocks when they can.
  auto aligned = plan_tensor_parallel(config_of(8, 4, 4864, 100), 2, 256);
  ASSERT_TRUE(aligned.is_ok());
  EXPECT_EQ((*aligned)[1].ff0 % 256, 0);
}

TEST(TensorParallelPlan, RefusesWhatDoesNotDivide) {
  EXPECT_FALSE(plan_tensor_parallel(config_of(9, 3, 512, 100), 2).is_ok());   // 9 heads
  EXPECT_FALSE(plan_tensor_parallel(config_of(12, 3, 512, 100), 4).is_ok());  // 3 kv heads vs 4 ranks
  EXPECT_FALSE(plan_tensor_parallel(config_of(8, 4, 512, 100), 0).is_ok());
  ModelConfig hybrid = config_of(8, 4, 512, 100);
  hybrid.layer_is_linear = {true, false};
  hybrid.ssm_n_k_heads = 6;
  hybrid.ssm_n_v_heads = 12;
  EXPECT_TRUE(plan_tensor_parallel(hybrid, 2).is_ok());
  auto st = plan_tensor_parallel(hybrid, 4);  // 6 key heads over 4 ranks
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("key heads"), std::string::npos);
  // A mixture-of-experts FFN splits every expert's columns, routed and shared.
  ModelConfig moe = hybrid;
  moe.n_expert = 8;
  moe.n_expert_used = 2;
  moe.n_ff_exp = 96;
  moe.n_ff_shexp = 64;
  auto mp = plan_tensor_parallel(moe, 2, 32);
  ASSERT_TRUE(mp.is_ok()) << mp.status().message();
  EXPECT_EQ((*mp)[0].n_ffe + (*mp)[1].n_ffe, 96);
  EXPECT_EQ((*mp)[1].ffe0, (*mp)[0].n_ffe);
  EXPECT_EQ((*mp)[0].n_shexp, 32);
  EXPECT_EQ((*mp)[1].shexp0, 32);
  moe.n_ff_shexp = 1;
  EXPECT_FALSE(plan_tensor_parallel(moe, 2).is_ok());  // a shared expert narrower than the split
}

// A hybrid's key heads are split in consecutive runs; each rank's value heads are the ones that
// read its key heads, every value head on exactly one rank, in an order where local value head j
// still reads local key head j % n_k (tiled) or j / (n_v / n_k) (grouped).
TEST(TensorParallelPlan, HybridValueHeadsFollowTheirKeyHeads) {
  for (const bool tiled : {true, false}) {
    ModelConfig c = config_of(8, 4, 512, 100);
    c.layer_is_linear = {true, true, true, false};
    c.ssm_n_k_heads = 4;
    c.ssm_n_v_heads = 12;
    c.ssm_k_dim = c.ssm_v_dim = 16;
    c.ssm_v_tiled = tiled;
    const int per = c.ssm_n_v_heads / c.ssm_n_k_heads;
    const auto key_of = [&](int j, int nk) { return tiled ? j % nk : j / per; };
    for (int size : {1, 2, 4}) {
      auto plan = plan_tensor_parallel(c, size);
      ASSERT_TRUE(plan.is_ok()) << plan.status().message();
      std::vector<int> owner(c.ssm_n_v_heads, -1);
      int k = 0;
      for (const TpSlice& s : *plan) {
        EXPECT_EQ(s.ssm_k_head0, k);
        k += s.n_ssm_k_heads;
        const std::vector<int> vh = ssm_v_heads(c, s);
        const ModelConfig rc = rank_config(c, s);
        ASSERT_EQ(static_cast<int>(vh.size()), rc.ssm_n_v_heads);
        EXPECT_EQ(rc.ssm_n_k_heads, s.n_ssm_k_heads);
        for (int j = 0; j < static_cast<int>(vh.size()); ++j) {
          ASSERT_GE(vh[j], 0);
          ASSERT_LT(vh[j], c.ssm_n_v_heads);
          EXPECT_EQ(owner[vh[j]], -1) << "value head " << vh[j] << " on two ranks";
          owner[vh[j]] = s.rank;
          // The local pairing is the global one.
          EXPECT_EQ(s.ssm_k_head0 + key_of(j, s.n_ssm_k_heads), key_of(vh[j], c.ssm_n_k_heads))
              << (tiled ? "tiled" : "grouped") << " size " << size << " local " << j;
        }
      }
      EXPECT_EQ(k, c.ssm_n_k_heads);
      for (int j = 0; j < c.ssm_n_v_heads; ++j) EXPECT_GE(owner[j], 0) << "value head " << j << " on no rank";
    }
  }
}

// Random bytes with sane fp16 scales are valid blocks of every type; the reference is the
// dequantized row.
std::vector<uint8_t> random_matrix(DType t, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  const int64_t row = tensor_row_bytes(t, n_in);
  std::vector<uint8_t> m(static_cast<size_t>(row * n_out));
  for (auto& b : m) b = static_cast<uint8_t>(rng());
  if (t == DType::F32) {
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < n_out * n_in; ++i) reinterpret_cast<float*>(m.data())[i] = nd(rng);
  } else {
    // Any fp16 bit pattern may be a NaN scale: clamp every 16-bit word's exponent below the top.
    for (size_t i = 1; i < m.size(); i += 2) m[i] &= 0x3b;
  }
  return m;
}

TEST(TensorParallelShards, ColumnSlicesEqualTheDequantizedColumns) {
  std::mt19937 rng(7);
  for (DType t : {DType::F32, DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t n_out = 5, n_in = 1024;
    const std::vector<uint8_t> m = random_matrix(t, n_out, n_in, rng);
    const WeightView w{t, n_in, n_out, m.data()};
    std::vector<float> full(static_cast<size_t>(n_out * n_in));
    const int64_t row = tensor_row_bytes(t, n_in);
    for (int64_t r = 0; r < n_out; ++r)
      ASSERT_TRUE(dequantize_row(t, m.data() + r * row, row, full.data() + r * n_in, n_in).is_ok());
    ShardStore store;
    for (auto [c0, n] : {std::pair<int64_t, int64_t>{0, 1024}, {256, 512}, {512, 512}, {64, 448}, {448, 576}}) {
      auto s = store.cols(w, c0, n);
      ASSERT_TRUE(s.is_ok()) << s.status().message();
      EXPECT_EQ(s->n_in, n);
      EXPECT_EQ(s->n_out, n_out);
      const int64_t blk = dtype_info(t)->block_elems;
      EXPECT_EQ(s->type, c0 % blk == 0 && n % blk == 0 ? t : DType::F32) << dtype_name(t) << " " << c0 << "+" << n;
      const int64_t srow = tensor_row_bytes(s->type, n);
      std::vector<float> got(static_cast<size_t>(n));
      for (int64_t r = 0; r < n_out; ++r) {
        ASSERT_TRUE(dequantize_row(s->type, static_cast<const uint8_t*>(s->data) + r * srow, srow, got.data(), n).is_ok());
        for (int64_t c = 0; c < n; ++c) ASSERT_EQ(got[c], full[r * n_in + c0 + c]) << dtype_name(t) << " row " << r;
      }
    }
    const WeightView rows = ShardStore::rows(w, 2, 3);
    EXPECT_EQ(rows.data, m.data() + 2 * row);
    EXPECT_EQ(rows.n_out, 3);
  }
  ShardStore store;
  EXPECT_FALSE(store.cols(WeightView{DType::F32, 64, 2, nullptr}, 32, 64).is_ok());
}

TEST(TensorParallelComm, HostAllReduceSumsInRankOrderAndGathersSideBySide) {
  constexpr int kRanks = 3, kRows = 4, kCols = 5;
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(kRows * kCols));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto& d : data)
    for (float& v : d) v = nd(rng);
  std::vector<float> want(kRows * kCols, 0.0f);
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; i < kRows * kCols; ++i) want[i] += data[r][i];
  std::vector<Tensor> parts;
  for (auto& d : data) parts.push_back(Tensor::matrix(d.data(), DType::F32, kRows, kCols));
  HostCommunicator comm(kRanks);
  ASSERT_TRUE(comm.all_reduce_sum(parts).is_ok());
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; i < kRows * kCols; ++i) ASSERT_EQ(data[r][i], want[i]) << "rank " << r;

  std::vector<float> out(kRows * kCols * kRanks);
  ASSERT_TRUE(comm.gather_columns(parts, Tensor::matrix(out.data(), DType::F32, kRows, kCols * kRanks)).is_ok());
  for (int row = 0; row < kRows; ++row)
    for (int r = 0; r < kRanks; ++r)
      for (int c = 0; c < kCols; ++c) ASSERT_EQ(out[row * kCols * kRanks + r * kCols + c], data[r][row * kCols + c]);
  // Mismatched shapes and rank counts are errors.
  EXPECT_FALSE(comm.all_reduce_sum(std::span<const Tensor>(parts.data(), 2)).is_ok());
  std::vector<float> other(kRows * 2);
  parts[1] = Tensor::matrix(other.data(), DType::F32, kRows, 2);
  EXPECT_FALSE(comm.all_reduce_sum(parts).is_ok());
}

// Two sequences prefilled in one batch (in chunks), then `steps` greedy decode steps of both;
// every logit row of every step. A hybrid model gets a recurrent-state pool over the cache.
// `attach` (optional) is called with the model and its engine cache before the first step.
template <class M>
std::vector<std::vector<float>> run_model(M& dec, const std::vector<std::vector<int32_t>>& prompts, int chunk,
                                          int steps,
                                          const std::type_identity_t<std::function<void(M&, KvCache&)>>& attach = {}) {
  const ModelConfig& c = dec.config();
  ThreadPool pool(2);
  const int64_t n_blocks = 256;
  KvCache kv(dec.kv_geometry(16, KvDtype::kF16), n_blocks, KvCache::kDefaultMaxLeases,
             /*host_pages=*/dec.device() == Device::kCpu && dec.tensor_parallel_size() == 1);
  std::unique_ptr<RecurrentPool> states;
  if constexpr (std::is_same_v<M, HybridDecoder>) {
    states = std::make_unique<RecurrentPool>(kv, static_cast<int32_t>(prompts.size()), 0);
    EXPECT_TRUE(dec.set_states(states.get()).is_ok());
  }
  if (attach) attach(dec, kv);
  std::vector<SeqKv> s(prompts.size());
  std::vector<SeqKv*> seqs;
  for (auto& q : s) seqs.push_back(&q);
  std::vector<std::vector<float>> rows;
  std::vector<float> logits;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  for (size_t start = 0; start < longest; start += chunk) {
    Batch b;
    for (size_t q = 0; q < prompts.size(); ++q)
      for (size_t i = start; i < std::min(prompts[q].size(), start + chunk); ++i)
        b.add(prompts[q][i], static_cast<int32_t>(i), static_cast<int>(q), true);
    auto r = dec.forward(b, seqs, kv, pool);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (!r.is_ok()) return rows;
    logits.assign(r->begin(), r->end());
    for (int r = 0; r < b.size(); ++r) rows.emplace_back(logits.begin() + r * c.n_vocab, logits.begin() + (r + 1) * c.n_vocab);
  }
  for (int step = 0; step < steps; ++step) {
    Batch b;
    for (size_t q = 0; q < prompts.size(); ++q) {
      const std::vector<float>& last = rows[rows.size() - prompts.size() + q];
      const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      b.add(next, s[q].n_tokens, static_cast<int>(q), true);
    }
    auto r = dec.forward(b, seqs, kv, pool);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (!r.is_ok()) return rows;
    logits.assign(r->begin(), r->end());
    for (int r = 0; r < b.size(); ++r) rows.emplace_back(logits.begin() + r * c.n_vocab, logits.begin() + (r + 1) * c.n_vocab);
  }
  for (auto& q : s) kv.release(q);
  EXPECT_EQ(kv.pool().n_used(), 0);
  if constexpr (std::is_same_v<M, HybridDecoder>) {
    EXPECT_TRUE(dec.set_states(nullptr).is_ok());
  }
  return rows;
}

// Max |a - b| over every row, relative to the largest |logit| of the one-rank run; and whether
// every row's argmax agrees where the one-rank run's top-2 margin exceeds `margin`.
struct Agreement {
  float max_rel = 0;
  int top1_checked = 0, top1_equal = 0;
};
Agreement compare(const std::vector<std::vector<float>>& one, const std::vector<std::vector<float>>& split,
                  float margin) {
  Agreement a;
  EXPECT_EQ(one.size(), split.size());
  for (size_t r = 0; r < std::min(one.size(), split.size()); ++r) {
    float scale = 1e-6f, diff = 0;
    for (size_t v = 0; v < one[r].size(); ++v) {
      scale = std::max(scale, std::fabs(one[r][v]));
      diff = std::max(diff, std::fabs(one[r][v] - split[r][v]));
    }
    a.max_rel = std::max(a.max_rel, diff / scale);
    std::vector<float> top(one[r]);
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    if (top[0] - top[1] > margin) {
      ++a.top1_checked;
      const auto best = [](const std::vector<float>& x) { return std::max_element(x.begin(), x.end()) - x.begin(); };
      if (best(one[r]) == best(split[r])) ++a.top1_equal;
    }
  }
  return a;
}

struct DummyCase {
  const char* name;
  const char* json;
};

// Hidden sizes, q_dim and n_ff of 256 multiples: every weight type, Q4_K included, can be made.
// llama (8 heads over 4 kv heads), qwen2 (q/k/v biases: zero in a dummy model, so the slice is
// checked for shape only), gemma3 (QK norm, post norms, GELU, embedding scale, tied output).
const DummyCase kDummies[] = {
    {"llama", R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
      "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 600, "rms_norm_eps": 1e-5,
      "rope_theta": 500000.0, "max_position_embeddings": 4096, "tie_word_embeddings": false})"},
    {"qwen2", R"({"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
      "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 601, "rms_norm_eps": 1e-6,
      "rope_theta": 1000000.0, "max_position_embeddings": 4096, "tie_word_embeddings": true})"},
    {"gemma3", R"({"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 3,
      "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 603, "rms_norm_eps": 1e-6,
      "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 32, "query_pre_attn_scalar": 32,
      "max_position_embeddings": 4096, "final_logit_softcapping": 30.0, "sliding_window_pattern": 2})"},
};

TEST(TensorParallelDecoder, SplitDummyModelsEqualOneRank) {
  std::mt19937 rng(11);
  for (const DummyCase& dc : kDummies) {
    const std::string cfg = write_config(dc.name, dc.json);
    for (DType t : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
      auto make = [&](int tp) -> std::unique_ptr<Decoder> {
        ThreadPool pool(2);
        DummyModelSpec spec{cfg, t, "", 5};
        auto file = make_dummy_model(spec, pool);
        EXPECT_TRUE(file.is_ok()) << file.status().message();
        if (!file.is_ok()) return nullptr;
        auto dec = Decoder::create(std::move(*file), Device::kCpu, tp);
        EXPECT_TRUE(dec.is_ok()) << dc.name << " tp " << tp << ": " << dec.status().message();
        if (!dec.is_ok()) return nullptr;
        (*dec)->set_matmul_precision(MatmulPrecision::kExact);
        return std::move(*dec);
      };
      auto one = make(1);
      ASSERT_TRUE(one);
      const ModelConfig& c = one->config();
      std::vector<std::vector<int32_t>> prompts(2);
      for (auto& p : prompts)
        for (int i = 0; i < 70 + static_cast<int>(&p - &prompts[0]) * 13; ++i) p.push_back(static_cast<int32_t>(rng() % c.n_vocab));
      const auto ref = run_model(*one, prompts, 32, 6);
      for (int tp : {2, 4, 8}) {
        if (c.n_head % tp != 0) continue;
        auto split = make(tp);
        ASSERT_TRUE(split);
        EXPECT_EQ(split->tensor_parallel_size(), tp);
        const auto got = run_model(*split, prompts, 32, 6);
        const Agreement a = compare(ref, got, 1e-3f);
        std::printf("[tp] %s %s tp=%d: %zu rows, max |diff| / max |logit| %.2e, top-1 %d/%d\n", dc.name,
                    std::string(dtype_name(t)).c_str(), tp, got.size(), a.max_rel, a.top1_equal, a.top1_checked);
        // The same f32 math but for the order of the cross-rank sums (and f32 column slices where a
        // cut falls inside a quantized block): relative differences of float rounding only.
        EXPECT_LT(a.max_rel, 1e-4f) << dc.name << " " << dtype_name(t) << " tp " << tp;
        EXPECT_EQ(a.top1_equal, a.top1_checked) << dc.name << " " << dtype_name(t) << " tp " << tp;
      }
    }
  }
}

// Sparse attention on a split model: each rank selects for its own kv heads with its head slice of
// the basis, over its own pages; with every kv head's whole query group on one rank that is the
// one-rank selection, so the logits and the selected-key counts are the one-rank model's.
// make(tp): the model over tp ranks (the same weights each time); KV layers: the geometry's;
// bound: the logits' largest difference, relative (the dense ones' 1e-4, the hybrids' 5e-4).
template <class M>
void check_split_sparse(const std::function<std::unique_ptr<M>(int)>& make, const std::vector<int>& splits,
                        const char* what, float bound) {
  SparseConfig sc;
  sc.budget_tokens = 32;
  sc.chunk_tokens = 16;
  sc.sink_tokens = 16;
  sc.window_tokens = 16;
  sc.min_context = 64;
  for (const bool rerank : {false, true}) {
    sc.rerank_factor = rerank ? 2 : 0;
    std::vector<std::vector<float>> ref;
    SparseStats ref_stats{};
    for (int tp : splits) {
      std::unique_ptr<M> dec = make(tp);
      ASSERT_TRUE(dec);
      const ModelConfig& c = dec->config();
      std::unique_ptr<SparseRuntime> rt;
      auto attach = [&](M& d, KvCache& kv) {
        const KvGeometry kg = d.kv_geometry(16, KvDtype::kF16);
        SparseRuntime::Geometry g{kg.n_layer, kg.n_kv_heads, kg.head_dim, 16, kv.pool().n_blocks(),
                                  kv_token_bytes(KvDtype::kF16, kg.head_dim), d.sparse_kv_layers()};
        auto basis = std::make_unique<SketchBasis>(random_sketch_basis(kg.n_layer, kg.n_kv_heads, kg.head_dim, 8, 77));
        auto made = SparseRuntime::create(SparseMode::kSketch, sc, g, std::move(basis),
                                          d.backend().host_sparse_kernels(), &kv, c.attn_scale);
        ASSERT_TRUE(made.is_ok()) << made.status().message();
        rt = std::move(*made);
        d.set_sparse(rt.get());
      };
      std::vector<std::vector<int32_t>> prompts(2);
      std::mt19937 rng(21);
      for (auto& p : prompts)
        for (int i = 0; i < 150; ++i) p.push_back(static_cast<int32_t>(rng() % c.n_vocab));
      const auto got = run_model(*dec, prompts, 64, 12, attach);
      const SparseStats st = rt->stats();
      std::printf("[tp] %s sparse%s tp=%d: %lld sparse head-steps, %lld of %lld keys selected\n", what,
                  rerank ? "+rerank2" : "", tp, static_cast<long long>(st.sparse_heads),
                  static_cast<long long>(st.keys_selected), static_cast<long long>(st.keys_total));
      EXPECT_GT(st.sparse_heads, 0);
      EXPECT_LT(st.keys_selected, st.keys_total);  // a real selection, not the whole context
      dec->set_sparse(nullptr);
      if (tp == splits.front()) {
        ref = got;
        ref_stats = st;
        continue;
      }
      const Agreement a = compare(ref, got, 1e-3f);
      std::printf("[tp] %s sparse%s tp=%d: max |diff| / max |logit| %.2e, top-1 %d/%d\n", what,
                  rerank ? "+rerank2" : "", tp, a.max_rel, a.top1_equal, a.top1_checked);
      EXPECT_LT(a.max_rel, bound) << what << " tp " << tp;
      EXPECT_EQ(a.top1_equal, a.top1_checked) << what << " tp " << tp;
      EXPECT_EQ(st.sparse_heads, ref_stats.sparse_heads) << what << " tp " << tp;
      EXPECT_EQ(st.keys_selected, ref_stats.keys_selected) << what << " tp " << tp;
      EXPECT_EQ(st.score_bytes, ref_stats.score_bytes) << what << " tp " << tp;
    }
  }
}

TEST(TensorParallelDecoder, SplitSparseEqualsOneRankSparse) {
  const std::string cfg = write_config("llama", kDummies[0].json);  // 8 heads over 4 kv heads
  check_split_sparse<Decoder>(
      [&](int tp) -> std::unique_ptr<Decoder> {
        ThreadPool pool(2);
        auto file = make_dummy_model(DummyModelSpec{cfg, DType::Q8_0, "", 3}, pool);
        EXPECT_TRUE(file.is_ok());
        if (!file.is_ok()) return nullptr;
        auto dec = Decoder::create(std::move(*file), Device::kCpu, tp);
        EXPECT_TRUE(dec.is_ok()) << dec.status().message();
        if (!dec.is_ok()) return nullptr;
        (*dec)->set_matmul_precision(MatmulPrecision::kExact);
        return std::move(*dec);
      },
      {1, 2, 4}, "llama", 1e-4f);
}

TEST(TensorParallelDecoder, RefusesObserverAndReplicatedSparse) {
  const std::string cfg = write_config("llama", kDummies[0].json);
  ThreadPool pool(2);
  auto file = make_dummy_model(DummyModelSpec{cfg, DType::F32, "", 1}, pool);
  ASSERT_TRUE(file.is_ok());
  auto dec = Decoder::create(std::move(*file), Device::kCpu, 2);
  ASSERT_TRUE(dec.is_ok()) << dec.status().message();
  (*dec)->set_key_observer([](int, const float*, const float*, const float*, const float*, int64_t) {});
  KvCache kv((*dec)->kv_geometry(), 16, 4, false);
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  Batch b;
  b.add(1, 0, 0, true);
  std::vector<float> logits;
  const Status st = (*dec)->forward(b, seqs, kv, pool, logits);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("tensor-parallel"), std::string::npos) << st.message();
  kv.release(seq);
  // Sparse attention where ranks outnumber the kv heads (a replicated head would select with part
  // of its query group) is refused with the split that works.
  (*dec)->set_key_observer(nullptr);
  auto file8 = make_dummy_model(DummyModelSpec{cfg, DType::F32, "", 1}, pool);
  ASSERT_TRUE(file8.is_ok());
  auto dec8 = Decoder::create(std::move(*file8), Device::kCpu, 8);
  ASSERT_TRUE(dec8.is_ok()) << dec8.status().message();
  const ModelConfig& c = (*dec8)->config();
  SparseRuntime::Geometry g{c.n_layer, c.n_head_kv, c.head_dim, 16, kv.pool().n_blocks(),
                            kv_token_bytes(KvDtype::kF16, c.head_dim), (*dec8)->sparse_kv_layers()};
  auto rt = SparseRuntime::create(SparseMode::kSketch, SparseConfig{}, g,
                                  std::make_unique<SketchBasis>(random_sketch_basis(c.n_layer, c.n_head_kv, c.head_dim, 8, 1)),
                                  (*dec8)->backend().host_sparse_kernels(), &kv, c.attn_scale);
  ASSERT_TRUE(rt.is_ok()) << rt.status().message();
  (*dec8)->set_sparse(rt->get());
  const Status st8 = (*dec8)->forward(b, seqs, kv, pool, logits);
  ASSERT_FALSE(st8.is_ok());
  EXPECT_NE(st8.message().find("at most 4 ranks"), std::string::npos) << st8.message();
  (*dec8)->set_sparse(nullptr);
  // A split that does not divide is a clear error at load.
  auto file3 = make_dummy_model(DummyModelSpec{cfg, DType::F32, "", 1}, pool);
  ASSERT_TRUE(file3.is_ok());
  auto bad = Decoder::create(std::move(*file3), Device::kCpu, 3);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("does not divide"), std::string::npos) << bad.status().message();
}

// A qwen35 shape small enough for every weight type: Gated-DeltaNet layers of 4 key heads and 8
// value heads of 32 (tiled, as qwen35 files order them: a rank of 2 key heads owns value heads
// {k, k + 1, k + 4, k + 5}, so its rows and out-projection columns are gathered from two runs), and
// gated full attention of 4 heads over 2 kv heads of 64 (replicated at 4 ranks), every second layer.
constexpr const char* kHybridDummy = R"({"model_type": "qwen3_5_text", "hidden_size": 256,
  "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 64, "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 32,
  "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "full_attention_interval": 2, "vocab_size": 600,
  "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": false,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}})";

// A dummy hybrid model of config file `cfg` in weight type t over tp CPU ranks, exact activations.
std::unique_ptr<HybridDecoder> make_hybrid(const std::string& cfg, DType t, uint64_t seed, int tp) {
  ThreadPool pool(2);
  auto file = make_dummy_model(DummyModelSpec{cfg, t, "", seed}, pool);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  if (!file.is_ok()) return nullptr;
  auto dec = HybridDecoder::create(std::move(*file), Device::kCpu, tp);
  EXPECT_TRUE(dec.is_ok()) << "tp " << tp << ": " << dec.status().message();
  if (!dec.is_ok()) return nullptr;
  (*dec)->set_matmul_precision(MatmulPrecision::kExact);
  return std::move(*dec);
}

// Each rank's recurrent state and weights are its key heads' share, so the split model's logits are
// the one-rank model's up to the order of the cross-rank sums.
TEST(TensorParallelDecoder, SplitHybridEqualsOneRank) {
  const std::string cfg = write_config("qwen35", kHybridDummy);
  std::mt19937 rng(17);
  for (DType t : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    auto make = [&](int tp) { return make_hybrid(cfg, t, 9, tp); };
    auto one = make(1);
    ASSERT_TRUE(one);
    const ModelConfig& c = one->config();
    ASSERT_TRUE(c.is_hybrid());
    std::vector<std::vector<int32_t>> prompts(2);
    for (auto& p : prompts)
      for (int i = 0; i < 90 + static_cast<int>(&p - &prompts[0]) * 17; ++i)
        p.push_back(static_cast<int32_t>(rng() % c.n_vocab));
    // Chunks of 40: prefill steps that do not align with the delta rule's 64-token chunk.
    const auto ref = run_model(*one, prompts, 40, 6);
    for (int tp : {2, 4}) {
      auto split = make(tp);
      ASSERT_TRUE(split);
      EXPECT_EQ(split->tensor_parallel_size(), tp);
      EXPECT_EQ(split->rank_slice(tp - 1).n_ssm_k_heads, 4 / tp);
      const auto got = run_model(*split, prompts, 40, 6);
      const Agreement a = compare(ref, got, 1e-3f);
      std::printf("[tp] qwen35 %s tp=%d: %zu rows, max |diff| / max |logit| %.2e, top-1 %d/%d\n",
                  std::string(dtype_name(t)).c_str(), tp, got.size(), a.max_rel, a.top1_equal, a.top1_checked);
      // Float rounding only, as for the dense models, but carried from token to token by the
      // recurrent state: up to 1.2e-4 seen (Q4_0, tp 2). The test's mutation (value heads taken
      // grouped from a tiled file) gives 1.8-2.2 and most top-1 wrong.
      EXPECT_LT(a.max_rel, 5e-4f) << dtype_name(t) << " tp " << tp;
      EXPECT_EQ(a.top1_equal, a.top1_checked) << dtype_name(t) << " tp " << tp;
    }
  }
  // A split that does not divide the key heads is a clear error at load.
  ThreadPool pool(2);
  auto file = make_dummy_model(DummyModelSpec{cfg, DType::F32, "", 1}, pool);
  ASSERT_TRUE(file.is_ok());
  auto bad = HybridDecoder::create(std::move(*file), Device::kCpu, 8);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("does not divide"), std::string::npos) << bad.status().message();
}

// qwen3next: the same linear layers with value heads grouped per key head and the fused ba
// projection, and a mixture-of-experts FFN (4 experts, top 2, and the sigmoid-gated shared expert),
// each expert's columns split over the ranks.
constexpr const char* kMoeDummy = R"({"model_type": "qwen3_next", "hidden_size": 256, "intermediate_size": 512,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
  "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
  "linear_conv_kernel_dim": 4, "full_attention_interval": 2, "num_experts": 4, "num_experts_per_tok": 2,
  "moe_intermediate_size": 256, "shared_expert_intermediate_size": 256, "norm_topk_prob": true,
  "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 600, "rms_norm_eps": 1e-6,
  "max_position_embeddings": 4096, "tie_word_embeddings": false,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}})";

TEST(TensorParallelDecoder, SplitMoeHybridEqualsOneRank) {
  const std::string cfg = write_config("qwen3next", kMoeDummy);
  std::mt19937 rng(23);
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_K}) {
    auto make = [&](int tp) { return make_hybrid(cfg, t, 13, tp); };
    auto one = make(1);
    ASSERT_TRUE(one);
    ASSERT_TRUE(one->config().is_moe());
    const int n_vocab = one->config().n_vocab;
    std::vector<std::vector<int32_t>> prompts(2);
    for (auto& p : prompts)
      for (int i = 0; i < 80 + static_cast<int>(&p - &prompts[0]) * 21; ++i) p.push_back(static_cast<int32_t>(rng() % n_vocab));
    const auto ref = run_model(*one, prompts, 40, 6);
    for (int tp : {2, 4}) {
      auto split = make(tp);
      ASSERT_TRUE(split);
      EXPECT_EQ(split->rank_slice(1).n_ffe, 256 / tp);
      const auto got = run_model(*split, prompts, 40, 6);
      const Agreement a = compare(ref, got, 1e-3f);
      std::printf("[tp] qwen3next %s tp=%d: %zu rows, max |diff| / max |logit| %.2e, top-1 %d/%d\n",
                  std::string(dtype_name(t)).c_str(), tp, got.size(), a.max_rel, a.top1_equal, a.top1_checked);
      EXPECT_LT(a.max_rel, 5e-4f) << dtype_name(t) << " tp " << tp;  // as SplitHybridEqualsOneRank's
      EXPECT_EQ(a.top1_equal, a.top1_checked) << dtype_name(t) << " tp " << tp;
    }
  }
}

// The same on the hybrid's full-attention layers (the KV layers; 2 kv heads: one a rank at TP 2).
TEST(TensorParallelDecoder, SplitHybridSparseEqualsOneRankSparse) {
  const std::string cfg = write_config("qwen35", kHybridDummy);
  check_split_sparse<HybridDecoder>([&](int tp) { return make_hybrid(cfg, DType::Q8_0, 3, tp); }, {1, 2}, "qwen35",
                                    5e-4f);
}

// The tiny qwen35 and qwen3next that tools/reference made with transformers (tests/fixtures/hybrid),
// bf16, over their 2 key heads and 2 attention heads (1 kv head, replicated), against one rank.
class TensorParallelTinyHybrid : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallelTinyHybrid, SplitEqualsOneRank) {
  const std::string name = GetParam();
  const std::string path = std::string(HS_FIXTURES_DIR) + "/hybrid/" + name + "-tiny/" + name + "-tiny-bf16.gguf";
  auto one = HybridDecoder::load(path, Device::kCpu, 1);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  auto split = HybridDecoder::load(path, Device::kCpu, 2);
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  (*one)->set_matmul_precision(MatmulPrecision::kExact);
  (*split)->set_matmul_precision(MatmulPrecision::kExact);
  std::mt19937 rng(5);
  const int n_vocab = (*one)->config().n_vocab;
  std::vector<std::vector<int32_t>> prompts(2);
  for (int i = 0; i < 130; ++i) prompts[0].push_back(static_cast<int32_t>(rng() % n_vocab));
  for (int i = 0; i < 75; ++i) prompts[1].push_back(static_cast<int32_t>(rng() % n_vocab));
  const auto ref = run_model(**one, prompts, 48, 8);
  const auto got = run_model(**split, prompts, 48, 8);
  const Agreement a = compare(ref, got, 1e-3f);
  std::printf("[tp] %s-tiny tp=2: %zu rows, max |diff| / max |logit| %.2e, top-1 %d/%d\n", name.c_str(), got.size(),
              a.max_rel, a.top1_equal, a.top1_checked);
  EXPECT_LT(a.max_rel, 5e-4f);  // as SplitHybridEqualsOneRank's bound
  EXPECT_EQ(a.top1_equal, a.top1_checked);
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelTinyHybrid, ::testing::Values("qwen35", "qwen3next"));

// The golden models (scripts/setup fetches them): split over the ranks their heads allow, against
// the same file on one rank of the same device. CPU: the default int8x2 activations; CUDA (on a
// machine with enough GPUs, else skipped): NCCL between the GPUs, 16-bit weights.
class TensorParallelGolden : public ::testing::TestWithParam<Device> {};

TEST_P(TensorParallelGolden, SplitEqualsOneRank) {
  const Device device = GetParam();
  struct Case { const char* file; int tp; };
  const std::string dir = std::string(HS_SOURCE_DIR) + "/models/";
  const char* models_dir = std::getenv("HS_MODELS_DIR");  // the GPU machine stages models there
  int ran = 0;
  for (const Case& k : {Case{"smollm2-135m-instruct-q4_1.gguf", 3}, Case{"gemma-3-270m-q4_k_m.gguf", 2},
                        Case{"gemma-3-270m-q4_k_m.gguf", 4}, Case{"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 2}}) {
    const std::string path = (models_dir && *models_dir ? std::string(models_dir) + "/" : dir) + k.file;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (run scripts/setup)";
    if (device != Device::kCpu && !make_backend(device, k.tp - 1).is_ok()) {
      std::printf("[tp] %s tp=%d: skipped, fewer than %d %s devices\n", k.file, k.tp, k.tp, device_name(device));
      continue;
    }
    auto one = Decoder::load(path, device, 1);
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    auto split = Decoder::load(path, device, k.tp);
    ASSERT_TRUE(split.is_ok()) << split.status().message();
    std::mt19937 rng(static_cast<unsigned>(k.tp) * 101u);
    const int n_vocab = (*one)->config().n_vocab;
    std::vector<std::vector<int32_t>> prompts(2);
    for (int i = 0; i < 150; ++i) prompts[0].push_back(static_cast<int32_t>(rng() % 20000));
    for (int i = 0; i < 97; ++i) prompts[1].push_back(static_cast<int32_t>(rng() % std::min(n_vocab, 20000)));
    const auto ref = run_model(**one, prompts, 64, 8);
    const auto got = run_model(**split, prompts, 64, 8);
    const Agreement a = compare(ref, got, 0.05f);
    std::printf("[tp] %s tp=%d (%s): %zu rows, max |diff| / max |logit| %.2e, top-1 %d/%d where margin > 0.05\n",
                k.file, k.tp, device == Device::kCpu ? "cpu, int8x2" : "cuda, nccl", got.size(), a.max_rel,
                a.top1_equal, a.top1_checked);
    // CPU int8x2 activations: each rank's partial sums round on their own, and the sums meet in
    // another order; the rounding grows through the layers (Gemma 3: ~3e-3 of the largest logit).
    // CUDA: 16-bit inputs, another GEMM split per shape (as batched vs alone, test_golden.cpp).
    EXPECT_LT(a.max_rel, device == Device::kCpu ? 1e-2f : 5e-2f) << k.file;
    EXPECT_EQ(a.top1_equal, a.top1_checked) << k.file;
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "not enough " << device_name(device) << " devices for any split";
}

INSTANTIATE_TEST_SUITE_P(Devices, TensorParallelGolden, ::testing::Values(Device::kCpu, Device::kCuda),
                         [](const auto& info) { return std::string(device_name(info.param)); });

}  // namespace
}  // namespace hs
