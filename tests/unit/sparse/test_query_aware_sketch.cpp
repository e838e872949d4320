// tests/unit/sparse/test_query_aware_sketch.cpp — the query-aware (bilinear) sketch fit: its
// mean squared score error against the PCA fit on anisotropic keys and queries, exact scores
// at rank = head_dim (also through SketchStore::project), and its file round trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "backend/cpu_sparse_kernels.h"
#include "formats/safetensors.h"
#include "sparse/sketch_basis.h"
#include "sparse/sketch_fitter.h"
#include "sparse/sketch_store.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::random_orthonormal;
using test::sparse_seed;

// n rows x = mean + U diag(sd) z, z ~ N(0, I): [n][hd].
std::vector<float> anisotropic(std::mt19937& rng, int n, const std::vector<float>& U, const std::vector<float>& sd,
                               const std::vector<float>& mean) {
  const int hd = static_cast<int>(sd.size());
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(n) * hd);
  for (int t = 0; t < n; ++t) {
    float* row = x.data() + static_cast<size_t>(t) * hd;
    for (int d = 0; d < hd; ++d) row[d] = mean.empty() ? 0.0f : mean[d];
    for (int j = 0; j < hd; ++j) {
      const float z = sd[j] * nd(rng);
      for (int d = 0; d < hd; ++d) row[d] += z * U[d * hd + j];
    }
  }
  return x;
}

// Mean over all (query, key) pairs of (q·(k − mu) − (Aᵀq)·(Bᵀ(k − mu)))², head (0, 0).
double mean_sq_score_error(const SketchBasis& b, const std::vector<float>& qs, const std::vector<float>& ks) {
  const int hd = b.head_dim, r = b.rank;
  const float *A = b.A(0, 0), *B = b.B(0, 0), *mu = b.mu(0, 0);
  const size_t nq = qs.size() / hd, nk = ks.size() / hd;
  // u_j = (I − A Bᵀ)(k_j − mu): the error of a pair is q·u_j.
  std::vector<double> u(nk * hd), c(hd), s(r);
  for (size_t j = 0; j < nk; ++j) {
    for (int d = 0; d < hd; ++d) c[d] = static_cast<double>(ks[j * hd + d]) - mu[d];
    std::fill(s.begin(), s.end(), 0.0);
    for (int d = 0; d < hd; ++d)
      for (int i = 0; i < r; ++i) s[i] += c[d] * B[d * r + i];
    for (int d = 0; d < hd; ++d) {
      double a = 0;
      for (int i = 0; i < r; ++i) a += A[d * r + i] * s[i];
      u[j * hd + d] = c[d] - a;
    }
  }
  double err = 0;
  for (size_t i = 0; i < nq; ++i)
    for (size_t j = 0; j < nk; ++j) {
      double e = 0;
      for (int d = 0; d < hd; ++d) e += qs[i * hd + d] * u[j * hd + d];
      err += e * e;
    }
  return err / static_cast<double>(nq * nk);
}

// The same error in expectation over the distributions themselves (k = mean + Uk diag(sk) z,
// q = Uq diag(sq) z'): E[(qᵀR(k − mu))²] = Σ_i sq_i² E[(uq_iᵀ R (k − mu))²] with R = I − ABᵀ and
// k − mu = Uk diag(sk) z + (mean − mu).
double population_score_error(const SketchBasis& b, const std::vector<float>& Uk, const std::vector<float>& sk,
                              const std::vector<float>& mean, const std::vector<float>& Uq,
                              const std::vector<float>& sq) {
  const int hd = b.head_dim, r = b.rank;
  const float *A = b.A(0, 0), *B = b.B(0, 0), *mu = b.mu(0, 0);
  auto apply_r = [&](const std::vector<double>& x) {  // R x
    std::vector<double> s(r, 0.0), y(x);
    for (int d = 0; d < hd; ++d)
      for (int i = 0; i < r; ++i) s[i] += x[d] * B[d * r + i];
    for (int d = 0; d < hd; ++d)
      for (int i = 0; i < r; ++i) y[d] -= A[d * r + i] * s[i];
    return y;
  };
  std::vector<std::vector<double>> cols;  // R applied to each key direction (scaled) and the mean offset
  for (int j = 0; j < hd; ++j) {
    std::vector<double> x(hd);
    for (int d = 0; d < hd; ++d) x[d] = static_cast<double>(sk[j]) * Uk[d * hd + j];
    cols.push_back(apply_r(x));
  }
  std::vector<double> delta(hd);
  for (int d = 0; d < hd; ++d) delta[d] = static_cast<double>(mean[d]) - mu[d];
  cols.push_back(apply_r(delta));
  double err = 0;
  for (int i = 0; i < hd; ++i)
    for (const auto& y : cols) {
      double dot = 0;
      for (int d = 0; d < hd; ++d) dot += Uq[d * hd + i] * y[d];
      err += static_cast<double>(sq[i]) * sq[i] * dot * dot;
    }
  return err;
}

struct Fits {
  SketchBasis pca, qa;
};

Fits fit_both(const std::vector<float>& ks, const std::vector<float>& qs, int hd, int rank) {
  SketchFitter f(1, 1, hd);
  const int64_t nk = static_cast<int64_t>(ks.size() / hd), nq = static_cast<int64_t>(qs.size() / hd);
  f.add_keys(0, 0, ks.data(), nk, hd);
  // Two calls, as for two query heads of one GQA group.
  f.add_queries(0, 0, qs.data(), nq / 2, hd);
  f.add_queries(0, 0, qs.data() + (nq / 2) * hd, nq - nq / 2, hd);
  EXPECT_EQ(f.n_queries(0, 0), nq);
  auto pca = f.fit({.rank = rank});
  auto qa = f.fit({.rank = rank, .query_aware = true});
  EXPECT_TRUE(pca.is_ok()) << pca.status().to_string();
  EXPECT_TRUE(qa.is_ok()) << qa.status().to_string();
  return {std::move(*pca), std::move(*qa)};
}

// Queries strongest where keys vary least: PCA spends its rank on the wrong directions.
TEST(SparseQueryAwareSketch, BeatsPcaOnAnisotropicQueriesAndKeys) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 24, rank = 4, n = 1500;
  // Random spectra in general position, and the planted adversarial case.
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    const auto Uk = random_orthonormal(rng, hd, hd);
    const auto Uq = variant == 2 ? Uk : random_orthonormal(rng, hd, hd);
    std::vector<float> sk(hd), sq(hd);
    std::uniform_real_distribution<float> ud(0.05f, 3.0f);
    for (int j = 0; j < hd; ++j) {
      if (variant == 2) {  // keys: large in 0..7, unit in 8..15, small after; queries the reverse
        sk[j] = j < 8 ? 2.0f : j < 16 ? 1.0f : 0.1f;
        sq[j] = j < 8 ? 0.1f : j < 16 ? 5.0f : 0.5f;
      } else {
        sk[j] = ud(rng) * std::exp(-0.15f * j);
        sq[j] = ud(rng);
      }
    }
    const auto mean = test::randn(rng, hd, 2.0f);
    const auto ks = anisotropic(rng, n, Uk, sk, mean);
    const auto qs = anisotropic(rng, n, Uq, sq, {});
    const Fits fits = fit_both(ks, qs, hd, rank);
    EXPECT_TRUE(fits.qa.query_aware);
    EXPECT_FALSE(fits.pca.query_aware);
    EXPECT_EQ(fits.qa.mean, fits.pca.mean);  // both centre on the key mean
    // In sample the query-aware fit minimises exactly this error (float storage aside).
    const double e_pca = mean_sq_score_error(fits.pca, qs, ks);
    const double e_qa = mean_sq_score_error(fits.qa, qs, ks);
    EXPECT_LE(e_qa, e_pca * (1.0 + 1e-4)) << "pca " << e_pca << " query-aware " << e_qa;
    // And over the distributions the samples came from (no sampling noise in the check).
    const double h_pca = population_score_error(fits.pca, Uk, sk, mean, Uq, sq);
    const double h_qa = population_score_error(fits.qa, Uk, sk, mean, Uq, sq);
    if (variant == 2) {
      // Score variance per direction: 0.04 (0..7), 25 (8..15), 0.0025 (16..): PCA keeps 4 of
      // the first group, the query-aware fit 4 of the second; error ~200 vs ~100.
      EXPECT_LT(e_qa, 0.7 * e_pca);
      EXPECT_LT(h_qa, 0.7 * h_pca);
      EXPECT_GT(fits.qa.energy[0][0], 0.4f);
      EXPECT_LT(fits.pca.energy[0][0], 0.6f);  // PCA's energy is its share of key variance
    } else {
      EXPECT_LE(h_qa, h_pca * 1.05) << "population: pca " << h_pca << " query-aware " << h_qa;
    }
  }
}

TEST(SparseQueryAwareSketch, FullRankIsExact) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 16, n = 800, G = 3;
  const auto Uk = random_orthonormal(rng, hd, hd), Uq = random_orthonormal(rng, hd, hd);
  std::vector<float> sk(hd), sq(hd);
  for (int j = 0; j < hd; ++j) {
    sk[j] = 3.0f * std::exp(-0.3f * j);  // strongly anisotropic: B = Σk^-½ V is far from orthonormal
    sq[j] = 0.2f + j * 0.3f;
  }
  const auto mean = test::randn(rng, hd, 2.0f);
  const Fits fits = fit_both(anisotropic(rng, n, Uk, sk, mean), anisotropic(rng, n, Uq, sq, {}), hd, hd);
  const SketchBasis& b = fits.qa;
  EXPECT_TRUE(b.validate().is_ok());
  SketchBasis as_plain = b;  // B itself is far from orthonormal: only query-aware skips that check
  as_plain.query_aware = false;
  as_plain.query_basis.clear();
  EXPECT_FALSE(as_plain.validate().is_ok());
  EXPECT_NEAR(b.energy[0][0], 1.0f, 1e-6f);
  const SketchStore store(cpu_sparse_kernels(), b, 16, 1);
  const auto ks = anisotropic(rng, 50, Uk, sk, mean);
  const auto qs = anisotropic(rng, G, Uq, sq, {});
  std::vector<float> q_hat(static_cast<size_t>(G) * hd), bias(G);
  store.project(0, 0, qs.data(), G, q_hat.data(), bias.data());
  for (int t = 0; t < 50; ++t) {
    const float* k = ks.data() + static_cast<size_t>(t) * hd;
    std::vector<double> s(hd, 0.0);  // Bᵀ(k − mu)
    for (int d = 0; d < hd; ++d)
      for (int j = 0; j < hd; ++j) s[j] += (static_cast<double>(k[d]) - b.mu(0, 0)[d]) * b.B(0, 0)[d * hd + j];
    for (int g = 0; g < G; ++g) {
      double exact = 0, norm = 0, sketched = bias[g];
      for (int d = 0; d < hd; ++d) {
        exact += static_cast<double>(qs[g * hd + d]) * k[d];
        norm += std::fabs(static_cast<double>(qs[g * hd + d]) * k[d]);
      }
      for (int j = 0; j < hd; ++j) sketched += q_hat[g * hd + j] * s[j];
      EXPECT_NEAR(sketched, exact, 1e-4 * (norm + 1.0)) << "token " << t << " head " << g;
    }
  }
}

TEST(SparseQueryAwareSketch, FileRoundTripAndChecks) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 16, rank = 4;
  SketchFitter f(3, 2, hd);
  std::vector<float> sk(hd), sq(hd, 1.0f);
  for (int j = 0; j < hd; ++j) sk[j] = 2.0f * std::exp(-0.2f * j);
  for (int l : {0, 2})  // layer 1 has no attention
    for (int h = 0; h < 2; ++h) {
      const auto ks = anisotropic(rng, 300, random_orthonormal(rng, hd, hd), sk, test::randn(rng, hd));
      const auto qs = anisotropic(rng, 300, random_orthonormal(rng, hd, hd), sq, {});
      f.add_keys(l, h, ks.data(), 300, hd);
      f.add_queries(l, h, qs.data(), 300, hd);
    }
  auto fit = f.fit({.rank = rank, .query_aware = true});
  ASSERT_TRUE(fit.is_ok()) << fit.status().to_string();
  SketchBasis b = std::move(*fit);
  b.model_name = "qa-model";
  EXPECT_TRUE(b.has_layer(0));
  EXPECT_FALSE(b.has_layer(1));
  EXPECT_TRUE(b.query_basis[1].empty());
  const std::string path =
      (std::filesystem::temp_directory_path() / ("hs_qa_sketch_" + std::to_string(seed) + ".safetensors")).string();
  ASSERT_TRUE(b.save(path).is_ok());
  {
    auto file = safetensors::File::open(path);
    ASSERT_TRUE(file.is_ok());
    EXPECT_EQ(*(*file)->get_metadata("query_aware"), "true");
    const auto* t = (*file)->find("sketch.layers.2.query_basis");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, hd, rank}));
    EXPECT_EQ((*file)->find("sketch.layers.1.query_basis"), nullptr);
  }
  auto loaded = SketchBasis::load(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->query_aware);
  EXPECT_EQ(loaded->basis, b.basis);
  EXPECT_EQ(loaded->query_basis, b.query_basis);
  EXPECT_EQ(loaded->mean, b.mean);
  EXPECT_EQ(loaded->energy, b.energy);
  EXPECT_EQ(loaded->model_name, "qa-model");
  EXPECT_EQ(loaded->A(2, 1), loaded->query_basis[2].data() + hd * rank);
  EXPECT_TRUE(loaded->check_geometry(3, 2, hd, {true, false, true}).is_ok());

  // A plain basis has no query file entries and A = B.
  SketchFitter plain(1, 1, hd);
  const auto ks = anisotropic(rng, 200, random_orthonormal(rng, hd, hd), sk, {});
  plain.add_keys(0, 0, ks.data(), 200, hd);
  auto pca = plain.fit({.rank = rank});
  ASSERT_TRUE(pca.is_ok());
  EXPECT_EQ(pca->A(0, 0), pca->B(0, 0));
  // Query-aware without queries is an error.
  EXPECT_FALSE(plain.fit({.rank = rank, .query_aware = true}).is_ok());

  // Structure checks: A missing or of the wrong size, or given without query_aware.
  SketchBasis bad = *loaded;
  bad.query_basis[0].pop_back();
  EXPECT_FALSE(bad.validate().is_ok());
  bad = *loaded;
  bad.query_basis[0][3] = NAN;
  EXPECT_FALSE(bad.validate().is_ok());
  bad = *loaded;
  bad.query_aware = false;
  EXPECT_FALSE(bad.validate().is_ok());  // query bases without the flag
  bad.query_basis.clear();
  EXPECT_FALSE(bad.validate().is_ok());  // and B alone is not orthonormal
}

}  // namespace
}  // namespace hs
