// tests/unit/sparse/test_hot_chunks.cpp — the sparse path's device tier (sparse/hot_chunks.h):
// hit/miss/eviction accounting against a reference LRU, fetched slots holding exactly the
// KV page's piece, refusal when every slot is pinned, stale-generation safety when a lease
// id is reused, and a lifecycle stress through the scheduler (admission, chunked prefill,
// decodes that fetch, finish, cancel, preemption) that must leave every hot slot, pin,
// lease and page at its baseline. Fresh random data each run (seed printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <list>
#include <memory>
#include <random>
#include <vector>

#include "engine/scheduler.h"
#include "sparse/hot_chunks.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::random_chunks;
using test::write_random;

// Every slot a fetch returned holds the chunk's bytes as they sit in the KV page.
void expect_slots_hold_pieces(const HotChunks& hot, const SeqKv& seq, int layer, int head,
                              const std::vector<int32_t>& chunks, const std::vector<int32_t>& slots) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    ASSERT_GE(slots[i], 0);
    ASSERT_EQ(std::memcmp(hot.slot_ptr(layer, head, slots[i]), hot.host_piece(seq, layer, head, chunks[i]),
                          hot.piece_bytes()),
              0)
        << "layer " << layer << " head " << head << " chunk " << chunks[i] << " slot " << slots[i];
  }
}

// Reference LRU of one (layer, head) for one sequence: front = least recently used. A step's
// chunks are pinned while it runs (hits first, then misses take free slots or evict the LRU
// unpinned chunk); end_step unpins them, hits then misses, each becoming most recent.
struct RefLru {
  int capacity;
  std::list<int32_t> order;
  HotChunkStats step(const std::vector<int32_t>& chunks) {
    HotChunkStats s;
    std::vector<int32_t> hits, misses;
    for (int32_t c : chunks) {
      auto it = std::find(order.begin(), order.end(), c);
      if (it != order.end()) {
        order.erase(it);
        hits.push_back(c);
      } else {
        misses.push_back(c);
      }
    }
    int free = capacity - static_cast<int>(order.size() + hits.size());
    for (size_t i = 0; i < misses.size(); ++i) {
      if (free > 0) {
        --free;
      } else {
        order.pop_front();
        ++s.evictions;
      }
    }
    s.hits = static_cast<int64_t>(hits.size());
    s.misses = static_cast<int64_t>(misses.size());
    for (int32_t c : hits) order.push_back(c);
    for (int32_t c : misses) order.push_back(c);
    return s;
  }
};

struct Fixture {
  KvCache kv;
  std::unique_ptr<HotChunks> hot;
  Fixture(const KvGeometry& g, int32_t n_blocks, int32_t slots_per_set, int32_t max_leases = 64, int C = 16)
      : kv(g, n_blocks, max_leases) {
    HotChunks::Config cfg;
    cfg.chunk_tokens = C;
    const int64_t piece = static_cast<int64_t>(C) * 2 * g.head_dim * kv_elem_bytes(g.dtype);
    cfg.budget_bytes = static_cast<int64_t>(slots_per_set) * g.n_layer * g.n_kv_heads * piece + piece - 1;
    auto h = HotChunks::create(kv, cfg);
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    hot = std::move(*h);
  }
};

TEST(HotChunks, CountsMatchAReferenceLruAndSlotsHoldThePagePieces) {
  std::mt19937 rng(test::sparse_seed());
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kF32}) {
    const KvGeometry g{2, 2, 64, 16, dt};
    constexpr int kSlots = 12;
    Fixture f(g, 64, kSlots);
    ASSERT_EQ(f.hot->slots_per_set(), kSlots);
    ASSERT_EQ(f.hot->piece_bytes(), 16 * 2 * 64 * kv_elem_bytes(dt));
    SeqKv seq;
    ASSERT_TRUE(f.kv.reserve(seq, 640).is_ok());
    std::shuffle(seq.blocks.begin(), seq.blocks.end(), rng);  // pages out of position order
    seq.n_tokens = 640;
    write_random(f.kv, seq, 0, 640, rng);
    ASSERT_TRUE(f.kv.lease(seq).is_ok());
    std::vector<RefLru> ref(g.n_layer * g.n_kv_heads, RefLru{kSlots, {}});
    HotChunkStats total;
    for (int step = 0; step < 60; ++step) {
      HotChunkStats want;
      int64_t selected = 0;
      for (int l = 0; l < g.n_layer; ++l)
        for (int h = 0; h < g.n_kv_heads; ++h) {
          // Mostly a few chunks out of a small pool, so both hits and evictions happen.
          const auto chunks = random_chunks(step % 7 == 0 ? 40 : 18, 1 + static_cast<int>(rng() % kSlots), rng);
          std::vector<int32_t> slots(chunks.size(), -7);
          ASSERT_TRUE(f.hot->fetch(seq, l, h, chunks, slots));
          expect_slots_hold_pieces(*f.hot, seq, l, h, chunks, slots);
          want += ref[l * g.n_kv_heads + h].step(chunks);
          selected += static_cast<int64_t>(chunks.size());
          ASSERT_TRUE(f.hot->hot_set(l, h)->check().is_ok());
        }
      EXPECT_EQ(f.hot->slots_pinned(), selected);  // every slot of the step pinned until its end
      const HotChunkStats st = f.hot->end_step();
      EXPECT_EQ(st.hits + st.misses, selected);
      EXPECT_EQ(st.hits, want.hits) << "step " << step;
      EXPECT_EQ(st.misses, want.misses) << "step " << step;
      EXPECT_EQ(st.evictions, want.evictions) << "step " << step;
      EXPECT_EQ(st.bytes_moved, st.misses * f.hot->piece_bytes());
      EXPECT_EQ(st.refused, 0);
      EXPECT_EQ(f.hot->slots_pinned(), 0);
      total += st;
    }
    EXPECT_GT(total.hits, 0);
    EXPECT_GT(total.evictions, 0);
    EXPECT_EQ(f.hot->total().hits, total.hits);
    EXPECT_EQ(f.hot->total().bytes_moved, total.bytes_moved);
    EXPECT_EQ(f.hot->slots_used(), g.n_layer * g.n_kv_heads * kSlots);
    f.kv.release(seq);  // ends the lease: every slot freed
    EXPECT_EQ(f.hot->slots_used(), 0);
    EXPECT_EQ(f.kv.leases().n_live(), 0);
  }
}

TEST(HotChunks, RefusesWhenEverySlotIsPinnedAndChangesNothing) {
  std::mt19937 rng(test::sparse_seed());
  const KvGeometry g{1, 1, 64, 16, KvDtype::kF16};
  Fixture f(g, 64, 8);
  SeqKv a, b;
  for (SeqKv* s : {&a, &b}) {
    ASSERT_TRUE(f.kv.reserve(*s, 320).is_ok());
    s->n_tokens = 320;
    write_random(f.kv, *s, 0, 320, rng);
    ASSERT_TRUE(f.kv.lease(*s).is_ok());
  }
  const auto ca = random_chunks(20, 6, rng);
  std::vector<int32_t> sa(ca.size());
  ASSERT_TRUE(f.hot->fetch(a, 0, 0, ca, sa));
  // b needs 4 slots, only 2 are neither used nor pinned: refused, a's pins and slots intact.
  const auto cb = random_chunks(20, 4, rng);
  std::vector<int32_t> sb(cb.size(), 5);
  EXPECT_FALSE(f.hot->fetch(b, 0, 0, cb, sb));
  for (int32_t s : sb) EXPECT_EQ(s, -1);
  EXPECT_EQ(f.hot->slots_pinned(), 6);
  EXPECT_EQ(f.hot->slots_used(), 6);
  ASSERT_TRUE(f.hot->hot_set(0, 0)->check().is_ok());
  expect_slots_hold_pieces(*f.hot, a, 0, 0, ca, sa);
  HotChunkStats st = f.hot->end_step();
  EXPECT_EQ(st.misses, 6);
  EXPECT_EQ(st.refused, 4);
  // Next step the same request fits: a's chunks are no longer pinned, the LRU gives them up.
  ASSERT_TRUE(f.hot->fetch(b, 0, 0, cb, sb));
  expect_slots_hold_pieces(*f.hot, b, 0, 0, cb, sb);
  st = f.hot->end_step();
  EXPECT_EQ(st.misses, 4);
  EXPECT_EQ(st.evictions, 2);
  f.kv.release(a);
  f.kv.release(b);
  EXPECT_EQ(f.hot->slots_used(), 0);
}

TEST(HotChunks, ReusedLeaseIdNeverReadsTheOldGenerationsSlots) {
  std::mt19937 rng(test::sparse_seed());
  const KvGeometry g{2, 2, 64, 16, KvDtype::kF16};
  // One lease: the id comes back at once, with the next generation; 25 pages: the next
  // sequence gets the very pages the first one used, with new data.
  Fixture f(g, 25, 16, /*max_leases=*/1);
  for (bool listener : {true, false}) {
    // Without the listener nobody frees the dead lease's slots: only the generation in the
    // key keeps the next sequence from hitting them.
    if (!listener) f.kv.remove_lease_listener(f.hot.get());
    SeqKv a;
    ASSERT_TRUE(f.kv.reserve(a, 400).is_ok());
    a.n_tokens = 400;
    write_random(f.kv, a, 0, 400, rng);
    const SeqLease la = *f.kv.lease(a);
    const auto chunks = random_chunks(25, 10, rng);
    std::vector<int32_t> slots(chunks.size());
    for (int l = 0; l < g.n_layer; ++l)
      for (int h = 0; h < g.n_kv_heads; ++h) ASSERT_TRUE(f.hot->fetch(a, l, h, chunks, slots));
    f.hot->end_step();
    f.kv.release(a);
    EXPECT_FALSE(f.kv.leases().is_live(la));
    EXPECT_EQ(f.hot->slots_used(), listener ? 0 : 4 * 10);

    // b: the same pages, new data, the same lease id.
    SeqKv b;
    ASSERT_TRUE(f.kv.reserve(b, 400).is_ok());
    b.n_tokens = 400;
    write_random(f.kv, b, 0, 400, rng);
    const SeqLease lb = *f.kv.lease(b);
    EXPECT_EQ(lb.id, la.id);
    EXPECT_NE(lb.generation, la.generation);
    for (int l = 0; l < g.n_layer; ++l)
      for (int h = 0; h < g.n_kv_heads; ++h) {
        ASSERT_TRUE(f.hot->fetch(b, l, h, chunks, slots));
        expect_slots_hold_pieces(*f.hot, b, l, h, chunks, slots);
      }
    const HotChunkStats st = f.hot->end_step();
    EXPECT_EQ(st.hits, 0);
    EXPECT_EQ(st.misses, 4 * 10);
    f.kv.release(b);
    f.kv.add_lease_listener(f.hot.get());
    // Whatever the dead generations left behind is evictable, never pinned.
    EXPECT_EQ(f.hot->slots_pinned(), 0);
  }
}

TEST(HotChunks, LifecycleStressThroughTheSchedulerReturnsEveryPoolToBaseline) {
  std::mt19937 rng(test::sparse_seed());
  const KvGeometry g{2, 2, 32, 16, KvDtype::kF32};
  constexpr int C = 16;
  constexpr int kSlots = 24;
  Fixture f(g, 48, kSlots, /*max_leases=*/6);  // tight: preemptions, evictions, refusals
  PrefixCache prefix(f.kv);
  StepCostModel cost;
  cost.fixed_s = 1.0;
  Scheduler sched(f.kv, &prefix, {.max_num_seqs = 6, .max_num_batched_tokens = 96, .prefill_cost_ratio = 0}, cost);
  std::vector<std::unique_ptr<Sequence>> live;
  int64_t finished = 0, cancelled = 0, fetches = 0, refused = 0, preempted = 0;
  uint64_t next_id = 1;
  auto end = [&](Sequence* s) {  // Engine::finish: the scheduler forgets it and releases its KV
    sched.remove(s);
    std::erase_if(live, [&](const auto& p) { return p.get() == s; });
  };
  for (int step = 0; step < 800; ++step) {
    if (step < 700 && live.size() < 10 && rng() % 3 == 0) {
      auto s = std::make_unique<Sequence>();
      s->id = next_id++;
      const int n_prompt = 40 + static_cast<int>(rng() % 160);
      const int32_t base = static_cast<int32_t>(rng() % 4) * 1000;  // shared prefixes now and then
      for (int i = 0; i < n_prompt; ++i) s->tokens.push_back(base + (i < 64 ? i : static_cast<int32_t>(rng() % 999)));
      s->n_prompt = n_prompt;
      s->params.max_tokens = 1 + static_cast<int>(rng() % 80);
      sched.add(s.get());
      live.push_back(std::move(s));
    }
    if (!live.empty() && rng() % 9 == 0) {  // a client goes away (running or waiting)
      end(live[rng() % live.size()].get());
      ++cancelled;
    }
    if (sched.idle()) continue;
    StepPlan plan = sched.schedule();
    preempted += static_cast<int64_t>(plan.preempted.size());
    // "Forward": write the chunk's K/V; a decode selects random full chunks per (layer, head)
    // and fetches them, as the decoder does for the chunks between sinks and window.
    for (const ScheduledChunk& c : plan.chunks) {
      Sequence* s = c.seq;
      write_random(f.kv, s->kv, s->num_computed, s->num_computed + c.n_tokens, rng);
      const int32_t n_keys = s->num_computed + c.n_tokens;
      if (c.n_tokens != 1 || n_keys / C < 2) continue;
      ASSERT_TRUE(f.kv.lease(s->kv).is_ok());
      for (int l = 0; l < g.n_layer; ++l)
        for (int h = 0; h < g.n_kv_heads; ++h) {
          const auto chunks = random_chunks(n_keys / C, 1 + static_cast<int>(rng() % 8), rng);
          std::vector<int32_t> slots(chunks.size());
          ++fetches;
          if (f.hot->fetch(s->kv, l, h, chunks, slots))
            expect_slots_hold_pieces(*f.hot, s->kv, l, h, chunks, slots);
          else
            ++refused;
        }
    }
    const HotChunkStats st = f.hot->end_step();
    EXPECT_EQ(st.bytes_moved, st.misses * f.hot->piece_bytes());
    EXPECT_LE(st.evictions, st.misses);
    sched.commit(plan);
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.sample) continue;
      c.seq->tokens.push_back(static_cast<int32_t>(rng() % 999));
      if (c.seq->n_generated() >= c.seq->params.max_tokens) {
        end(c.seq);
        ++finished;
      }
    }
    // Every resident slot belongs to a live lease of its current generation.
    for (int l = 0; l < g.n_layer; ++l)
      for (int h = 0; h < g.n_kv_heads; ++h) {
        const HotSet& set = *f.hot->hot_set(l, h);
        ASSERT_TRUE(set.check().is_ok()) << set.check().to_string();
        for (int32_t s = 0; s < set.n_slots(); ++s)
          if (set.resident(s)) {
            const HotKey& k = set.key(s);
            ASSERT_TRUE(f.kv.leases().is_live(SeqLease{k.lease_id, k.generation})) << "slot " << s;
          }
      }
    ASSERT_LE(f.kv.leases().n_live(), static_cast<int32_t>(sched.running().size()));
  }
  while (!live.empty()) {
    end(live.back().get());
    ++cancelled;
  }
  std::printf("[  stress  ] %lld finished, %lld cancelled, %lld preempted, %lld fetches (%lld refused); %lld hits, "
              "%lld misses, %lld evictions\n",
              static_cast<long long>(finished), static_cast<long long>(cancelled), static_cast<long long>(preempted),
              static_cast<long long>(fetches), static_cast<long long>(refused),
              static_cast<long long>(f.hot->total().hits), static_cast<long long>(f.hot->total().misses),
              static_cast<long long>(f.hot->total().evictions));
  EXPECT_GT(finished, 20);
  EXPECT_GT(f.hot->total().hits, 0);
  EXPECT_GT(f.hot->total().evictions, 0);
  EXPECT_EQ(f.kv.leases().n_live(), 0);
  EXPECT_EQ(f.hot->slots_used(), 0);
  EXPECT_EQ(f.hot->slots_pinned(), 0);
  EXPECT_EQ(f.kv.pool().n_used(), 0);
  EXPECT_TRUE(sched.idle());
}

}  // namespace
}  // namespace hs
