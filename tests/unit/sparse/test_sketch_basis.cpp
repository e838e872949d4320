// tests/unit/sparse/test_sketch_basis.cpp — Jacobi eigen solver, PCA fit on planted
// subspaces, the sketch file round trip and its checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "formats/safetensors.h"
#include "sparse/sketch_basis.h"
#include "sparse/sketch_fitter.h"
#include "sparse/sym_eigen.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::random_orthonormal;
using test::sparse_seed;

std::string temp_path(const std::string& stem, unsigned seed) {
  return (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(seed) + ".safetensors")).string();
}

TEST(SparseEigen, RecoversPlantedSpectrum) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  for (int n : {1, 2, 7, 64, 128}) {
    const std::vector<float> qf = random_orthonormal(rng, n, n);
    std::vector<double> lambda(n);
    std::uniform_real_distribution<double> ud(-5.0, 10.0);
    for (double& l : lambda) l = ud(rng);
    std::vector<double> a(static_cast<size_t>(n) * n, 0.0);  // Q diag(lambda) Qᵀ
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c)
        for (int k = 0; k < n; ++k) a[r * n + c] += static_cast<double>(qf[r * n + k]) * lambda[k] * qf[c * n + k];
    auto eig = symmetric_eigen(a, n);
    ASSERT_TRUE(eig.is_ok()) << eig.status().to_string();
    std::sort(lambda.rbegin(), lambda.rend());
    for (int j = 0; j < n; ++j) EXPECT_NEAR(eig->values[j], lambda[j], 1e-5) << "n=" << n << " j=" << j;
    // A v = lambda v and V orthonormal.
    for (int j = 0; j < n; ++j) {
      for (int r = 0; r < n; ++r) {
        double av = 0;
        for (int c = 0; c < n; ++c) av += a[r * n + c] * eig->vectors[c * n + j];
        EXPECT_NEAR(av, eig->values[j] * eig->vectors[r * n + j], 1e-5);
      }
      for (int k = j; k < n; ++k) {
        double dot = 0;
        for (int r = 0; r < n; ++r) dot += eig->vectors[r * n + j] * eig->vectors[r * n + k];
        EXPECT_NEAR(dot, j == k ? 1.0 : 0.0, 1e-9);
      }
    }
    EXPECT_LT(eig->sweeps, 20) << "n=" << n;
  }
  EXPECT_FALSE(symmetric_eigen({1.0, NAN, NAN, 1.0}, 2).is_ok());
  EXPECT_FALSE(symmetric_eigen({1.0, 2.0}, 2).is_ok());
}

// cos of the principal angles between span(U) and span(B), both [n][r] orthonormal: the
// singular values of UᵀB, i.e. sqrt of the eigenvalues of (UᵀB)ᵀ(UᵀB).
std::vector<double> principal_cosines(const float* U, const float* B, int n, int r) {
  std::vector<double> m(static_cast<size_t>(r) * r, 0.0);  // UᵀB
  for (int i = 0; i < r; ++i)
    for (int j = 0; j < r; ++j)
      for (int d = 0; d < n; ++d) m[i * r + j] += static_cast<double>(U[d * r + i]) * B[d * r + j];
  std::vector<double> mtm(static_cast<size_t>(r) * r, 0.0);
  for (int i = 0; i < r; ++i)
    for (int j = 0; j < r; ++j)
      for (int k = 0; k < r; ++k) mtm[i * r + j] += m[k * r + i] * m[k * r + j];
  auto eig = symmetric_eigen(mtm, r);
  std::vector<double> out;
  for (double v : eig->values) out.push_back(std::sqrt(std::max(v, 0.0)));
  return out;
}

// Keys mu + U z + noise with z ~ N(0, diag(scales)) in a planted rank-r subspace U.
void add_planted_keys(SketchFitter& fitter, std::mt19937& rng, int layer, int head, const std::vector<float>& U,
                      const std::vector<float>& mu, int hd, int r, int n, float noise) {
  std::normal_distribution<float> nd;
  std::vector<float> keys(static_cast<size_t>(n) * hd);  // [n][head_dim]
  for (int t = 0; t < n; ++t) {
    float* k = keys.data() + static_cast<size_t>(t) * hd;
    for (int d = 0; d < hd; ++d) k[d] = mu[d] + noise * nd(rng);
    for (int j = 0; j < r; ++j) {
      const float z = nd(rng) * (1.0f + 2.0f * j / r);
      for (int d = 0; d < hd; ++d) k[d] += z * U[d * r + j];
    }
  }
  // Two calls with an odd split to exercise accumulation across calls and a row stride.
  fitter.add_keys(layer, head, keys.data(), n / 3, hd);
  fitter.add_keys(layer, head, keys.data() + static_cast<size_t>(n / 3) * hd, n - n / 3, hd);
}

TEST(SparseSketchFit, RecoversPlantedSubspace) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  struct Case {
    int n_layer, n_heads, hd, r;
    bool centered;
  };
  for (const Case& cs : {Case{2, 3, 64, 16, true}, Case{1, 2, 64, 16, false}, Case{1, 1, 256, 64, true}}) {
    SketchFitter fitter(cs.n_layer, cs.n_heads, cs.hd);
    std::vector<std::vector<float>> Us, mus;
    for (int l = 0; l < cs.n_layer; ++l)
      for (int h = 0; h < cs.n_heads; ++h) {
        Us.push_back(random_orthonormal(rng, cs.hd, cs.r));
        // A large mean (as real keys have) only for the centred fit; uncentred PCA would
        // spend one direction on it.
        mus.push_back(cs.centered ? test::randn(rng, cs.hd, 3.0f) : std::vector<float>(cs.hd, 0.0f));
        add_planted_keys(fitter, rng, l, h, Us.back(), mus.back(), cs.hd, cs.r, 3000, 0.01f);
      }
    SketchFitter::Options opt;
    opt.centered = cs.centered;
    ThreadPool pool(2);
    auto fit = fitter.fit(opt, &pool);
    ASSERT_TRUE(fit.is_ok()) << fit.status().to_string();
    EXPECT_EQ(fit->rank, cs.hd / 4);  // default rank
    EXPECT_EQ(fit->centered, cs.centered);
    for (int l = 0; l < cs.n_layer; ++l)
      for (int h = 0; h < cs.n_heads; ++h) {
        const size_t i = static_cast<size_t>(l) * cs.n_heads + h;
        for (double c : principal_cosines(Us[i].data(), fit->B(l, h), cs.hd, cs.r))
          EXPECT_GT(c, 1.0 - 1e-4) << "layer " << l << " head " << h;
        EXPECT_GT(fit->energy[l][h], 0.99f);
        // The fitted mean is a sample mean of 3000 keys whose variance along any dimension is
        // at most 9 (the planted directions' largest scale squared): its error is at most
        // ~0.055 per sd, so 0.3 (5.5 sd) never fails by chance while a fit that ignored the
        // mean (N(0, 3) per dimension) is far off.
        for (int d = 0; d < cs.hd; ++d) EXPECT_NEAR(fit->mu(l, h)[d], mus[i][d], 0.3f);
      }
  }
}

TEST(SparseSketchFit, LayersWithoutKeysHaveNoBasis) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  SketchFitter fitter(3, 1, 32);
  auto keys = test::randn(rng, 100 * 32);
  fitter.add_keys(1, 0, keys.data(), 100, 32);
  auto fit = fitter.fit({.rank = 8});
  ASSERT_TRUE(fit.is_ok()) << fit.status().to_string();
  EXPECT_FALSE(fit->has_layer(0));
  EXPECT_TRUE(fit->has_layer(1));
  EXPECT_FALSE(fit->has_layer(2));
  EXPECT_TRUE(fit->check_geometry(3, 1, 32, {false, true, false}).is_ok());
  EXPECT_FALSE(fit->check_geometry(3, 1, 32).is_ok());  // every layer wanted
  SketchFitter partial(1, 2, 32);
  partial.add_keys(0, 0, keys.data(), 100, 32);
  EXPECT_FALSE(partial.fit({}).is_ok());  // head 1 saw no keys
  EXPECT_FALSE(fitter.fit({.rank = 33}).is_ok());
}

TEST(SparseSketchBasis, SaveLoadRoundTrip) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  SketchBasis b = SketchBasis::zeros(3, 2, 64, 16);
  b.post_rope = false;
  b.model_name = "test-model";
  b.model_sha256 = "abc123";
  b.energy.assign(3, {});
  for (int l = 0; l < 3; ++l) {
    if (l == 1) {  // a layer without attention
      b.basis[l].clear();
      b.mean[l].clear();
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      const auto U = random_orthonormal(rng, 64, 16);
      std::copy(U.begin(), U.end(), b.basis[l].begin() + h * 64 * 16);
    }
    b.mean[l] = test::randn(rng, 2 * 64);
    b.energy[l] = {0.9f, 0.8f};
  }
  ASSERT_TRUE(b.validate().is_ok());
  const std::string path = temp_path("hs_sketch", seed);
  ASSERT_TRUE(b.save(path).is_ok());
  auto loaded = SketchBasis::load(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  {
    auto f = safetensors::File::open(path);
    ASSERT_TRUE(f.is_ok());
    const auto* t = (*f)->find("sketch.layers.0.basis");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 64, 16}));
    EXPECT_EQ(*(*f)->get_metadata("rank"), "16");
    EXPECT_EQ(*(*f)->get_metadata("post_rope"), "false");
  }
  std::filesystem::remove(path);
  EXPECT_EQ(loaded->n_layer, 3);
  EXPECT_EQ(loaded->n_kv_heads, 2);
  EXPECT_EQ(loaded->head_dim, 64);
  EXPECT_EQ(loaded->rank, 16);
  EXPECT_FALSE(loaded->post_rope);
  EXPECT_TRUE(loaded->centered);
  EXPECT_EQ(loaded->model_name, "test-model");
  EXPECT_EQ(loaded->model_sha256, "abc123");
  EXPECT_EQ(loaded->basis, b.basis);
  EXPECT_EQ(loaded->mean, b.mean);
  EXPECT_EQ(loaded->energy, b.energy);
  EXPECT_TRUE(loaded->check_geometry(3, 2, 64, {true, false, true}).is_ok());
  EXPECT_FALSE(loaded->check_geometry(3, 2, 64).is_ok());
  EXPECT_FALSE(loaded->check_geometry(4, 2, 64, {true, false, true}).is_ok());
  EXPECT_FALSE(loaded->check_geometry(3, 1, 64, {true, false, true}).is_ok());
  EXPECT_FALSE(loaded->check_geometry(3, 2, 128, {true, false, true}).is_ok());
}

TEST(SparseSketchBasis, LoadRejectsBadFiles) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const std::string path = temp_path("hs_sketch_bad", seed);
  auto write = [&](const std::vector<float>& basis, std::vector<int64_t> shape, std::map<std::string, std::string> meta) {
    const std::vector<float> mean(2 * 8, 0.0f);
    std::vector<safetensors::TensorWrite> ts = {
        {"sketch.layers.0.basis", safetensors::Dtype::kF32, std::move(shape),
         {reinterpret_cast<const uint8_t*>(basis.data()), basis.size() * 4}},
        {"sketch.layers.0.mean", safetensors::Dtype::kF32, {2, 8},
         {reinterpret_cast<const uint8_t*>(mean.data()), mean.size() * 4}}};
    ASSERT_TRUE(safetensors::write(path, ts, meta).is_ok());
  };
  std::map<std::string, std::string> meta = {{"format", "hindsight.sketch"}, {"version", "1"}, {"n_layer", "1"},
                                             {"n_kv_heads", "2"},            {"head_dim", "8"}, {"rank", "4"},
                                             {"post_rope", "true"},          {"centered", "true"}};
  std::vector<float> good;
  for (int h = 0; h < 2; ++h) {
    const auto U = random_orthonormal(rng, 8, 4);
    good.insert(good.end(), U.begin(), U.end());
  }
  auto expect_load_error = [&](const char* needle) {
    auto r = SketchBasis::load(path);
    ASSERT_FALSE(r.is_ok()) << "expected: " << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  };
  write(good, {2, 8, 4}, meta);
  ASSERT_TRUE(SketchBasis::load(path).is_ok());
  auto not_sketch = meta;
  not_sketch["format"] = "pt";
  write(good, {2, 8, 4}, not_sketch);
  expect_load_error("not a hindsight sketch file");
  write(good, {2, 4, 8}, meta);
  expect_load_error("has shape [2, 4, 8], expected [2, 8, 4]");
  auto bad_rank = meta;
  bad_rank["rank"] = "x4";
  write(good, {2, 8, 4}, bad_rank);
  expect_load_error("not a non-negative integer");
  auto too_big = meta;
  too_big["rank"] = "9";
  write(good, {2, 8, 4}, too_big);
  expect_load_error("bad geometry");
  std::vector<float> skewed = good;
  skewed[0] += 0.5f;
  write(skewed, {2, 8, 4}, meta);
  expect_load_error("not orthonormal");
  std::filesystem::remove(path);
  EXPECT_EQ(SketchBasis::load(path).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace hs
