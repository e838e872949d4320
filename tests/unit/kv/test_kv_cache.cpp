// tests/unit/kv/test_kv_cache.cpp — page pool accounting and page addressing.
#include <gtest/gtest.h>

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
  std::set<const float*> rows;
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 10; ++p) rows.insert(kv.k_at(s1, layer, h, p));
      for (int p = 0; p < 4; ++p) rows.insert(kv.k_at(s2, layer, h, p));
    }
  EXPECT_EQ(rows.size(), 2u * 2 * 14);  // no two (layer, head, seq, pos) share storage
  // Within a page, one head's tokens are contiguous rows of [K | V].
  EXPECT_EQ(kv.k_at(s1, 0, 1, 1) - kv.k_at(s1, 0, 1, 0), 2 * g.head_dim);
  EXPECT_FALSE(kv.reserve(s2, 100).is_ok());  // only 4 pages left: needs 25
  kv.release(s1);
  kv.release(s2);
  EXPECT_EQ(kv.pool().n_used(), 0);
  EXPECT_TRUE(s1.blocks.empty());
}

}  // namespace
}  // namespace hs
