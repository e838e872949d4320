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

// Values written come back (exactly for f32, to f16 rounding for f16), and writes to one
// (layer, head, pos) do not disturb another.
TEST(KvCache, WriteReadRoundTripBothDtypes) {
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16}) {
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
          for (int d = 0; d < 8; ++d) {
            const float tol = dt == KvDtype::kF32 ? 0.0f : 1e-3f * (1 + std::fabs(at(l, h, p)[d]));
            ASSERT_NEAR(k[d], at(l, h, p)[d], tol);
            ASSERT_NEAR(v[d], at(l, h, p)[8 + d], tol);
          }
        }
    kv.release(s);
  }
  EXPECT_EQ(parse_kv_dtype("f16").value(), KvDtype::kF16);
  EXPECT_FALSE(parse_kv_dtype("int3").is_ok());
}

}  // namespace
}  // namespace hs
