// tests/ops/test_sparse_attention_ops.cpp — the CUDA backend's sparse attention (sketch
// selection + attention over the selected pages) against the CPU sparse path on the same
// inputs (docs/gpu-sparse.md):
//   - the selection: sinks and window exactly the CPU's; the winners a top-k of the CPU
//     selector's own chunk scores up to the scores' rounding (the two backends sum the f16
//     sketches' projections in different orders, so a near-tie at the k-th place may go
//     either way: such swaps must lie within 1e-3 of max |score| of the boundary and are
//     counted; almost always there are none);
//   - the output: exact softmax over exactly the chunks the GPU selected, recomputed by the CPU
//     (sparse_attention_chunks over the host pages, which hold the same f16 K/V), within 2e-3;
//   - a budget covering the context gives dense attention (the GPU's own dense path);
//   - sketches rebuilt from the pages (rebuild_sparse_metadata, the bench's synthetic context)
//     select like the CPU's rebuilt ones.
// Inputs are fresh each run (HS_TEST_SEED replays). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "ops_test_util.h"
#include "backend/cpu_sparse_attention.h"
#include "sparse/sparse_runtime.h"

#if defined(HS_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace hs {
namespace {

using ops_test::normal;
using ops_test::seed_note;
using ops_test::test_seed;

#define HS_ASSERT_OK(expr)                                                                    \
  do {                                                                                        \
    const ::hs::Status hs_st_ = (expr);                                                       \
    ASSERT_TRUE(hs_st_.is_ok()) << #expr << ": " << hs_st_.to_string() << "; " << seed_note(); \
  } while (0)

#if defined(HS_WITH_CUDA)

constexpr int kLayers = 2, kKvHeads = 2, kGroup = 4, kHd = 128, kP = 16, kRank = 32;
constexpr int kHeads = kKvHeads * kGroup, kKvDim = kKvHeads * kHd, kQDim = kHeads * kHd;

struct Dev {  // a device tensor
  Buffer buf;
  Tensor t;
};

class SparseAttentionOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = cuda::CudaBackend::create(0);
    if (!dev.is_ok()) GTEST_SKIP() << "no CUDA backend: " << dev.status().message();
    dev_ = std::move(*dev);
    auto cpu = make_backend(Device::kCpu);
    ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
    cpu_ = std::move(*cpu);
    cpu_->set_matmul_precision(MatmulPrecision::kExact);
    pool_ = std::make_unique<ThreadPool>(0);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
  }
  void TearDown() override {
    if (host_) (void)host_->set_sparse(nullptr, nullptr);
    if (dev_) (void)dev_->set_sparse(nullptr, nullptr);
    rt_cpu_.reset();
    rt_dev_.reset();
    rt_host_.reset();
    cpu_.reset();
    dev_.reset();
    host_.reset();
  }

  Dev make(Backend& b, int64_t rows, int64_t cols, const std::vector<float>* data = nullptr) {
    Dev d;
    auto r = b.alloc(static_cast<size_t>(std::max<int64_t>(1, rows * cols)) * 4, "test tensor");
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok()) return d;
    d.buf = std::move(*r);
    d.t = Tensor::matrix(d.buf.data(), DType::F32, rows, cols, b.device());
    if (data) {
      EXPECT_TRUE(b.from_host(data->data(), d.t).is_ok());
    }
    return d;
  }

  // A plan over `seqs` with the given (position, sequence) tokens.
  void plan_of(const std::vector<std::pair<int32_t, int32_t>>& toks, ForwardPlan& plan, std::vector<int32_t>& tokens,
               std::vector<int32_t>& positions, std::vector<int32_t>& seq_index) {
    tokens.assign(toks.size(), 0);
    positions.clear();
    seq_index.clear();
    for (auto [p, s] : toks) {
      positions.push_back(p);
      seq_index.push_back(s);
    }
    plan = ForwardPlan{};
    plan.tokens = tokens;
    plan.positions = positions;
    plan.seq_index = seq_index;
    plan.seqs = seq_ptrs_;
    plan.kv = kv_.get();
    plan.pool = pool_.get();
    plan.seq_tokens.assign(seq_ptrs_.size(), 0);
    for (int32_t s : seq_index) ++plan.seq_tokens[static_cast<size_t>(s)];
    plan.page_indptr.assign(1, 0);
    for (SeqKv* s : seq_ptrs_) {
      plan.page_indices.insert(plan.page_indices.end(), s->blocks.begin(), s->blocks.end());
      plan.page_indptr.push_back(static_cast<int32_t>(plan.page_indices.size()));
    }
    for (int32_t p : positions) plan.max_kv_len = std::max(plan.max_kv_len, p + 1);
  }

  // `kernels`: the backend's host sparse kernels (null for CUDA, which selects on the device).
  std::unique_ptr<SparseRuntime> runtime(const SparseConfig& cfg, uint64_t basis_seed, const SparseKernels* kernels) {
    SketchBasis b = random_sketch_basis(kLayers, kKvHeads, kHd, rank_, basis_seed);
    std::mt19937_64 r(basis_seed);
    for (auto& layer : b.mean)
      for (float& m : layer) m = std::normal_distribution<float>(0.0f, 0.3f)(r);
    SparseRuntime::Geometry g{kLayers, kKvHeads, kHd, kP, kv_->pool().n_blocks(), kv_token_bytes(kv_dtype_, kHd),
                              std::vector<bool>(kLayers, true)};
    auto rt = SparseRuntime::create(SparseMode::kSketch, cfg, g, std::make_unique<SketchBasis>(std::move(b)), kernels,
                                    kv_.get(), scale_);
    EXPECT_TRUE(rt.is_ok()) << rt.status().to_string();
    return rt.is_ok() ? std::move(*rt) : nullptr;
  }

  // Sequences with `ctx` keys written, then one decode token each (position ctx); pages for
  // `extra` more decode tokens each.
  void make_sequences(const std::vector<int32_t>& ctx, int extra = 0) {
    int32_t n_blocks = 4;
    for (int32_t c : ctx) n_blocks += (c + 1 + extra + kP - 1) / kP;
    kv_ = std::make_unique<KvCache>(KvGeometry{kLayers, kKvHeads, kHd, kP, kv_dtype_}, n_blocks);
    {  // scattered, unordered pages
      SeqKv all;
      ASSERT_TRUE(kv_->reserve(all, n_blocks * kP).is_ok());
      std::shuffle(all.blocks.begin(), all.blocks.end(), rng_);
      kv_->release(all);
    }
    seqs_.assign(ctx.size(), SeqKv{});
    seq_ptrs_.clear();
    for (size_t s = 0; s < ctx.size(); ++s) {
      HS_ASSERT_OK(kv_->reserve(seqs_[s], ctx[s] + 1 + extra));
      seq_ptrs_.push_back(&seqs_[s]);
    }
    ctx_ = ctx;
  }

  // Context keys kc [sum ctx][kKvDim] offset per chunk along a random direction, so chunk scores
  // spread out; seq_salt > 0 also varies the offsets between sequences.
  void add_chunk_offsets(std::vector<float>& kc, int seq_salt) {
    const auto dir = normal(rng_, kHd);
    int64_t row = 0;
    for (size_t s = 0; s < ctx_.size(); ++s)
      for (int32_t p = 0; p < ctx_[s]; ++p, ++row) {
        const float a = static_cast<float>(((p / kP + seq_salt * static_cast<int>(s)) * 7919) % 13) * 0.15f;
        for (int h = 0; h < kKvHeads; ++h)
          for (int d = 0; d < kHd; ++d) kc[static_cast<size_t>(row * kKvDim + h * kHd + d)] += a * dir[d];
      }
  }

  // Random context K / V of every sequence (add_chunk_offsets with seq_salt) written on x and y.
  void write_random_context(Backend& x, Backend& y, int seq_salt) {
    int64_t n_ctx = 0;
    for (int32_t c : ctx_) n_ctx += c;
    auto kc = normal(rng_, static_cast<size_t>(n_ctx * kKvDim));
    const auto vc = normal(rng_, static_cast<size_t>(n_ctx * kKvDim));
    add_chunk_offsets(kc, seq_salt);
    write_context(x, kc, vc);
    write_context(y, kc, vc);
  }

  // Writes every context key (both layers) on backend b; only >= 0: that sequence's alone (kc,
  // vc then hold its rows only).
  void write_context(Backend& b, const std::vector<float>& kc, const std::vector<float>& vc, int only = -1) {
    std::vector<std::pair<int32_t, int32_t>> toks;
    for (size_t s = 0; s < ctx_.size(); ++s)
      if (only < 0 || static_cast<int>(s) == only)
        for (int32_t p = 0; p < ctx_[s]; ++p) toks.push_back({p, static_cast<int32_t>(s)});
    ForwardPlan plan;
    std::vector<int32_t> t, pos, si;
    plan_of(toks, plan, t, pos, si);
    const int64_t n = static_cast<int64_t>(toks.size());
    Dev k = make(b, n, kKvDim, &kc), v = make(b, n, kKvDim, &vc);
    HS_ASSERT_OK(b.begin_step(plan));
    for (int l = 0; l < kLayers; ++l) HS_ASSERT_OK(b.kv_write(l, k.t, v.t));
    HS_ASSERT_OK(b.end_step());
  }

  // The decode step (one token per sequence): prompt() with a one-token run per sequence.
  std::vector<float> decode(Backend& b, const std::vector<float>& k, const std::vector<float>& v,
                            const std::vector<float>& q) {
    std::vector<std::pair<int, int32_t>> runs;
    for (size_t s = 0; s < ctx_.size(); ++s) runs.push_back({static_cast<int>(s), 1});
    return prompt(b, runs, k, v, q);
  }

  // A prompt step: runs[i] = (sequence, new tokens) at positions ctx_ onwards, each run's tokens
  // contiguous; K / V written on both layers, attention of layer 1; returns out [n][kQDim].
  std::vector<float> prompt(Backend& b, const std::vector<std::pair<int, int32_t>>& runs, const std::vector<float>& k,
                            const std::vector<float>& v, const std::vector<float>& q) {
    std::vector<std::pair<int32_t, int32_t>> toks;
    for (auto [s, add] : runs)
      for (int32_t i = 0; i < add; ++i) toks.push_back({ctx_[static_cast<size_t>(s)] + i, s});
    ForwardPlan plan;
    std::vector<int32_t> t, pos, si;
    plan_of(toks, plan, t, pos, si);
    const int64_t n = static_cast<int64_t>(toks.size());
    Dev km = make(b, n, kKvDim, &k), vm = make(b, n, kKvDim, &v), qm = make(b, n, kQDim, &q), om = make(b, n, kQDim);
    std::vector<float> out(static_cast<size_t>(n * kQDim), NAN);
    EXPECT_TRUE(b.from_host(out.data(), om.t).is_ok());  // poisoned
    const AttentionParams p{kHeads, kKvHeads, kHd, scale_, 0};
    EXPECT_TRUE(b.begin_step(plan).is_ok());
    for (int l = 0; l < kLayers; ++l) EXPECT_TRUE(b.kv_write(l, km.t, vm.t).is_ok());
    EXPECT_TRUE(b.attention(1, qm.t, om.t, p).is_ok());
    EXPECT_TRUE(b.end_step().is_ok());
    EXPECT_TRUE(b.to_host(om.t, out.data()).is_ok());
    return out;
  }

  // ExactRerankSelectsWhatTheCpuRerankSelects with the GPU's page bounds shortlist (0: none),
  // contexts `ctx`; equal_keys: every context key 0 (every candidate's score and mass ties: the
  // later chunks win, and the GPU's selection must be the CPU's exactly).
  void check_exact_rerank(int32_t page_shortlist, const std::vector<int32_t>& ctx = {3000, 700},
                          bool equal_keys = false);

  // CPU and CUDA runtimes of one config and basis seed, attached to their backends.
  void attach_cpu_and_dev(const SparseConfig& cfg, uint64_t seed) {
    rt_cpu_ = runtime(cfg, seed, cpu_->host_sparse_kernels());
    rt_dev_ = runtime(cfg, seed, dev_->host_sparse_kernels());
    ASSERT_TRUE(rt_cpu_ && rt_dev_);
    HS_ASSERT_OK(cpu_->set_sparse(rt_cpu_.get(), nullptr));
    HS_ASSERT_OK(dev_->set_sparse(rt_dev_.get(), nullptr));
  }

  // The GPU's layer-1 output out_dev must be the exact attention over its own selections `sel`
  // (rows = seq * kKvHeads + head), recomputed on the host pages, within 2e-3 of max |ref|
  // (at least 1); returns that max.
  // (n_seqs: only the first n_seqs sequences are decode rows, sequence s at token tok0 + s.)
  double check_output_over(const std::vector<std::vector<int32_t>>& sel, const std::vector<float>& q,
                           const std::vector<float>& out_dev, size_t n_seqs = SIZE_MAX, size_t tok0 = 0) {
    const KvGeometry& g = kv_->geometry();
    double worst = 0.0, ref_max = 0.0;
    std::vector<float> ref(static_cast<size_t>(kGroup * kHd));
    SparseAttnScratch scratch;
    for (size_t s = 0; s < std::min(ctx_.size(), n_seqs); ++s)
      for (int h = 0; h < kKvHeads; ++h) {
        const cpu::PagedKvView view{kv_->layer_base(1), g.page_elems(), seqs_[s].blocks.data(), kP, kHd, true};
        const std::vector<int32_t>& chunks = sel[s * kKvHeads + h];
        EXPECT_FALSE(chunks.empty());
        sparse_attention_chunks(q.data() + (tok0 + s) * kQDim + h * kGroup * kHd, kGroup, view, h, chunks, kP,
                                ctx_[s] + 1, 0, scale_, ref.data(), scratch);
        for (int e = 0; e < kGroup * kHd; ++e) {
          const float got = out_dev[(tok0 + s) * kQDim + h * kGroup * kHd + e];
          EXPECT_FALSE(std::isnan(got)) << "output not written: seq " << s << " head " << h;
          worst = std::max(worst, static_cast<double>(std::abs(got - ref[e])));
          ref_max = std::max(ref_max, static_cast<double>(std::abs(ref[e])));
        }
      }
    EXPECT_LE(worst, 2e-3 * std::max(1.0, ref_max)) << seed_note();
    return ref_max;
  }

  // Checks the GPU's selections of layer 1 against the CPU selector on the same queries; returns
  // the number of near-tie swaps.
  int check_selections(const SparseRuntime& cpu_rt, const std::vector<float>& q,
                       const std::vector<std::vector<int32_t>>& got) {
    const SparseConfig& cfg = cpu_rt.config();
    const ChunkSelector& sel = cpu_rt.selector();
    int swaps = 0;
    for (size_t s = 0; s < ctx_.size(); ++s)
      for (int h = 0; h < kKvHeads; ++h) {
        const int32_t n_keys = ctx_[s] + 1;
        SelectInput in;
        in.layer = 1;
        in.kv_head = h;
        in.q = q.data() + s * kQDim + h * kGroup * kHd;
        in.n_q = kGroup;
        in.blocks = seqs_[s].blocks;
        in.n_tokens = n_keys;
        std::vector<int32_t> want;
        sel.select(in, want);
        const std::vector<int32_t>& g = got[s * kKvHeads + h];
        const std::string where = "seq " + std::to_string(s) + " (" + std::to_string(n_keys) + " keys) head " +
                                  std::to_string(h) + "; " + seed_note();
        EXPECT_EQ(g.size(), want.size()) << where;
        if (g == want) continue;
        // Differences only among candidates, only near the k-th score.
        const auto [first, last] = candidate_range(n_keys, cfg);
        std::vector<float> prep(static_cast<size_t>(sel.prep_floats(kGroup)));
        sel.prepare(in, prep.data());
        std::vector<float> sc(static_cast<size_t>(last - first));
        sel.chunk_scores(in, prep.data(), first, last, sc.data());
        std::vector<float> sorted = sc;
        std::sort(sorted.rbegin(), sorted.rend());
        const float kth = sorted[static_cast<size_t>(cfg.budget_chunks() - 1)];
        float mx = 0.0f;
        for (float x : sc) mx = std::max(mx, std::abs(x));
        const float tol = 1e-3f * mx + 1e-5f;
        std::vector<int32_t> only_got, only_want;
        std::set_difference(g.begin(), g.end(), want.begin(), want.end(), std::back_inserter(only_got));
        std::set_difference(want.begin(), want.end(), g.begin(), g.end(), std::back_inserter(only_want));
        for (int32_t c : only_got) {
          EXPECT_TRUE(c >= first && c < last) << "chunk " << c << " outside the candidates: " << where;
          if (c < first || c >= last) continue;
          EXPECT_GE(sc[c - first], kth - tol) << "GPU chose chunk " << c << " well below the k-th score: " << where;
        }
        for (int32_t c : only_want) {
          EXPECT_TRUE(c >= first && c < last) << "chunk " << c << " outside the candidates: " << where;
          if (c < first || c >= last) continue;
          EXPECT_LE(sc[c - first], kth + tol) << "GPU dropped chunk " << c << " well above the k-th score: " << where;
        }
        swaps += static_cast<int>(only_got.size());
      }
    return swaps;
  }

  std::unique_ptr<cuda::CudaBackend> dev_, host_;  // host_: the host tier (HostTier tests)
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<ThreadPool> pool_;
  std::mt19937_64 rng_;
  std::unique_ptr<KvCache> kv_;
  std::vector<SeqKv> seqs_;
  std::vector<SeqKv*> seq_ptrs_;
  std::vector<int32_t> ctx_;
  KvDtype kv_dtype_ = KvDtype::kF16;  // of the pages make_sequences makes
  int rank_ = kRank;                  // of the sketches runtime() makes
  std::unique_ptr<SparseRuntime> rt_cpu_, rt_dev_, rt_host_;
  float scale_ = 1.0f / std::sqrt(static_cast<float>(kHd));
};

SparseConfig small_config() {
  SparseConfig cfg;
  cfg.budget_tokens = 256;
  cfg.chunk_tokens = kP;
  cfg.sink_tokens = 16;
  cfg.window_tokens = 64;
  cfg.min_context = 0;  // every decode token selects (a context that fits selects all)
  cfg.sketch_elem = SketchElem::kF16;
  return cfg;
}

TEST_F(SparseAttentionOps, SelectsWhatTheCpuSelectsAndAttendsExactly) {
  // 3000 keys: 183 candidate chunks for 16 winners; 700: 38 candidates; 200 and 90: the
  // candidates fit the budget (every chunk selected, a partial last one included).
  make_sequences({3000, 700, 200, 90});
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  attach_cpu_and_dev(cfg, 77);
  if (HasFatalFailure()) return;
  const int64_t n = static_cast<int64_t>(ctx_.size());
  // Keys with a per-chunk offset along a random direction, so chunk scores spread out.
  write_random_context(*cpu_, *dev_, 0);
  const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
  const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
  const std::vector<float> out_cpu = decode(*cpu_, k, v, q);
  const std::vector<float> out_dev = decode(*dev_, k, v, q);
  auto sel = dev_->last_selections(n * kKvHeads);
  ASSERT_TRUE(sel.is_ok()) << sel.status().to_string();
  const int swaps = check_selections(*rt_cpu_, q, *sel);
  std::printf("sparse select: %d near-tie swaps over %lld rows; %s\n", swaps, static_cast<long long>(n * kKvHeads),
              seed_note().c_str());
  // The output: the exact attention over the GPU's own selection, on the host pages.
  const double ref_max = check_output_over(*sel, q, out_dev);
  // Where the selections agree (all rows when there is no swap) the CPU backend's own sparse
  // output is the same.
  if (swaps == 0) {
    double d = 0.0;
    for (size_t i = 0; i < out_cpu.size(); ++i) d = std::max(d, static_cast<double>(std::abs(out_cpu[i] - out_dev[i])));
    EXPECT_LE(d, 2e-3 * std::max(1.0, ref_max)) << seed_note();
  }
  // The counters: every decode row of layer 1 ... counted at begin_step for both full layers.
  const SparseStats st = rt_dev_->stats();
  EXPECT_EQ(st.sparse_heads, n * kKvHeads * kLayers);
  EXPECT_GT(st.keys_total, st.keys_selected);

  // Sketches rebuilt from the pages (f16 keys) select like the CPU's rebuilt ones.
  attach_cpu_and_dev(cfg, 77);
  if (HasFatalFailure()) return;
  for (size_t s = 0; s < ctx_.size(); ++s) {
    HS_ASSERT_OK(cpu_->rebuild_sparse_metadata(*kv_, seqs_[s], ctx_[s]));
    HS_ASSERT_OK(dev_->rebuild_sparse_metadata(*kv_, seqs_[s], ctx_[s]));
  }
  (void)decode(*dev_, k, v, q);
  auto sel2 = dev_->last_selections(n * kKvHeads);
  ASSERT_TRUE(sel2.is_ok()) << sel2.status().to_string();
  const int swaps2 = check_selections(*rt_cpu_, q, *sel2);
  std::printf("sparse select after rebuild: %d near-tie swaps; %s\n", swaps2, seed_note().c_str());
}

// The tensor-core score kernel at the other sketch ranks (16, 64: other k-block counts and load
// widths), and sketches rebuilt from int4 / int8 pages (the GPU decodes the scaled rows as the
// host does): the selections are the CPU selector's up to near ties.
TEST_F(SparseAttentionOps, SelectsLikeTheCpuAtEveryRankAndFromScaledPages) {
  struct Case {
    int rank;
    KvDtype dtype;
  };
  for (const Case c : {Case{16, KvDtype::kF16}, Case{64, KvDtype::kF16}, Case{32, KvDtype::kInt4}, Case{16, KvDtype::kInt8}}) {
    rank_ = c.rank;
    kv_dtype_ = c.dtype;
    const std::string what = "rank " + std::to_string(c.rank) + " " + kv_dtype_name(c.dtype);
    make_sequences({3000, 1200});
    if (HasFatalFailure()) return;
    const SparseConfig cfg = small_config();
    attach_cpu_and_dev(cfg, 78);
    if (HasFatalFailure()) return;
    const int64_t n = static_cast<int64_t>(ctx_.size());
    write_random_context(*cpu_, *dev_, 0);
    const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
    const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
    if (c.dtype != KvDtype::kF16) {  // sketches from the stored (quantized) keys on both sides
      for (size_t sq = 0; sq < ctx_.size(); ++sq) {
        HS_ASSERT_OK(cpu_->rebuild_sparse_metadata(*kv_, seqs_[sq], ctx_[sq]));
        HS_ASSERT_OK(dev_->rebuild_sparse_metadata(*kv_, seqs_[sq], ctx_[sq]));
      }
    }
    (void)decode(*cpu_, k, v, q);
    (void)decode(*dev_, k, v, q);
    auto sel = dev_->last_selections(n * kKvHeads);
    ASSERT_TRUE(sel.is_ok()) << sel.status().to_string();
    const int swaps = check_selections(*rt_cpu_, q, *sel);
    std::printf("sparse select %s: %d near-tie swaps over %lld rows; %s\n", what.c_str(), swaps,
                static_cast<long long>(n * kKvHeads), seed_note().c_str());
    if (HasFailure()) return;
    HS_ASSERT_OK(cpu_->set_sparse(nullptr, nullptr));
    HS_ASSERT_OK(dev_->set_sparse(nullptr, nullptr));
    rt_cpu_.reset();
    rt_dev_.reset();
  }
}

// Hierarchical scoring (--sparse-page-shortlist): every candidate page bounded by its summary,
// the best `shortlist` scored token by token. A row whose candidates all fit the shortlist selects
// exactly what the flat path (and the CPU) selects; a longer row keeps most of the CPU's scored
// winners (a random shortlist of 32 of its ~171 candidates would keep ~19 %); both again after
// the sketches and summaries are rebuilt from the pages. The keys cluster by page (a random
// centre per page and head, spread 0.25 around it): the locality page bounds rely on. On i.i.d.
// Gaussian keys (spread 1 around chunk offsets) the bound is loose: 11 of 32 kept (s20h).
TEST_F(SparseAttentionOps, HierarchicalScoringKeepsTheBestPages) {
  make_sequences({3000, 500});
  if (HasFatalFailure()) return;
  SparseConfig cfg = small_config();
  cfg.page_shortlist = 32;  // 2 x the budget's 16 chunks; the 500-key row has 14 candidates
  SparseConfig flat = small_config();
  rt_cpu_ = runtime(flat, 79, cpu_->host_sparse_kernels());
  rt_dev_ = runtime(cfg, 79, dev_->host_sparse_kernels());
  ASSERT_TRUE(rt_cpu_ && rt_dev_);
  HS_ASSERT_OK(cpu_->set_sparse(rt_cpu_.get(), nullptr));
  HS_ASSERT_OK(dev_->set_sparse(rt_dev_.get(), nullptr));
  int64_t n_ctx = 0;
  for (int32_t x : ctx_) n_ctx += x;
  const int64_t n = static_cast<int64_t>(ctx_.size());
  auto kc = normal(rng_, static_cast<size_t>(n_ctx * kKvDim), 0.25f);
  {
    int64_t row = 0;
    for (size_t sq = 0; sq < ctx_.size(); ++sq) {
      std::vector<float> centre;
      for (int32_t p = 0; p < ctx_[sq]; ++p, ++row) {
        if (p % kP == 0) centre = normal(rng_, kKvDim);
        for (int e = 0; e < kKvDim; ++e) kc[static_cast<size_t>(row * kKvDim + e)] += centre[static_cast<size_t>(e)];
      }
    }
  }
  const auto vc = normal(rng_, static_cast<size_t>(n_ctx * kKvDim));
  const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
  const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
  write_context(*cpu_, kc, vc);
  write_context(*dev_, kc, vc);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1)  // from the pages: sketches and summaries rebuilt
      for (size_t sq = 0; sq < ctx_.size(); ++sq) {
        HS_ASSERT_OK(cpu_->rebuild_sparse_metadata(*kv_, seqs_[sq], ctx_[sq]));
        HS_ASSERT_OK(dev_->rebuild_sparse_metadata(*kv_, seqs_[sq], ctx_[sq]));
      }
    (void)decode(*dev_, k, v, q);
    auto sel = dev_->last_selections(n * kKvHeads);
    ASSERT_TRUE(sel.is_ok()) << sel.status().to_string();
    const ChunkSelector& cs = rt_cpu_->selector();
    int kept = 0, wanted = 0;
    for (int h = 0; h < kKvHeads; ++h) {
      for (size_t sq = 0; sq < ctx_.size(); ++sq) {
        SelectInput in;
        in.layer = 1;
        in.kv_head = h;
        in.q = q.data() + sq * kQDim + h * kGroup * kHd;
        in.n_q = kGroup;
        in.blocks = seqs_[sq].blocks;
        in.n_tokens = ctx_[sq] + 1;
        std::vector<int32_t> want;
        cs.select(in, want);
        const std::vector<int32_t>& got = (*sel)[sq * kKvHeads + h];
        const std::string where = "pass " + std::to_string(pass) + " seq " + std::to_string(sq) + " head " +
                                  std::to_string(h) + "; " + seed_note();
        ASSERT_EQ(got.size(), want.size()) << where;
        if (sq == 1) {
          EXPECT_EQ(got, want) << "a row whose candidates fit the shortlist selects as the flat path: " << where;
        } else {  // the scored winners only (sinks and window are in both)
          const auto [first, last] = candidate_range(in.n_tokens, flat);
          auto scored = [&](const std::vector<int32_t>& v) {
            std::vector<int32_t> o;
            for (int32_t c : v)
              if (c >= first && c < last) o.push_back(c);
            return o;
          };
          const std::vector<int32_t> g2 = scored(got), w2 = scored(want);
          std::vector<int32_t> both;
          std::set_intersection(g2.begin(), g2.end(), w2.begin(), w2.end(), std::back_inserter(both));
          kept += static_cast<int>(both.size());
          wanted += static_cast<int>(w2.size());
        }
      }
    }
    const double recall = wanted ? static_cast<double>(kept) / wanted : 0.0;
    std::printf("hierarchical (shortlist 32 of ~171 candidates), pass %d: %d of %d scored winners kept (%.3f); %s\n",
                pass, kept, wanted, recall, seed_note().c_str());
    EXPECT_GE(recall, 0.6) << "pass " << pass << "; " << seed_note();
  }
}

// The exact rerank (--sparse-rerank R on the GPU): the sketch scores' best R x budget chunks,
// then the exact group mass of their keys (sparse/exact_rerank.h's rule). A context whose
// candidates all fit the shortlist (700 keys: ~38 chunks, shortlist 64) must select an exact
// top-k of the group mass computed here in double from the host pages (ties within 1e-5 of the
// k-th value may swap); a longer one (3000 keys: ~180 candidates) must select what the CPU's
// two-stage selector selects, up to near ties of either stage (at most 2 chunks, in at most one
// row). The output is the exact attention over the GPU's selection, and the byte counters count
// the reranked K rows.
TEST_F(SparseAttentionOps, ExactRerankSelectsWhatTheCpuRerankSelects) {
  // page_shortlist 0: the rerank's shortlist from every candidate's sketch score; 96: from the
  // sketch scores of the 96 best page bounds (hierarchical scoring first); 64 (= R x the
  // budget's 16 chunks): the 64 best bounds are the rerank's list as they are. The CPU reference
  // is the flat two-stage selection: with bounds, only rows whose candidates all fit the bounds'
  // list are compared with it (the 700-key rows); the longer ones are checked through the output.
  for (const int32_t page_shortlist : {0, 96, 64}) {
    SCOPED_TRACE("page_shortlist " + std::to_string(page_shortlist));
    check_exact_rerank(page_shortlist);
    if (HasFatalFailure()) return;
  }
}

void SparseAttentionOps::check_exact_rerank(int32_t page_shortlist, const std::vector<int32_t>& ctx,
                                            bool equal_keys) {
  make_sequences(ctx);
  if (HasFatalFailure()) return;
  SparseConfig cfg = small_config();
  cfg.rerank_factor = 4;
  SparseConfig dev_cfg = cfg;
  dev_cfg.page_shortlist = page_shortlist;
  rt_cpu_ = runtime(cfg, 77, cpu_->host_sparse_kernels());
  rt_dev_ = runtime(dev_cfg, 77, dev_->host_sparse_kernels());
  ASSERT_TRUE(rt_cpu_ && rt_dev_);
  HS_ASSERT_OK(cpu_->set_sparse(rt_cpu_.get(), nullptr));
  HS_ASSERT_OK(dev_->set_sparse(rt_dev_.get(), nullptr));
  const int64_t n = static_cast<int64_t>(ctx_.size());
  if (equal_keys) {
    int64_t n_ctx = 0;
    for (int32_t c : ctx_) n_ctx += c;
    const std::vector<float> kc(static_cast<size_t>(n_ctx * kKvDim), 0.0f);
    const auto vc = normal(rng_, static_cast<size_t>(n_ctx * kKvDim));
    write_context(*cpu_, kc, vc);
    write_context(*dev_, kc, vc);
  } else {
    write_random_context(*cpu_, *dev_, 1);
  }
  const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
  const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
  (void)decode(*cpu_, k, v, q);  // the host pages get the decode token's K / V too
  const std::vector<float> out_dev = decode(*dev_, k, v, q);
  auto sel = dev_->last_selections(n * kKvHeads);
  ASSERT_TRUE(sel.is_ok()) << sel.status().to_string();
  int rows_differing = 0, rows_bounded = 0;
  for (size_t s = 0; s < ctx_.size(); ++s)
    for (int h = 0; h < kKvHeads; ++h) {
      const int32_t n_keys = ctx_[s] + 1;
      const float* qh = q.data() + s * kQDim + h * kGroup * kHd;
      const std::vector<int32_t>& got = (*sel)[s * kKvHeads + h];
      const std::string where = "seq " + std::to_string(s) + " (" + std::to_string(n_keys) + " keys) head " +
                                std::to_string(h) + "; " + seed_note();
      std::vector<int32_t> want;
      SelectScratch scratch;
      rt_cpu_->select(seqs_[s].blocks, 1, h, qh, kGroup, n_keys, want, scratch);
      ASSERT_EQ(got.size(), want.size()) << where;
      const auto [first, last] = candidate_range(n_keys, cfg);
      if (last - first <= cfg.rerank_factor * cfg.budget_chunks()) {
        // Every candidate shortlisted: the exact group mass in double over candidates + forced.
        const int32_t n_chunks = (n_keys + kP - 1) / kP;
        std::vector<std::vector<double>> L(static_cast<size_t>(n_chunks), std::vector<double>(kGroup));
        std::vector<float> kr(kHd), vr(kHd);
        for (int32_t c = 0; c < n_chunks; ++c)
          for (int g = 0; g < kGroup; ++g) {
            double mx = -INFINITY;
            std::vector<double> x;
            for (int32_t t = c * kP; t < std::min(n_keys, (c + 1) * kP); ++t) {
              kv_->read(seqs_[s], 1, h, t, kr.data(), vr.data());
              double d = 0.0;
              for (int e = 0; e < kHd; ++e) d += static_cast<double>(qh[g * kHd + e]) * kr[e];
              x.push_back(scale_ * d);
              mx = std::max(mx, x.back());
            }
            double sum = 0.0;
            for (double xi : x) sum += std::exp(xi - mx);
            L[c][g] = mx + std::log(sum);
          }
        std::vector<double> rank(static_cast<size_t>(last - first), 0.0);
        for (int g = 0; g < kGroup; ++g) {
          double mx = -INFINITY, sum = 0.0;
          for (int32_t c = 0; c < n_chunks; ++c) mx = std::max(mx, L[c][g]);
          for (int32_t c = 0; c < n_chunks; ++c) sum += std::exp(L[c][g] - mx);
          const double lse = mx + std::log(sum);
          for (int32_t c = first; c < last; ++c) rank[c - first] += std::exp(L[c][g] - lse);
        }
        std::vector<double> sorted = rank;
        std::sort(sorted.rbegin(), sorted.rend());
        const double kth = sorted[static_cast<size_t>(cfg.budget_chunks() - 1)];
        const double tol = 1e-5 * sorted.front();
        for (int32_t c : got) {
          if (c >= first && c < last) {
            EXPECT_GE(rank[c - first], kth - tol) << "chunk " << c << " below the exact k-th group mass: " << where;
          }
        }
        int32_t n_picked = 0;
        for (int32_t c : got) n_picked += c >= first && c < last;
        EXPECT_EQ(n_picked, cfg.budget_chunks()) << where;
      }
      // With page bounds first, a row with more candidates than the bounds' list has another
      // first stage than the CPU's (the bounds' best pages, then their sketch scores): its
      // selection is checked through the output below only. (On the H100, session 22, such rows
      // differed from the flat two-stage selection by up to 8 of 16 chunks.)
      if (page_shortlist > 0 && last - first > page_shortlist) {
        ++rows_bounded;
        continue;
      }
      if (equal_keys) {
        EXPECT_EQ(got, want) << "every score ties: the later chunks win on both; " << where;
      }
      if (got != want) {
        ++rows_differing;
        std::vector<int32_t> diff;
        std::set_symmetric_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(diff));
        EXPECT_LE(diff.size(), 4u) << "the GPU's reranked selection is far from the CPU's: " << where;
      }
    }
  EXPECT_LE(rows_differing, 1) << seed_note();
  std::printf("exact rerank (page bounds %d): %d of %lld rows differ from the CPU's two-stage selection (near ties), "
              "%d not compared (bounded first stage); %s\n",
              page_shortlist, rows_differing, static_cast<long long>(n * kKvHeads), rows_bounded, seed_note().c_str());
  // The output: the exact attention over the GPU's selection, on the host pages.
  (void)check_output_over(*sel, q, out_dev);
  // At least the long context's shortlisted K rows (R x budget keys of 2 x kHd bytes), both
  // full layers and kv heads.
  const SparseStats st = rt_dev_->stats();
  EXPECT_GE(st.score_bytes, int64_t{kLayers} * kKvHeads * cfg.rerank_factor * cfg.budget_tokens * kHd * 2);
}

// Rows of ~2,500 candidates: the shortlist's top-k (shortlist_kernel) runs on a cluster of 8 CTAs
// a row, each CTA several candidates a thread, their histograms and winner counts merged through
// distributed shared memory. Random keys, then contexts of equal keys, whose ties span every CTA
// of the cluster (the last of them win, as on the CPU): at 40K tokens the 64 winning ties all sit
// in the last CTA's segment, at 8K (495 candidates, segments of 62) they straddle the last two.
TEST_F(SparseAttentionOps, ALongRowShortlistsAcrossAClusterAsTheCpu) {
  {
    SCOPED_TRACE("random keys");
    check_exact_rerank(0, {40000, 700});
  }
  if (HasFatalFailure()) return;
  {
    SCOPED_TRACE("equal keys, 40K");
    check_exact_rerank(0, {40000}, true);
  }
  if (HasFatalFailure()) return;
  SCOPED_TRACE("equal keys, 8K: the winning ties in two CTAs");
  check_exact_rerank(0, {8000}, true);
}

// A step mixing long-context decodes (sparse rows) with other sequences' tokens: a 5-token prompt
// before them (the same exact-kernel launch: its dense rows precede the selection's) and a 64-token
// prompt run after them (a flash range). The selection covers the decode tokens only (its scratch
// is not sized by the prompts), the decode rows attend their own selection exactly, and the
// prompt rows match the CPU.
TEST_F(SparseAttentionOps, MixedStepSelectsOnlyItsDecodeRows) {
  make_sequences({3000, 1500, 200, 100}, 64);
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  attach_cpu_and_dev(cfg, 77);
  if (HasFatalFailure()) return;
  write_random_context(*cpu_, *dev_, 0);
  const std::vector<std::pair<int, int32_t>> runs = {{3, 5}, {0, 1}, {1, 1}, {2, 64}};
  const int64_t n = 71, tok0 = 5;  // the decodes are tokens 5 and 6
  const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
  const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
  const std::vector<float> out_cpu = prompt(*cpu_, runs, k, v, q);
  const std::vector<float> out_dev = prompt(*dev_, runs, k, v, q);
  EXPECT_FALSE(dev_->last_selections(3 * kKvHeads).is_ok()) << "the prompts' tokens took selection rows";
  auto sel = dev_->last_selections(2 * kKvHeads);
  ASSERT_TRUE(sel.is_ok()) << sel.status().to_string();
  (void)check_output_over(*sel, q, out_dev, 2, tok0);
  double d = 0.0, mx = 0.0;
  for (size_t i = 0; i < out_cpu.size(); ++i) {
    if (i >= static_cast<size_t>(tok0 * kQDim) && i < static_cast<size_t>((tok0 + 2) * kQDim)) continue;  // decodes
    d = std::max(d, static_cast<double>(std::abs(out_cpu[i] - out_dev[i])));
    mx = std::max(mx, static_cast<double>(std::abs(out_cpu[i])));
  }
  EXPECT_LE(d, 4e-3 * std::max(1.0, mx)) << "the prompt rows; " << seed_note();
}

TEST_F(SparseAttentionOps, BudgetCoveringTheContextIsDense) {
  make_sequences({2500, 1200});
  if (HasFatalFailure()) return;
  SparseConfig cfg = small_config();
  cfg.budget_tokens = 4096;
  rt_dev_ = runtime(cfg, 5, dev_->host_sparse_kernels());
  ASSERT_TRUE(rt_dev_);
  int64_t n_ctx = 0;
  for (int32_t c : ctx_) n_ctx += c;
  const int64_t n = static_cast<int64_t>(ctx_.size());
  const auto kc = normal(rng_, static_cast<size_t>(n_ctx * kKvDim)), vc = normal(rng_, static_cast<size_t>(n_ctx * kKvDim));
  const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
  const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
  write_context(*dev_, kc, vc);
  const std::vector<float> dense = decode(*dev_, k, v, q);
  HS_ASSERT_OK(dev_->set_sparse(rt_dev_.get(), nullptr));
  for (size_t s = 0; s < ctx_.size(); ++s) HS_ASSERT_OK(dev_->rebuild_sparse_metadata(*kv_, seqs_[s], ctx_[s]));
  const std::vector<float> sparse = decode(*dev_, k, v, q);
  auto sel = dev_->last_selections(n * kKvHeads);
  ASSERT_TRUE(sel.is_ok());
  for (size_t s = 0; s < ctx_.size(); ++s)
    for (int h = 0; h < kKvHeads; ++h) {
      const auto& c = (*sel)[s * kKvHeads + h];
      ASSERT_EQ(static_cast<int32_t>(c.size()), (ctx_[s] + 1 + kP - 1) / kP) << "every chunk selected";
    }
  double d = 0.0, mx = 0.0;
  for (size_t i = 0; i < dense.size(); ++i) {
    d = std::max(d, static_cast<double>(std::abs(dense[i] - sparse[i])));
    mx = std::max(mx, static_cast<double>(std::abs(dense[i])));
  }
  EXPECT_LE(d, 1e-5 * std::max(1.0, mx)) << seed_note();  // the same keys; only the split differs
}

TEST_F(SparseAttentionOps, RefusesWhatItCannotRun) {
  make_sequences({100});
  if (HasFatalFailure()) return;
  SparseConfig cfg = small_config();
  cfg.chunk_tokens = 8;  // half a page
  auto rt = runtime(cfg, 1, dev_->host_sparse_kernels());
  ASSERT_TRUE(rt);
  const Status st = dev_->set_sparse(rt.get(), nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("page"), std::string::npos) << st.message();
  cfg = small_config();
  cfg.window_tokens = 0;  // the partial last chunk would be a scored candidate
  auto rt0 = runtime(cfg, 1, dev_->host_sparse_kernels());
  ASSERT_TRUE(rt0);
  const Status st0 = dev_->set_sparse(rt0.get(), nullptr);
  EXPECT_FALSE(st0.is_ok());
  EXPECT_NE(st0.message().find("window"), std::string::npos) << st0.message();
  HS_ASSERT_OK(dev_->set_sparse(nullptr, nullptr));
  // A runtime made for the device (no host stores) is refused by the CPU backend.
  auto rt_dev = runtime(small_config(), 1, dev_->host_sparse_kernels());
  ASSERT_TRUE(rt_dev);
  EXPECT_FALSE(rt_dev->host_selection());
  EXPECT_FALSE(cpu_->set_sparse(rt_dev.get(), nullptr).is_ok());
}

// Outputs that differ bit for bit between two runs (NaN, a row not written, counts as a
// difference): how many, and the first.
struct BitDiff {
  size_t bad = 0, first = 0;
};
BitDiff bit_diff(const std::vector<float>& want, const std::vector<float>& got) {
  BitDiff d;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(want[i] == got[i]) && d.bad++ == 0) d.first = i;
  return d;
}

// ---- the host tier (--kv-tier host: KV in mapped pinned host memory, sparse rows served from the
// device hot set, hot_set.h) against the device-resident path on the same inputs: the same
// selection over the same bytes, so the outputs are bit for bit the same.

// The --device-kv-budget that gives `slots` slots per (layer, kv head) (the sizing rule of
// cuda_host_tier.cpp: per layer the residency map and CLOCK state, 256-aligned, two alignments
// of slack, then slots of a piece plus 12 bytes of metadata per kv head).
int64_t piece_bytes(KvDtype t) { return KvGeometry{kLayers, kKvHeads, kHd, kP, t}.head_bytes(); }
int64_t hot_budget_for(int32_t slots, int32_t n_blocks, KvDtype t = KvDtype::kF16) {
  const int64_t piece = piece_bytes(t);
  const int64_t fixed = ((int64_t{kKvHeads} * n_blocks + 2 * kKvHeads) * 4 + 255) / 256 * 256;
  return kLayers * (fixed + 512 + int64_t{slots} * kKvHeads * (piece + 12));
}

class HostTierOps : public SparseAttentionOps {
 protected:
  void SetUp() override {
    SparseAttentionOps::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto h = cuda::CudaBackend::create(0);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    host_ = std::move(*h);
  }
  // Both backends with runtimes of one config and basis; the host one with `slots` slots.
  void attach(const SparseConfig& cfg, int32_t slots) {
    HS_ASSERT_OK(host_->set_kv_tier({true, hot_budget_for(slots, kv_->pool().n_blocks(), kv_dtype_)}));
    rt_dev_ = runtime(cfg, 91, nullptr);
    rt_host_ = runtime(cfg, 91, nullptr);
    ASSERT_TRUE(rt_dev_ && rt_host_);
    HS_ASSERT_OK(dev_->set_sparse(rt_dev_.get(), nullptr));
    HS_ASSERT_OK(host_->set_sparse(rt_host_.get(), nullptr));
  }
  // Random context K/V (chunk offsets so scores spread) written on both backends.
  void write_both() { write_random_context(*dev_, *host_, 1); }
  // One decode step on both with query q (fresh k / v); the contexts then grow by one.
  void step_both(const std::vector<float>& q, const std::string& what) {
    const int64_t n = static_cast<int64_t>(ctx_.size());
    const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
    const std::vector<float> want = decode(*dev_, k, v, q);
    const std::vector<float> got = decode(*host_, k, v, q);
    ASSERT_EQ(want.size(), got.size());
    const auto [bad, first] = bit_diff(want, got);
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " outputs differ, first at " << first << " (" << want[first]
                       << " vs " << got[first] << "); " << seed_note();
    if (bad > 0) {  // which rows differ: their selections, or the bytes served for the same selection
      auto sw = dev_->last_selections(n * kKvHeads), sg = host_->last_selections(n * kKvHeads);
      if (sw.is_ok() && sg.is_ok())
        for (int64_t r = 0; r < n * kKvHeads; ++r) {
          size_t row_bad = 0;
          const int64_t s = r / kKvHeads, h = r % kKvHeads;
          for (int64_t e = (s * kHeads + h * kGroup) * kHd; e < (s * kHeads + (h + 1) * kGroup) * kHd; ++e)
            row_bad += !(want[static_cast<size_t>(e)] == got[static_cast<size_t>(e)]);
          if (row_bad == 0) continue;
          const auto& a = (*sw)[static_cast<size_t>(r)];
          const auto& b = (*sg)[static_cast<size_t>(r)];
          std::string sa, sb;
          for (int32_t c : a) sa += " " + std::to_string(c);
          for (int32_t c : b) sb += " " + std::to_string(c);
          ADD_FAILURE() << what << ": seq " << s << " (context " << ctx_[static_cast<size_t>(s)] << ") kv head " << h
                        << ": " << row_bad << " outputs differ; "
                        << (a == b ? "the same selection:" + sa : "device tier selects" + sa + "; host tier" + sb);
        }
      // Stale slots after the step (its top-ups and fetches done), and the same step again (the
      // same token rewritten, every piece now fetched): a difference that goes away is an
      // ordering fault inside the step.
      auto audit = host_->audit_hot_set();
      const std::vector<float> again = decode(*host_, k, v, q);
      size_t bad_again = 0;
      for (size_t i = 0; i < want.size(); ++i) bad_again += !(want[i] == again[i]);
      std::string where = "none";
      if (audit.is_ok() && audit->stale > 0) {
        where = "layer " + std::to_string(audit->stale_layer) + " head " + std::to_string(audit->stale_head) +
                " block " + std::to_string(audit->stale_block) + " fill " + std::to_string(audit->stale_fill) +
                " first bad token " + std::to_string(audit->stale_token);
        for (size_t q2 = 0; q2 < seqs_.size(); ++q2)
          for (size_t j = 0; j < seqs_[q2].blocks.size(); ++j)
            if (seqs_[q2].blocks[j] == audit->stale_block)
              where += " = seq " + std::to_string(q2) + " page " + std::to_string(j) + " of " +
                       std::to_string(seqs_[q2].blocks.size()) + " (context " + std::to_string(ctx_[q2]) + ")";
      }
      ADD_FAILURE() << what << ": after the step " << (audit.is_ok() ? audit->stale : -1) << " stale of "
                    << (audit.is_ok() ? audit->resident : -1) << " resident slots (first: " << where
                    << "); the step again: " << bad_again << " outputs differ";
    }
    for (int32_t& c : ctx_) ++c;
  }
  std::vector<float> query(float spread = 1.5f) {
    return normal(rng_, static_cast<size_t>(ctx_.size() * kQDim), spread);
  }
};

TEST_F(HostTierOps, ServesTheSelectionFromTheHotSetBitForBit) {
  // 3000 / 1500 keys: scored (the budget picks 16 of ~180 / ~90 chunks); 200: fits (all chunks).
  make_sequences({3000, 1500, 200}, 8);
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  const int cap = cfg.max_selected_chunks();
  attach(cfg, 3 * cap + 64);
  if (HasFatalFailure()) return;
  write_both();  // binds the cache: the hot set is sized then
  EXPECT_EQ(host_->hot_slots(), 3 * cap + 64);
  EXPECT_EQ(host_->hot_max_rows(), (3 * cap + 64) / cap);
  const std::vector<float> q = query();
  step_both(q, "first step (every piece a miss)");
  SparseStats st = rt_host_->stats();
  EXPECT_EQ(st.fetch_hits, 0) << "a fresh hot set has nothing to hit";
  EXPECT_GT(st.fetch_misses, 0);
  EXPECT_EQ(st.fetch_refused, 0);
  EXPECT_EQ(st.fetch_bytes, st.fetch_misses * kP * 2 * kHd * 2);
  // The same query again: the same pages, hits but for the pages that grew (the last one of each
  // row, and a new page where the context crossed a page boundary).
  const int64_t misses0 = st.fetch_misses;
  step_both(q, "second step (hits)");
  st = rt_host_->stats();
  const int64_t rows = int64_t{kKvHeads} * static_cast<int64_t>(ctx_.size());  // layer 1's rows
  EXPECT_GT(st.fetch_hits, 0);
  EXPECT_LE(st.fetch_misses - misses0, 2 * rows) << "only the growing pages miss again";
  // New queries: other pages, hits and misses mixed, still exact.
  for (int i = 0; i < 4; ++i) step_both(query(), "fresh query " + std::to_string(i));
  st = rt_host_->stats();
  EXPECT_EQ(st.fetch_refused, 0);
  std::printf("host tier: %lld hits, %lld misses, %lld evictions over 6 steps; %s\n",
              static_cast<long long>(st.fetch_hits), static_cast<long long>(st.fetch_misses),
              static_cast<long long>(st.fetch_evictions), seed_note().c_str());
}

// Scaled pages (int8, int4; fp8 is the same code as int8): the slots hold the host's encoded
// pieces with their scales, the growing page is topped up from the host page's new row, and
// evictions stay exact, against the device-resident path on the same bytes.
TEST_F(HostTierOps, ScaledPagesServeExactly) {
  for (KvDtype t : {KvDtype::kInt8, KvDtype::kInt4}) {
    kv_dtype_ = t;
    const std::string name = kv_dtype_name(t);
    make_sequences({3000, 1300}, 12);
    if (HasFatalFailure()) return;
    const SparseConfig cfg = small_config();
    const int cap = cfg.max_selected_chunks();
    attach(cfg, 2 * cap + 9);
    if (HasFatalFailure()) return;
    write_both();
    const std::vector<float> q = query();
    step_both(q, name + " first step");
    SparseStats st = rt_host_->stats();
    EXPECT_EQ(st.fetch_bytes, st.fetch_misses * piece_bytes(t)) << name << ": a miss moves one encoded piece";
    const int64_t misses0 = st.fetch_misses;
    step_both(q, name + " same query");
    st = rt_host_->stats();
    const int64_t rows = int64_t{kKvHeads} * static_cast<int64_t>(ctx_.size());
    EXPECT_LE(st.fetch_misses - misses0, 2 * rows) << name << ": the growing pages are topped up, not fetched";
    for (int i = 0; i < 8; ++i) step_both(query(), name + " fresh query " + std::to_string(i));
    st = rt_host_->stats();
    EXPECT_GT(st.fetch_evictions, 0) << name;
    EXPECT_EQ(st.fetch_refused, 0) << name;
    if (HasFailure()) return;
    (void)host_->set_sparse(nullptr, nullptr);
    (void)dev_->set_sparse(nullptr, nullptr);
    rt_dev_.reset();
    rt_host_.reset();
  }
}

// Prompt runs on the host tier read a staged device copy of their sequence's pages (kv_stage.h)
// with the flash kernel: the same bytes in the same order as the device tier's pages, so the
// output is bit for bit the device tier's (f16: its flash over the pages themselves; int8 / int4:
// its own staged copy). Two sequences' runs in one step (the staging reused between them, the
// second sequence's pages numbered from 0), then a follow-up run on a grown context.
TEST_F(HostTierOps, PromptRunsReadAStagedCopyBitForBit) {
  for (KvDtype t : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kInt4}) {
    kv_dtype_ = t;
    const std::string name = kv_dtype_name(t);
    make_sequences({3000, 700}, 200);
    if (HasFatalFailure()) return;
    HS_ASSERT_OK(host_->set_kv_tier({true, 0}));
    write_both();
    for (const auto& runs : {std::vector<std::pair<int, int32_t>>{{0, 100}, {1, 64}},
                             std::vector<std::pair<int, int32_t>>{{1, 40}}}) {
      int64_t n = 0;
      for (auto [s, add] : runs) n += add;
      const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
      const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
      const std::vector<float> want = prompt(*dev_, runs, k, v, q);
      const std::vector<float> got = prompt(*host_, runs, k, v, q);
      const auto [bad, first] = bit_diff(want, got);
      EXPECT_EQ(bad, 0u) << name << " runs of " << n << " tokens: " << bad << " outputs differ, first at " << first
                         << " (" << want[first] << " vs " << got[first] << "); " << seed_note();
      for (auto [s, add] : runs) ctx_[static_cast<size_t>(s)] += add;
    }
    if (HasFailure()) return;
  }
}

// The same mixed step on the host tier (decodes served from the hot set, the 64-token run from a
// staged copy, the 5-token prompt's rows dense over the mapped pages) is bit for bit the device
// tier's.
TEST_F(HostTierOps, MixedStepsMatchTheDeviceTierBitForBit) {
  make_sequences({3000, 1500, 200, 100}, 64);
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  const int cap = cfg.max_selected_chunks();
  attach(cfg, 4 * cap + 16);
  if (HasFatalFailure()) return;
  write_both();
  const std::vector<std::pair<int, int32_t>> runs = {{3, 5}, {0, 1}, {1, 1}, {2, 64}};
  const int64_t n = 71;
  const auto k = normal(rng_, static_cast<size_t>(n * kKvDim)), v = normal(rng_, static_cast<size_t>(n * kKvDim));
  const auto q = normal(rng_, static_cast<size_t>(n * kQDim), 1.5f);
  const std::vector<float> want = prompt(*dev_, runs, k, v, q);
  const std::vector<float> got = prompt(*host_, runs, k, v, q);
  const auto [bad, first] = bit_diff(want, got);
  EXPECT_EQ(bad, 0u) << bad << " outputs differ, first at " << first << " (token " << first / kQDim << "); "
                     << seed_note();
}

TEST_F(HostTierOps, EvictionsUnderASmallPoolStayExact) {
  // A pool of just over one step's selections: every fresh query evicts.
  make_sequences({4000, 2600}, 12);
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  const int cap = cfg.max_selected_chunks();
  attach(cfg, 2 * cap + 5);
  if (HasFatalFailure()) return;
  write_both();
  for (int i = 0; i < 10; ++i) {
    step_both(query(), "step " + std::to_string(i));
    ASSERT_EQ(rt_host_->stats().fetch_refused, 0) << "a selection found no slot at step " << i << "; " << seed_note();
  }
  const SparseStats st = rt_host_->stats();
  EXPECT_GT(st.fetch_evictions, 0);
  EXPECT_EQ(st.fetch_refused, 0);
}

TEST_F(HostTierOps, ReusedBlocksNeverServeStalePieces) {
  // Sequence A fills the hot set; it is released and B, written with other keys, gets the same
  // blocks (the pool has no others): any piece of A served to B would change B's output.
  make_sequences({2400}, 2);
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  attach(cfg, cfg.max_selected_chunks() + 32);
  if (HasFatalFailure()) return;
  write_both();
  const std::vector<float> q = query();
  step_both(q, "A");
  step_both(q, "A again");
  const std::vector<int32_t> a_blocks = seqs_[0].blocks;
  kv_->release(seqs_[0]);
  seqs_[0] = SeqKv{};
  const int32_t n_free = kv_->pool().n_free();
  HS_ASSERT_OK(kv_->reserve(seqs_[0], n_free * kP));
  std::vector<int32_t> shared;
  std::vector<int32_t> a_sorted = a_blocks, b_sorted = seqs_[0].blocks;
  std::sort(a_sorted.begin(), a_sorted.end());
  std::sort(b_sorted.begin(), b_sorted.end());
  std::set_intersection(a_sorted.begin(), a_sorted.end(), b_sorted.begin(), b_sorted.end(), std::back_inserter(shared));
  ASSERT_GE(shared.size(), a_blocks.size() - 1) << "B reuses A's blocks";
  ctx_ = {2400};
  write_both();  // B's keys into the reused blocks
  step_both(q, "B with A's query");
  step_both(query(), "B, fresh query");
  EXPECT_EQ(rt_host_->stats().fetch_refused, 0);
}

// A storm of starts, cancels and finishes: between decode steps a sequence ends and a new one of
// another length starts in its place on the freed blocks (other keys), every step bit for bit the
// device path's. After every round no resident slot of the hot set holds bytes its block no longer
// has; at the end every page is free again and the hot set is still consistent (its slots stay as
// reclaimable cached copies: a freed page keeps its bytes for the prefix cache until reused).
TEST_F(HostTierOps, AStormOfStartsAndEndsStaysExactAndReturnsToBaseline) {
  make_sequences({1800, 700, 2600}, 2000);
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  const int cap = cfg.max_selected_chunks();
  attach(cfg, 3 * cap + 7);  // evictions every fresh query
  if (HasFatalFailure()) return;
  write_both();
  const int32_t n_blocks = kv_->pool().n_blocks();
  std::uniform_int_distribution<int32_t> len(200, 2600);
  int restarts = 0;
  for (int round = 0; round < 14; ++round) {
    if (round % 2 == 1) {  // one sequence finishes or is cancelled; a new one takes its place
      const size_t s = static_cast<size_t>(rng_() % seqs_.size());
      kv_->release(seqs_[s]);
      seqs_[s] = SeqKv{};
      ctx_[s] = len(rng_);
      HS_ASSERT_OK(kv_->reserve(seqs_[s], ctx_[s] + 1 + 16));
      auto kc = normal(rng_, static_cast<size_t>(int64_t{ctx_[s]} * kKvDim));
      const auto vc = normal(rng_, static_cast<size_t>(int64_t{ctx_[s]} * kKvDim));
      const auto dir = normal(rng_, kHd);
      for (int32_t p = 0; p < ctx_[s]; ++p) {
        const float a = static_cast<float>(((p / kP + 5 * round) * 7919) % 13) * 0.15f;
        for (int h = 0; h < kKvHeads; ++h)
          for (int d = 0; d < kHd; ++d) kc[static_cast<size_t>(int64_t{p} * kKvDim + h * kHd + d)] += a * dir[d];
      }
      write_context(*dev_, kc, vc, static_cast<int>(s));
      write_context(*host_, kc, vc, static_cast<int>(s));
      ++restarts;
    }
    step_both(query(), "storm round " + std::to_string(round));
    if (HasFailure()) return;
    auto audit = host_->audit_hot_set();
    ASSERT_TRUE(audit.is_ok()) << audit.status().to_string();
    EXPECT_EQ(audit->stale, 0) << "round " << round << ": " << audit->stale << " of " << audit->resident
                               << " resident slots hold bytes their block no longer has; " << seed_note();
  }
  const SparseStats st = rt_host_->stats();
  EXPECT_EQ(restarts, 7);
  EXPECT_GT(st.fetch_evictions, 0);
  EXPECT_EQ(st.fetch_refused, 0);
  for (SeqKv& s : seqs_) kv_->release(s);
  EXPECT_EQ(kv_->pool().n_free(), n_blocks) << "every page back in the pool";
  auto audit = host_->audit_hot_set();
  ASSERT_TRUE(audit.is_ok()) << audit.status().to_string();
  EXPECT_EQ(audit->slots, int64_t{kLayers} * kKvHeads * host_->hot_slots());
  EXPECT_GT(audit->resident, 0);
  EXPECT_EQ(audit->stale, 0) << seed_note();
  std::printf("host tier storm: %d restarts, %lld hits, %lld misses, %lld evictions; at the end %lld of %lld slots "
              "resident, %lld empty, 0 stale; %s\n",
              restarts, static_cast<long long>(st.fetch_hits), static_cast<long long>(st.fetch_misses),
              static_cast<long long>(st.fetch_evictions), static_cast<long long>(audit->resident),
              static_cast<long long>(audit->slots), static_cast<long long>(audit->empty), seed_note().c_str());
}

TEST_F(HostTierOps, ForcedMissesAndACoveringBudgetMatch) {
  // Budget covering the context: every chunk selected, the host tier's sparse rows equal the
  // device path's (sparse too, every chunk) bit for bit, and its dense path through the host
  // pages equals the device's dense path.
  make_sequences({1800, 900}, 4);
  if (HasFatalFailure()) return;
  SparseConfig cfg = small_config();
  cfg.budget_tokens = 4096;
  attach(cfg, 2 * cfg.max_selected_chunks() + 8);
  if (HasFatalFailure()) return;
  write_both();
  step_both(query(), "covering budget");
  step_both(query(), "covering budget, second step");
  // Dense on both (no runtime): the host tier's dense rows read the pinned pages.
  HS_ASSERT_OK(dev_->set_sparse(nullptr, nullptr));
  HS_ASSERT_OK(host_->set_sparse(nullptr, nullptr));
  step_both(query(), "dense through the host pages");
}

TEST_F(HostTierOps, RefusesABudgetBelowOneSelection) {
  make_sequences({500});
  if (HasFatalFailure()) return;
  const SparseConfig cfg = small_config();
  HS_ASSERT_OK(host_->set_kv_tier({true, hot_budget_for(cfg.max_selected_chunks() - 1, kv_->pool().n_blocks())}));
  rt_host_ = runtime(cfg, 3, nullptr);
  ASSERT_TRUE(rt_host_);
  // The hot set is sized when a KV cache is bound: set_sparse (bound cache) or the first step.
  write_context(*host_, normal(rng_, static_cast<size_t>(500 * kKvDim)), normal(rng_, static_cast<size_t>(500 * kKvDim)));
  const Status st = host_->set_sparse(rt_host_.get(), nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--device-kv-budget"), std::string::npos) << st.message();
  HS_ASSERT_OK(host_->set_sparse(nullptr, nullptr));
  EXPECT_FALSE(cpu_->set_kv_tier({true, 1 << 30}).is_ok()) << "the CPU backend has no host tier";
}

#else
TEST(SparseAttentionOps, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace hs
