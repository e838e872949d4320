// tests/unit/kv/test_kv_cache.cpp — page pool accounting and page addressing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "kv/kv_cache.h"

namespace hs {
namespace {

TEST(BlockPool, AllocateReleaseAndRefCounts) {
  BlockPool pool(3);
  auto a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_FALSE(pool.allocate().is_ok());
  pool.retain(*a);
  pool.release(*a);
  EXPECT_EQ(pool.n_free(), 0);
  pool.release(*a);
  EXPECT_EQ(pool.n_free(), 1);
  pool.release(*b);
  pool.release(*c);
  EXPECT_EQ(pool.n_used(), 0);
  // FIFO reuse: the first freed page comes back first.
  EXPECT_EQ(*pool.allocate(), *a);
}

TEST(KvCache, ReserveAddressesDistinctRowsAndReleases) {
  KvGeometry g{2, 2, 4, 4};
  KvCache kv(g, 8);
  SeqKv s1, s2;
  ASSERT_TRUE(kv.reserve(s1, 10).is_ok());  // 3 pages
  ASSERT_TRUE(kv.reserve(s2, 4).is_ok());   // 1 page
  EXPECT_EQ(s1.blocks.size(), 3u);
  EXPECT_EQ(kv.pool().n_used(), 4);
  std::set<const void*> rows;
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 10; ++p) rows.insert(kv.row(s1, layer, h, p));
      for (int p = 0; p < 4; ++p) rows.insert(kv.row(s2, layer, h, p));
    }
  EXPECT_EQ(rows.size(), 2u * 2 * 14);  // no two (layer, head, seq, pos) share storage
  // Within a page, one head's tokens are contiguous rows of [K | V].
  EXPECT_EQ(static_cast<const float*>(kv.row(s1, 0, 1, 1)) - static_cast<const float*>(kv.row(s1, 0, 1, 0)),
            2 * g.head_dim);
  EXPECT_FALSE(kv.reserve(s2, 100).is_ok());  // only 4 pages left: needs 25
  kv.release(s1);
  kv.release(s2);
  EXPECT_EQ(kv.pool().n_used(), 0);
  EXPECT_TRUE(s1.blocks.empty());
}

// fill_random (the bench's synthetic context) fills host pages of every dtype with finite values,
// and leaves a cache without host pages (a device backend's) alone instead of writing through
// its empty page storage (it crashed for fp8 on the GPU before).
TEST(KvCache, FillRandomEveryDtypeWithAndWithoutHostPages) {
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kFp8}) {
    KvGeometry g{2, 2, 8, 4, dt};
    std::mt19937 rng(7);
    KvCache no_pages(g, 4, KvCache::kDefaultMaxLeases, /*host_pages=*/false);
    EXPECT_FALSE(no_pages.has_host_pages());
    no_pages.fill_random(rng);
    KvCache kv(g, 4);
    kv.fill_random(rng);
    SeqKv s;
    ASSERT_TRUE(kv.reserve(s, 16).is_ok());
    s.n_tokens = 16;
    float k[8], v[8];
    double sum_sq = 0;
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        for (int p = 0; p < 16; ++p) {
          kv.read(s, l, h, p, k, v);
          for (int d = 0; d < 8; ++d) {
            ASSERT_TRUE(std::isfinite(k[d]) && std::isfinite(v[d])) << kv_dtype_name(dt);
            sum_sq += k[d] * k[d] + v[d] * v[d];
          }
        }
    EXPECT_GT(sum_sq / (2 * 2 * 16 * 16), 0.3) << kv_dtype_name(dt) << ": pages not filled";
    kv.release(s);
  }
}

// Values written come back (exactly for f32, to f16 rounding for f16), and writes to one
// (layer, head, pos) do not disturb another.
TEST(KvCache, WriteReadRoundTripEveryDtype) {
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kFp8}) {
    KvGeometry g{2, 2, 8, 4, dt};
    KvCache kv(g, 4);
    SeqKv s;
    ASSERT_TRUE(kv.reserve(s, 12).is_ok());
    std::mt19937 rng(std::random_device{}());
    std::normal_distribution<float> nd;
    std::vector<float> all(2 * 2 * 12 * 16);
    for (auto& v : all) v = nd(rng);
    auto at = [&](int l, int h, int p) { return all.data() + ((l * 2 + h) * 12 + p) * 16; };
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        for (int p = 0; p < 12; ++p) kv.write(s, l, h, p, at(l, h, p), at(l, h, p) + 8);
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        for (int p = 0; p < 12; ++p) {
          float k[8], v[8];
          kv.read(s, l, h, p, k, v);
          // Per-row bounds: f16 / bf16 relative rounding; int8 half a step of max|x| / 127;
          // int4 half a step of (max − min) / 15 (plus the f16 rounding of the scales).
          for (int kvi = 0; kvi < 2; ++kvi) {
            const float* x = at(l, h, p) + 8 * kvi;
            const float* y = kvi == 0 ? k : v;
            float mx = -1e30f, mn = 1e30f, amax = 0;
            for (int d = 0; d < 8; ++d) mx = std::max(mx, x[d]), mn = std::min(mn, x[d]), amax = std::max(amax, std::fabs(x[d]));
            for (int d = 0; d < 8; ++d) {
              float tol = 0.0f;
              switch (dt) {
                case KvDtype::kF32: tol = 0.0f; break;
                case KvDtype::kF16: tol = 1e-3f * (1 + std::fabs(x[d])); break;
                case KvDtype::kBF16: tol = 8e-3f * (1 + std::fabs(x[d])); break;
                case KvDtype::kInt8: tol = 0.51f * amax / 127 + 2e-3f * amax; break;
                case KvDtype::kInt4: tol = 0.51f * (mx - mn) / 15 + 2e-3f * (mx - mn) + 1e-3f * std::fabs(mn); break;
                case KvDtype::kFp8: tol = 0x1p-4f * std::fabs(x[d]) + 1e-5f * amax; break;  // 3 mantissa bits
              }
              ASSERT_NEAR(y[d], x[d], tol) << kv_dtype_name(dt) << " d " << d;
            }
          }
        }
    kv.release(s);
  }
  EXPECT_EQ(parse_kv_dtype("f16").value(), KvDtype::kF16);
  EXPECT_EQ(parse_kv_dtype("auto").value(), KvDtype::kF16);
  EXPECT_EQ(parse_kv_dtype("int4").value(), KvDtype::kInt4);
  EXPECT_FALSE(parse_kv_dtype("int3").is_ok());
}

}  // namespace
}  // namespace hs
