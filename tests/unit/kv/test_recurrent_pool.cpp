// tests/unit/kv/test_recurrent_pool.cpp — recurrent-state slots: one per live sequence, found
// again through its lease, freed by KvCache::release (also when another lease listener was
// there first, which keeps being told), refused when all are held; a storm of random
// acquire / release leaves the pool and the leases at baseline; checkpoints are overwritten by
// the two-class LRU (unshared first, shared capped at kMaxSharedShare of the slots) and restore
// what was saved.
#include <gtest/gtest.h>

#include <random>

#include "kv/recurrent_pool.h"

namespace hs {
namespace {

struct CountingListener : LeaseListener {
  int ended = 0;
  void on_lease_end(const SeqLease&) override { ++ended; }
};

TEST(RecurrentPool, SlotsFollowLeases) {
  KvCache kv(KvGeometry{1, 1, 8, 16, KvDtype::kF32}, 8, /*max_leases=*/16);
  CountingListener before;
  kv.add_lease_listener(&before);
  {
    RecurrentPool pool(kv, 2);
    SeqKv a, b, c;
    bool fresh = false;
    auto sa = pool.slot(a, &fresh);
    ASSERT_TRUE(sa.is_ok());
    EXPECT_TRUE(fresh);
    auto again = pool.slot(a, &fresh);
    ASSERT_TRUE(again.is_ok());
    EXPECT_FALSE(fresh);
    EXPECT_EQ(*again, *sa);
    auto sb = pool.slot(b);
    ASSERT_TRUE(sb.is_ok());
    EXPECT_NE(*sb, *sa);
    EXPECT_FALSE(pool.slot(c).is_ok());  // both held
    kv.release(c);                       // its lease (taken by the failed call) ends too
    kv.release(a);
    EXPECT_EQ(pool.n_used(), 1);
    EXPECT_EQ(before.ended, 2);  // the listener that was there first is still told
    auto sc = pool.slot(c, &fresh);
    ASSERT_TRUE(sc.is_ok());
    EXPECT_TRUE(fresh);
    EXPECT_EQ(*sc, *sa);  // the freed slot
    kv.release(b);
    kv.release(c);
    EXPECT_EQ(pool.n_used(), 0);
  }
  EXPECT_TRUE(kv.has_lease_listener(&before));  // the pool removed only itself when it died
  EXPECT_EQ(kv.n_lease_listeners(), 1u);
  kv.remove_lease_listener(&before);
}

TEST(RecurrentPool, StormReturnsToBaseline) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  KvCache kv(KvGeometry{1, 1, 8, 16, KvDtype::kF32}, 64, /*max_leases=*/32);
  RecurrentPool pool(kv, 6);
  std::vector<SeqKv> seqs(24);
  std::vector<int32_t> slot_of(24, -1);
  for (int it = 0; it < 5000; ++it) {
    const int i = static_cast<int>(rng() % seqs.size());
    if (rng() % 3 == 0) {
      kv.release(seqs[i]);
      slot_of[i] = -1;
      continue;
    }
    auto s = pool.slot(seqs[i]);
    if (!s.is_ok()) {
      EXPECT_EQ(pool.n_used(), pool.n_slots()) << seed;
      kv.release(seqs[i]);
      continue;
    }
    if (slot_of[i] >= 0) {
      EXPECT_EQ(*s, slot_of[i]) << seed;
    }
    slot_of[i] = *s;
    for (size_t j = 0; j < seqs.size(); ++j) {  // no two live sequences share a slot
      if (static_cast<int>(j) != i && slot_of[j] >= 0) {
        ASSERT_NE(slot_of[j], *s) << seed;
      }
    }
  }
  for (auto& s : seqs) kv.release(s);
  EXPECT_EQ(pool.n_used(), 0);
  EXPECT_EQ(kv.leases().n_live(), 0);
  EXPECT_EQ(kv.pool().n_used(), 0);
}

TEST(RecurrentPool, CheckpointsEvictUnsharedBeforeShared) {
  KvCache kv(KvGeometry{1, 1, 8, 16, KvDtype::kF32}, 8, /*max_leases=*/16);
  RecurrentPool pool(kv, 2, 4);
  std::vector<int> state(static_cast<size_t>(pool.n_total()), 0);  // a stand-in state per slot
  pool.set_copier([&](int32_t src, int32_t dst) {
    state[dst] = state[src];
    return Status::ok();
  });
  SeqKv a;
  const int32_t live = *pool.slot(a);
  auto save = [&](uint64_t key, bool shared = false) {
    state[live] = static_cast<int>(key) * 10;  // what the checkpoint must give back
    bool saved = false;
    auto c = pool.save(a, key, &saved, shared);
    EXPECT_TRUE(c.is_ok() && saved) << key;
  };
  auto restores = [&](uint64_t key) {  // into a fresh sequence: the value saved under key
    SeqKv b;
    Status st = pool.restore(key, b);
    const int got = st.is_ok() ? state[*pool.slot(b)] : -1;
    kv.release(b);
    return got == static_cast<int>(key) * 10;
  };
  for (uint64_t k = 1; k <= 4; ++k) save(k);
  EXPECT_EQ(pool.n_checkpoints_shared(), 0);
  EXPECT_TRUE(restores(1));  // reused: 1 is shared now
  EXPECT_EQ(pool.n_checkpoints_shared(), 1);
  save(5);  // the least recently used unshared one goes (2), not 1 (older, but shared)
  EXPECT_TRUE(pool.has(1));
  EXPECT_FALSE(pool.has(2));
  save(6, true);  // a divergence checkpoint: shared at once; evicts 3
  save(7, true);  // evicts 4
  EXPECT_FALSE(pool.has(3));
  EXPECT_FALSE(pool.has(4));
  EXPECT_EQ(pool.n_checkpoints_shared(), 3);  // 1, 6, 7: the cap, 0.75 of 4
  save(8);  // shared at the cap: still an unshared one goes (5)
  EXPECT_FALSE(pool.has(5));
  save(9, true);  // the only unshared one (8) goes; now 4 shared, over the cap
  EXPECT_FALSE(pool.has(8));
  EXPECT_EQ(pool.n_checkpoints_shared(), 4);
  save(10);  // over the cap: the least recently used shared one (1, restored before 6, 7, 9 were saved)
  EXPECT_FALSE(pool.has(1));
  EXPECT_EQ(pool.n_checkpoints_shared(), 3);
  for (uint64_t k : {6, 7, 9, 10}) EXPECT_TRUE(restores(k)) << k;
  EXPECT_EQ(pool.n_checkpoints_used(), 4);
  kv.release(a);
  EXPECT_EQ(pool.n_used(), 0);
}

}  // namespace
}  // namespace hs
