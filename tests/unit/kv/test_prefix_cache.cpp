// tests/unit/kv/test_prefix_cache.cpp — page reuse across sequences, eviction order, and
// that the free-list pool still accounts every page.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "kv/prefix_cache.h"

namespace hs {
namespace {

KvGeometry small_geometry() { return KvGeometry{1, 1, 4, 4, KvDtype::kF32}; }

TEST(BlockPoolFreeList, RetainRevivesAFreePageAndEvictHookFires) {
  BlockPool pool(3);
  std::vector<int32_t> evicted;
  pool.set_evict_hook([&](int32_t id) { evicted.push_back(id); });
  const int32_t a = *pool.allocate(), b = *pool.allocate();
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 3);
  pool.retain(b);  // revive b: it leaves the free list
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_EQ(pool.ref_count(b), 1);
  // Remaining free order: 2 (never used), a. b is not handed out.
  const int32_t x = *pool.allocate(), y = *pool.allocate();
  EXPECT_EQ(x, 2);
  EXPECT_EQ(y, a);
  EXPECT_FALSE(pool.allocate().is_ok());
  EXPECT_EQ(evicted, (std::vector<int32_t>{0, 1, 2, 0}));
}

TEST(PrefixCache, SecondSequenceReusesFullPagesOnly) {
  KvCache kv(small_geometry(), 16);
  PrefixCache cache(kv);
  std::vector<int32_t> prompt(11);
  std::iota(prompt.begin(), prompt.end(), 100);
  SeqKv a;
  PrefixChain ca;
  EXPECT_EQ(cache.match(prompt, 10, a, ca), 0);
  ASSERT_TRUE(kv.reserve(a, 11).is_ok());
  a.n_tokens = 11;
  cache.register_full_pages(prompt, 11, a, ca);
  EXPECT_EQ(cache.n_cached_pages(), 2);  // pages [0,4) and [4,8); [8,11) is partial

  SeqKv b;
  PrefixChain cb;
  EXPECT_EQ(cache.match(prompt, 10, b, cb), 8);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(kv.pool().ref_count(a.blocks[0]), 2);
  // max_tokens caps the reuse (at least one token must be computed).
  SeqKv c;
  PrefixChain cc;
  EXPECT_EQ(cache.match(std::span<const int32_t>(prompt).first(8), 7, c, cc), 4);
  // A different second page matches only the first.
  std::vector<int32_t> other = prompt;
  other[5] = 7;
  SeqKv d;
  PrefixChain cd;
  EXPECT_EQ(cache.match(other, 10, d, cd), 4);
  kv.release(a);
  kv.release(b);
  kv.release(c);
  kv.release(d);
  EXPECT_EQ(kv.pool().n_used(), 0);
  EXPECT_EQ(cache.n_cached_free_pages(), 2);  // content kept while free
}

TEST(PrefixCache, FreedPagesAreEvictedOldestFirstAndForgotten) {
  KvCache kv(small_geometry(), 4);
  PrefixCache cache(kv);
  std::vector<int32_t> p1 = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  SeqKv a;
  PrefixChain ca;
  ASSERT_TRUE(kv.reserve(a, 9).is_ok());  // 3 pages
  cache.register_full_pages(p1, 9, a, ca);
  kv.release(a);
  EXPECT_EQ(cache.n_cached_pages(), 2);
  // A new sequence needs 3 pages: takes the never-used page, then the oldest freed ones.
  SeqKv b;
  ASSERT_TRUE(kv.reserve(b, 12).is_ok());
  EXPECT_EQ(kv.pool().n_free(), 1);
  EXPECT_LE(cache.n_cached_pages(), 1);
  kv.release(b);
  SeqKv c;
  PrefixChain cc;
  // Whatever survived must still be a correct prefix: page 0 is gone, so nothing matches.
  EXPECT_EQ(cache.match(p1, 8, c, cc), 0);
}

// Random workload: sequences share prefixes, start, grow and end; the pool's accounting
// and every sequence's block table stay consistent, and all pages come back.
TEST(PrefixCache, RandomWorkloadReturnsEveryPage) {
  std::random_device rd;
  const unsigned seed = rd();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  KvCache kv(small_geometry(), 64);
  PrefixCache cache(kv);
  struct Live { std::vector<int32_t> toks; SeqKv kv; PrefixChain chain; };
  std::vector<Live> live;
  for (int it = 0; it < 2000; ++it) {
    if (live.size() < 6 && rng() % 2) {
      Live l;
      const int n = 1 + rng() % 20;
      for (int i = 0; i < n; ++i) l.toks.push_back(i < 8 ? static_cast<int32_t>(rng() % 2) : static_cast<int32_t>(rng() % 50));
      cache.match(l.toks, n - 1, l.kv, l.chain);
      if (!kv.reserve(l.kv, n).is_ok()) { kv.release(l.kv); continue; }
      l.kv.n_tokens = n;
      cache.register_full_pages(l.toks, n, l.kv, l.chain);
      live.push_back(std::move(l));
    } else if (!live.empty()) {
      const size_t i = rng() % live.size();
      kv.release(live[i].kv);
      live.erase(live.begin() + i);
    }
    int64_t refs = 0;
    for (int32_t b = 0; b < kv.pool().n_blocks(); ++b) refs += kv.pool().ref_count(b) > 0;
    ASSERT_EQ(refs, kv.pool().n_used());
  }
  for (auto& l : live) kv.release(l.kv);
  EXPECT_EQ(kv.pool().n_used(), 0);
  EXPECT_EQ(kv.pool().n_free(), 64);
}

}  // namespace
}  // namespace hs
