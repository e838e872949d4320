// tests/unit/kv/test_tiers_hotset.cpp — the hot set's residency map + LRU + pins against a
// simple reference model under random operations, and lease generations.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "kv/tier/hot_set.h"
#include "kv/tier/lease.h"

namespace hs {
namespace {

// Reference: resident keys with a last-use clock and a pin count. A use is an acquire
// (hit or miss) or an unpin to zero; a miss takes a free slot while fewer than n_slots
// keys are resident, else evicts the unpinned key with the oldest use.
struct RefHotSet {
  using Key = std::tuple<uint32_t, uint32_t, int32_t>;
  struct Entry {
    int64_t last_use = 0;
    int pins = 0;
  };
  int n_slots;
  int64_t clock = 0;
  std::map<Key, Entry> resident;

  static Key k(const HotKey& h) { return {h.lease_id, h.generation, h.chunk}; }

  // Returns {ok, hit, evicted, evicted key}.
  std::tuple<bool, bool, bool, Key> acquire(const HotKey& h) {
    if (auto it = resident.find(k(h)); it != resident.end()) {
      it->second.last_use = ++clock;
      return {true, true, false, {}};
    }
    bool evicted = false;
    Key victim{};
    if (static_cast<int>(resident.size()) == n_slots) {
      auto best = resident.end();
      for (auto it = resident.begin(); it != resident.end(); ++it)
        if (it->second.pins == 0 && (best == resident.end() || it->second.last_use < best->second.last_use)) best = it;
      if (best == resident.end()) return {false, false, false, {}};
      victim = best->first;
      resident.erase(best);
      evicted = true;
    }
    resident[k(h)] = Entry{++clock, 0};
    return {true, false, evicted, victim};
  }
  void pin(const Key& key) { ++resident[key].pins; }
  void unpin(const Key& key) {
    if (--resident[key].pins == 0) resident[key].last_use = ++clock;
  }
  int release_owner(uint32_t owner) {
    int n = 0;
    for (auto it = resident.begin(); it != resident.end();)
      if (std::get<0>(it->first) == owner) {
        it = resident.erase(it);
        ++n;
      } else {
        ++it;
      }
    return n;
  }
};

TEST(HotSet, LruMatchesReferenceModelUnderRandomOps) {
  const uint32_t seed = std::random_device{}();
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  for (int n_slots : {1, 3, 8, 32}) {
    const int max_owners = 5;
    HotSet hs(n_slots, max_owners);
    RefHotSet ref{n_slots};
    std::vector<int32_t> slot_epoch(n_slots, 0);
    for (int op = 0; op < 20000; ++op) {
      SCOPED_TRACE(testing::Message() << "slots=" << n_slots << " op=" << op);
      const int r = rng() % 100;
      if (r < 55) {
        const HotKey key{static_cast<uint32_t>(rng() % max_owners), 1 + static_cast<uint32_t>(rng() % 2),
                         static_cast<int32_t>(rng() % (2 * n_slots + 3))};
        const auto [ok, hit, evicted, victim] = ref.acquire(key);
        const HotSet::Acquired a = hs.acquire(key);
        ASSERT_EQ(a.slot >= 0, ok);
        if (!ok) continue;
        ASSERT_EQ(a.hit, hit);
        ASSERT_EQ(a.evicted, evicted);
        if (evicted) {
          ASSERT_EQ(RefHotSet::k(a.evicted_key), victim);
        }
        ASSERT_EQ(hs.find(key), a.slot);
        ASSERT_EQ(hs.key(a.slot), key);
        if (!hit) {  // a new owner of the slot always has a new epoch
          ASSERT_NE(static_cast<int32_t>(hs.epoch(a.slot)), slot_epoch[a.slot]);
          slot_epoch[a.slot] = static_cast<int32_t>(hs.epoch(a.slot));
        }
        if (rng() % 2) {  // plans pin what they acquire
          hs.pin(a.slot);
          ref.pin(RefHotSet::k(key));
        }
      } else if (r < 85) {  // unpin a random pinned slot
        std::vector<int32_t> pinned;
        for (int32_t s = 0; s < n_slots; ++s)
          if (hs.resident(s) && hs.pins(s) > 0) pinned.push_back(s);
        if (pinned.empty()) continue;
        const int32_t s = pinned[rng() % pinned.size()];
        ref.unpin(RefHotSet::k(hs.key(s)));
        hs.unpin(s);
      } else if (r < 90) {
        const uint32_t owner = rng() % max_owners;
        ASSERT_EQ(hs.release_owner(owner), ref.release_owner(owner));
      } else {  // a find never changes recency
        const HotKey key{static_cast<uint32_t>(rng() % max_owners), 1, static_cast<int32_t>(rng() % n_slots)};
        ASSERT_EQ(hs.find(key) >= 0, ref.resident.count(RefHotSet::k(key)) == 1);
      }
      // Same resident keys with the same pins; internal links consistent.
      ASSERT_EQ(hs.n_resident(), static_cast<int32_t>(ref.resident.size()));
      int pinned = 0;
      for (const auto& [key, e] : ref.resident) {
        const int32_t s = hs.find({std::get<0>(key), std::get<1>(key), std::get<2>(key)});
        ASSERT_GE(s, 0);
        ASSERT_EQ(hs.pins(s), e.pins);
        pinned += e.pins > 0;
      }
      ASSERT_EQ(hs.n_pinned(), pinned);
      if (op % 97 == 0) {
        ASSERT_TRUE(hs.check().is_ok()) << hs.check().to_string();
      }
    }
    for (uint32_t o = 0; o < static_cast<uint32_t>(max_owners); ++o) hs.release_owner(o);
    EXPECT_EQ(hs.n_free(), n_slots);
    EXPECT_EQ(hs.n_pinned(), 0);
    EXPECT_TRUE(hs.check().is_ok());
  }
}

TEST(HotSet, PinnedSlotsAreNeverEvicted) {
  HotSet hs(2, 1);
  const auto a = hs.acquire({0, 1, 10}), b = hs.acquire({0, 1, 11});
  hs.pin(a.slot);
  hs.pin(b.slot);
  EXPECT_EQ(hs.acquire({0, 1, 12}).slot, -1);  // full and all pinned: no slot, nothing changed
  EXPECT_EQ(hs.n_resident(), 2);
  hs.unpin(a.slot);
  const auto c = hs.acquire({0, 1, 12});
  EXPECT_EQ(c.slot, a.slot);
  EXPECT_TRUE(c.evicted);
  EXPECT_EQ(c.evicted_key.chunk, 10);
  EXPECT_EQ(hs.find({0, 1, 10}), -1);
  EXPECT_EQ(hs.find({0, 1, 11}), b.slot);
  // Releasing the owner frees pinned slots too.
  EXPECT_EQ(hs.release_owner(0), 2);
  EXPECT_EQ(hs.n_free(), 2);
  EXPECT_EQ(hs.n_pinned(), 0);
  EXPECT_TRUE(hs.check().is_ok());
}

TEST(TierLease, GenerationsMakeOldLeasesStale) {
  LeaseTable t(2);
  auto a = t.acquire(), b = t.acquire();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(a->id, b->id);
  EXPECT_FALSE(t.acquire().is_ok());  // capacity 2
  EXPECT_TRUE(t.is_live(*a));
  ASSERT_TRUE(t.release(*a).is_ok());
  EXPECT_FALSE(t.is_live(*a));
  EXPECT_FALSE(t.release(*a).is_ok());  // double release refused
  auto c = t.acquire();  // reuses a's id with the next generation
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->id, a->id);
  EXPECT_EQ(c->generation, a->generation + 1);
  EXPECT_TRUE(t.is_live(*c));
  EXPECT_FALSE(t.is_live(*a));
  EXPECT_FALSE(t.is_live(SeqLease{}));
  ASSERT_TRUE(t.release(*b).is_ok());
  ASSERT_TRUE(t.release(*c).is_ok());
  EXPECT_EQ(t.n_live(), 0);
}

}  // namespace
}  // namespace hs
