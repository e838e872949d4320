// tests/unit/sparse/test_sketch_store.cpp — sketch projection, storage and the scoring kernels
// against scalar references on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu_sparse_kernels.h"
#include "backend/cpu/sketch_score.h"
#include "sparse/selector.h"
#include "sparse/sketch_store.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::random_orthonormal;
using test::randn;
using test::sparse_seed;

SketchBasis random_basis(std::mt19937& rng, int n_layer, int n_heads, int hd, int r, bool with_mean) {
  SketchBasis b = SketchBasis::zeros(n_layer, n_heads, hd, r);
  for (int l = 0; l < n_layer; ++l) {
    for (int h = 0; h < n_heads; ++h) {
      const auto U = random_orthonormal(rng, hd, r);
      std::copy(U.begin(), U.end(), b.basis[l].begin() + static_cast<size_t>(h) * hd * r);
    }
    if (with_mean) b.mean[l] = randn(rng, static_cast<size_t>(n_heads) * hd);
  }
  b.centered = with_mean;
  return b;
}

// Blocks 0..n_pages-1, shuffled.
std::vector<int32_t> shuffled_blocks(std::mt19937& rng, int n_pages) {
  std::vector<int32_t> blocks(n_pages);
  for (int i = 0; i < n_pages; ++i) blocks[i] = i;
  std::shuffle(blocks.begin(), blocks.end(), rng);
  return blocks;
}

TEST(SparseSketchStore, WriteStoresTheProjection) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, r = 16, P = 16, n = 100;
  const SketchBasis basis = random_basis(rng, 2, 2, hd, r, true);
  for (SketchElem dt : {SketchElem::kF32, SketchElem::kF16, SketchElem::kInt8}) {
    const auto blocks = shuffled_blocks(rng, (n + P - 1) / P);
    SketchStore store(cpu_sparse_kernels(), basis, P, static_cast<int32_t>(blocks.size()), dt);
    EXPECT_EQ(store.geometry().page_bytes(),
              dt == SketchElem::kInt8 ? 2 * (P * r + 2 * P) : 2 * P * r * (dt == SketchElem::kF16 ? 2 : 4));
    std::vector<float> keys = randn(rng, static_cast<size_t>(n) * hd);  // [n][head_dim] for (layer 1, head 1)
    for (int t = 0; t < n; ++t) store.write(blocks, 1, 1, t, keys.data() + t * hd);
    for (int t = 0; t < n; ++t) {
      float s[r];
      store.read(blocks, 1, 1, t, s);
      for (int j = 0; j < r; ++j) {
        double want = 0;
        for (int d = 0; d < hd; ++d)
          want += (keys[t * hd + d] - basis.mu(1, 1)[d]) * static_cast<double>(basis.B(1, 1)[d * r + j]);
        // int8: per-token absmax scale, so the error is at most half a step of max|s| / 127.
        double tol = (dt == SketchElem::kF16 ? 1e-3 : 1e-5) * (1 + std::fabs(want));
        if (dt == SketchElem::kInt8) {
          double amax = 0;
          for (int jj = 0; jj < r; ++jj) {
            double w = 0;
            for (int d = 0; d < hd; ++d)
              w += (keys[t * hd + d] - basis.mu(1, 1)[d]) * static_cast<double>(basis.B(1, 1)[d * r + jj]);
            amax = std::max(amax, std::fabs(w));
          }
          tol = 0.502 * amax / 127 * 1.001 + 1e-5;
        }
        EXPECT_NEAR(s[j], want, tol) << sketch_elem_name(dt);
      }
    }
  }
}

// rank = head_dim with an orthonormal basis: the sketch keeps everything, so the score is the
// exact max_g q_g·k, with or without a mean.
TEST(SparseSketchStore, FullRankScoresEqualExactDots) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, P = 16, n = 333, G = 3;
  for (int variant = 0; variant < 2; ++variant) {
    const SketchBasis basis = variant == 0 ? SketchBasis::identity(1, 2, hd, hd) : random_basis(rng, 1, 2, hd, hd, true);
    const auto blocks = shuffled_blocks(rng, (n + P - 1) / P);
    SketchStore store(cpu_sparse_kernels(), basis, P, static_cast<int32_t>(blocks.size()), SketchElem::kF32);
    const std::vector<float> keys = randn(rng, static_cast<size_t>(n) * hd);
    for (int t = 0; t < n; ++t) store.write(blocks, 0, 1, t, keys.data() + t * hd);
    const std::vector<float> q = randn(rng, G * hd);  // [G][head_dim]
    std::vector<float> scores(n);
    store.score_tokens(blocks, 0, 1, q.data(), G, 0, n, scores.data());
    for (int t = 0; t < n; ++t) {
      double best = -1e30;
      for (int g = 0; g < G; ++g) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[g * hd + d]) * keys[t * hd + d];
        best = std::max(best, dot);
      }
      EXPECT_NEAR(scores[t], best, 1e-4 * (8 + std::fabs(best))) << "variant " << variant << " token " << t;
    }
  }
}

// --sparse-residual: the store keeps one more dimension, the norm of the key's residual
// r_t = (k − mu) − A s, and each score becomes the upper confidence bound
// max_g (q_g·mu + q̂_g·s_t + z ‖q_g‖ ‖r_t‖ / √head_dim). A full-rank basis leaves no residual.
TEST(SparseSketchStore, ResidualNormMakesScoresUpperConfidenceBounds) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, r = 16, P = 16, n = 150, G = 3;
  const float z = 1.5f;
  const SketchBasis basis = random_basis(rng, 1, 2, hd, r, true);
  const auto blocks = shuffled_blocks(rng, (n + P - 1) / P);
  SketchStore store(cpu_sparse_kernels(), basis, P, static_cast<int32_t>(blocks.size()), SketchElem::kF32, z);
  ASSERT_EQ(store.geometry().rank, r + 1);
  const std::vector<float> keys = randn(rng, static_cast<size_t>(n) * hd);  // [n][head_dim]
  for (int t = 0; t < n; ++t) store.write(blocks, 0, 1, t, keys.data() + t * hd);
  const std::vector<float> q = randn(rng, G * hd);  // [G][head_dim]
  std::vector<float> scores(n);
  store.score_tokens(blocks, 0, 1, q.data(), G, 0, n, scores.data());
  const float* B = basis.B(0, 1);
  const float* mu = basis.mu(0, 1);
  for (int t = 0; t < n; ++t) {
    std::vector<double> x(hd), s(r, 0.0);
    for (int d = 0; d < hd; ++d) x[d] = keys[t * hd + d] - mu[d];
    for (int j = 0; j < r; ++j)
      for (int d = 0; d < hd; ++d) s[j] += x[d] * B[d * r + j];
    double res2 = 0;  // ‖x − B s‖² (A = B for a plain basis)
    for (int d = 0; d < hd; ++d) {
      double e = x[d];
      for (int j = 0; j < r; ++j) e -= B[d * r + j] * s[j];
      res2 += e * e;
    }
    std::vector<float> stored(r + 1);
    store.read(blocks, 0, 1, t, stored.data());
    EXPECT_NEAR(stored[r], std::sqrt(res2), 1e-4 * (1 + std::sqrt(res2))) << "token " << t;
    double best = -1e30;
    for (int g = 0; g < G; ++g) {
      double qmu = 0, qn2 = 0, qs = 0;
      for (int d = 0; d < hd; ++d) qmu += static_cast<double>(q[g * hd + d]) * mu[d], qn2 += q[g * hd + d] * q[g * hd + d];
      for (int j = 0; j < r; ++j) {
        double qb = 0;
        for (int d = 0; d < hd; ++d) qb += static_cast<double>(q[g * hd + d]) * B[d * r + j];
        qs += qb * s[j];
      }
      best = std::max(best, qmu + qs + z * std::sqrt(qn2 / hd) * std::sqrt(res2));
    }
    EXPECT_NEAR(scores[t], best, 1e-4 * (8 + std::fabs(best))) << "token " << t;
  }
  // Full rank: the residual is zero and the scores are the exact dots.
  const SketchBasis full = random_basis(rng, 1, 1, hd, hd, true);
  SketchStore exact(cpu_sparse_kernels(), full, P, static_cast<int32_t>(blocks.size()), SketchElem::kF32, z);
  for (int t = 0; t < n; ++t) exact.write(blocks, 0, 0, t, keys.data() + t * hd);
  for (int t = 0; t < n; ++t) {
    std::vector<float> stored(hd + 1);
    exact.read(blocks, 0, 0, t, stored.data());
    EXPECT_NEAR(stored[hd], 0.0f, 1e-3f) << "token " << t;
  }
  // int8 sketches would let the residual set each token's scale: refused.
  SparseConfig cfg;
  cfg.residual_z = 1.0f;
  cfg.sketch_elem = SketchElem::kInt8;
  EXPECT_FALSE(cfg.validate(P).is_ok());
  cfg.sketch_elem = SketchElem::kF16;
  EXPECT_TRUE(cfg.validate(P).is_ok());
}

// Every kernel path (fixed ranks 16..128, generic ranks, f16/f32, G up to 8, page sizes 16/32,
// ranges not aligned to pages) against a scalar reference over the stored sketches.
TEST(SparseSketchStore, KernelMatchesScalarReference) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  std::printf("sketch_score SIMD level: %s\n", cpu::sketch_score_simd_level());
  struct Case {
    int hd, r, P, G;
    SketchElem dt;
  };
  const Case cases[] = {{64, 16, 16, 3, SketchElem::kF16},   {64, 16, 16, 1, SketchElem::kF32},
                        {64, 16, 16, 3, SketchElem::kInt8},  {128, 32, 32, 8, SketchElem::kF16},
                        {256, 64, 16, 4, SketchElem::kF16},  {256, 64, 16, 4, SketchElem::kInt8},
                        {256, 128, 16, 2, SketchElem::kF32}, {80, 20, 16, 5, SketchElem::kF16},
                        {32, 8, 16, 2, SketchElem::kF32},    {64, 64, 16, 7, SketchElem::kF16},
                        {64, 16, 16, 11, SketchElem::kInt8}, {64, 16, 8, 3, SketchElem::kF16},
                        {48, 12, 24, 2, SketchElem::kInt8}};
  std::uniform_int_distribution<int> len(1, 700);
  for (const Case& cs : cases) {
    const int n = len(rng) + 40;
    const SketchBasis basis = random_basis(rng, 1, 2, cs.hd, cs.r, true);
    const auto blocks = shuffled_blocks(rng, (n + cs.P - 1) / cs.P);
    SketchStore store(cpu_sparse_kernels(), basis, cs.P, static_cast<int32_t>(blocks.size()), cs.dt);
    for (int t = 0; t < n; ++t) {
      const auto k = randn(rng, cs.hd);
      store.write(blocks, 0, 1, t, k.data());
    }
    const auto q = randn(rng, static_cast<size_t>(cs.G) * cs.hd);
    std::vector<float> q_hat(static_cast<size_t>(cs.G) * cs.r), bias(cs.G);
    store.project(0, 1, q.data(), cs.G, q_hat.data(), bias.data());
    // Reference over the stored (possibly f16-rounded) sketches.
    std::vector<double> ref(n);
    for (int t = 0; t < n; ++t) {
      std::vector<float> s(cs.r);
      store.read(blocks, 0, 1, t, s.data());
      double best = -1e30;
      for (int g = 0; g < cs.G; ++g) {
        double dot = bias[g];
        for (int j = 0; j < cs.r; ++j) dot += static_cast<double>(q_hat[g * cs.r + j]) * s[j];
        best = std::max(best, dot);
      }
      ref[t] = best;
    }
    std::uniform_int_distribution<int> pos(0, n - 1);
    const int b = pos(rng) / 2, e = std::max(b + 1, pos(rng));
    std::vector<float> scores(e - b);
    store.score_tokens(blocks, 0, 1, q.data(), cs.G, b, e, scores.data());
    for (int t = b; t < e; ++t)
      ASSERT_NEAR(scores[t - b], ref[t], 1e-4 * (8 + std::fabs(ref[t])))
          << "hd " << cs.hd << " r " << cs.r << " G " << cs.G << " token " << t;
    // Chunk maxima: exactly the max of the token scores (the same arithmetic per token).
    std::vector<float> all(n);
    store.score_tokens(blocks, 0, 1, q.data(), cs.G, 0, n, all.data());
    for (int C : {cs.P, cs.P / 2, 4}) {
      const int n_chunks = (n + C - 1) / C;
      std::uniform_int_distribution<int> cd(0, n_chunks - 1);
      const int c0 = cd(rng) / 2, c1 = std::max(c0 + 1, cd(rng) + 1);
      std::vector<float> cm(c1 - c0);
      store.chunk_max_scores(blocks, 0, 1, q.data(), cs.G, n, C, c0, c1, cm.data());
      for (int c = c0; c < c1; ++c) {
        const float want = *std::max_element(all.begin() + c * C, all.begin() + std::min(n, (c + 1) * C));
        ASSERT_EQ(cm[c - c0], want) << "C " << C << " chunk " << c;
      }
      // Per-head log mass: log Σ exp(α · score_g) over the chunk's tokens, per query head,
      // against a double reference over the stored sketches.
      const float alpha = 1.0f / std::sqrt(static_cast<float>(cs.hd));
      std::vector<float> hm(static_cast<size_t>(c1 - c0) * cs.G);
      store.chunk_head_mass_projected(blocks, 0, 1, q_hat.data(), bias.data(), cs.G, n, C, c0, c1, alpha, hm.data());
      for (int c = c0; c < c1; ++c)
        for (int g = 0; g < cs.G; ++g) {
          double sum = 0;
          for (int t = c * C; t < std::min(n, (c + 1) * C); ++t) {
            std::vector<float> s(cs.r);
            store.read(blocks, 0, 1, t, s.data());
            double dot = bias[g];
            for (int j = 0; j < cs.r; ++j) dot += static_cast<double>(q_hat[g * cs.r + j]) * s[j];
            sum += std::exp(static_cast<double>(alpha) * dot);
          }
          const double want = std::log(sum);
          ASSERT_NEAR(hm[static_cast<size_t>(c - c0) * cs.G + g], want, 2e-4 * (1 + std::fabs(want)))
              << "head mass, C " << C << " chunk " << c << " head " << g;
        }
    }
  }
}

TEST(SparseSketchStore, ThreadedChunkScoresEqualSerial) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, r = 16, P = 16, n = 20000, G = 3;
  const SketchBasis basis = random_basis(rng, 1, 1, hd, r, true);
  const auto blocks = shuffled_blocks(rng, (n + P - 1) / P);
  SketchStore store(cpu_sparse_kernels(), basis, P, static_cast<int32_t>(blocks.size()));
  for (int t = 0; t < n; ++t) {
    const auto k = randn(rng, hd);
    store.write(blocks, 0, 0, t, k.data());
  }
  const auto q = randn(rng, G * hd);
  const int n_chunks = (n + P - 1) / P;
  std::vector<float> serial(n_chunks), threaded(n_chunks);
  store.chunk_max_scores(blocks, 0, 0, q.data(), G, n, P, 0, n_chunks, serial.data());
  ThreadPool pool(3);
  store.chunk_max_scores(blocks, 0, 0, q.data(), G, n, P, 0, n_chunks, threaded.data(), &pool);
  EXPECT_EQ(serial, threaded);
}

}  // namespace
}  // namespace hs
