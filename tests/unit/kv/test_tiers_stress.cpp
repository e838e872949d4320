// tests/unit/kv/test_tiers_stress.cpp — lifecycle stress: hundreds of sequences start,
// append, select random chunks, fetch, get cancelled (some between plan and execute) or
// finish. After every step each hot slot owned by a live sequence holds exactly the host
// bytes of its chunk (no stale copy ever lands in a reused slot); after the last sequence
// ends every pool — leases, host pages, resident regions, hot slots, pins — is back to its
// baseline, and the counters add up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "kv/tier/kv_tiers.h"

namespace hs {
namespace {

struct Live {
  TierSeq seq;
  int32_t target = 0;  // finish at this length
};

void append(KvTiers& t, TierSeq& seq, int n, std::mt19937& rng) {
  const TierGeometry& g = t.host().geometry();
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int32_t begin = seq.n_tokens();
  std::vector<float> k(g.head_dim), v(g.head_dim);
  for (int32_t pos = begin; pos < begin + n; ++pos)
    for (int l = 0; l < g.n_layer; ++l)
      for (int h = 0; h < g.n_kv_heads; ++h) {
        for (int d = 0; d < g.head_dim; ++d) k[d] = nd(rng), v[d] = nd(rng);
        t.write(seq, l, h, pos, k.data(), v.data());
      }
  t.commit(seq, begin + n);
}

// Every resident hot slot of a live lease holds its chunk's host bytes.
void check_hot_slots(const KvTiers& t, const std::map<uint32_t, const TierSeq*>& by_id) {
  const TierGeometry& g = t.host().geometry();
  const int64_t bytes = t.host().piece_layout().bytes;
  for (int l = 0; l < g.n_layer; ++l)
    for (int h = 0; h < g.n_kv_heads; ++h) {
      const HotSet& hs = t.device().hot_set(l, h);
      ASSERT_TRUE(hs.check().is_ok()) << hs.check().to_string();
      for (int32_t s = 0; s < hs.n_slots(); ++s) {
        if (!hs.resident(s)) continue;
        const HotKey& key = hs.key(s);
        auto it = by_id.find(key.lease_id);
        ASSERT_NE(it, by_id.end()) << "slot " << s << " owned by a lease that ended";
        ASSERT_EQ(it->second->lease.generation, key.generation) << "slot " << s << " from an old generation";
        const HostPiece want = t.host().chunk(it->second->host, l, h, key.chunk);
        ASSERT_EQ(std::memcmp(t.device().slot_ptr(l, h, s), want.data, bytes), 0)
            << "layer " << l << " head " << h << " slot " << s << " chunk " << key.chunk;
      }
    }
}

TEST(TierStress, ManySequencesReturnEveryPoolToBaseline) {
  const uint32_t seed = std::random_device{}();
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  TierGeometry g;
  g.n_layer = 2;
  g.n_kv_heads = 2;
  g.head_dim = 32;
  g.page_tokens = 32;
  g.chunk_tokens = 16;
  g.dtype = KvStoreDtype::kInt8;
  DeviceTierConfig cfg;
  cfg.max_seqs = 8;
  cfg.sink_tokens = 16;
  cfg.window_tokens = 48;
  const DeviceTierSizing probe = *DeviceTier::size_for(g, DeviceTierConfig{1LL << 40, 8, 16, 48});
  const int64_t stride = PieceLayout::make(g.dtype, g.head_dim, g.chunk_tokens).stride;
  cfg.budget_bytes = probe.resident_bytes + 4 * 32 * stride;  // 32 hot slots per (layer, head)
  const int32_t host_pages = 80;                              // < 8 sequences × 600 tokens: pages run out
  auto tiers = KvTiers::create(g, host_pages, cfg);
  ASSERT_TRUE(tiers.is_ok()) << tiers.status().to_string();
  KvTiers& t = **tiers;
  const TierUsage baseline = t.usage();
  EXPECT_EQ(baseline, TierUsage{});
  const int64_t piece_bytes = t.host().piece_layout().bytes;

  const int kSequences = 240;
  int started = 0, out_of_pages = 0, plan_errors = 0;
  int64_t selected_total = 0;
  std::vector<Live> live;
  auto start_one = [&]() {
    auto s = t.start();
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    live.push_back({std::move(*s), 40 + static_cast<int32_t>(rng() % 560)});
    ++started;
  };
  auto grow = [&](Live& x, int n) -> bool {  // false: out of host pages, sequence cancelled
    if (!t.reserve(x.seq, x.seq.n_tokens() + n).is_ok()) {
      t.cancel(x.seq);
      ++out_of_pages;
      return false;
    }
    append(t, x.seq, n, rng);
    return true;
  };
  auto random_selection = [&](const TierSeq& s) {
    const int32_t n_chunks = (s.n_tokens() + 15) / 16;
    std::vector<int32_t> sel;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) sel.push_back(static_cast<int32_t>(rng() % n_chunks));
    return sel;
  };
  auto by_id = [&]() {
    std::map<uint32_t, const TierSeq*> m;
    for (const Live& x : live) m[x.seq.lease.id] = &x.seq;
    return m;
  };
  auto drop_ended = [&]() {
    live.erase(std::remove_if(live.begin(), live.end(), [&](const Live& x) { return !x.seq.lease.valid(); }),
               live.end());
  };

  for (int step = 0; started < kSequences || !live.empty(); ++step) {
    ASSERT_LT(step, 100000);
    // Admit new sequences.
    while (started < kSequences && static_cast<int32_t>(live.size()) < cfg.max_seqs - 1 && rng() % 3 != 0)
      start_one();
    // Decode-like growth: a burst of tokens (prefill) for short ones, 1..8 otherwise.
    for (Live& x : live) grow(x, x.seq.n_tokens() == 0 ? 16 + static_cast<int>(rng() % 64) : 1 + rng() % 8);
    drop_ended();
    // Plan every (live sequence, layer, head).
    std::vector<FetchPlan> plans;
    for (const Live& x : live)
      for (int l = 0; l < g.n_layer; ++l)
        for (int h = 0; h < g.n_kv_heads; ++h) {
          const std::vector<int32_t> sel = random_selection(x.seq);
          auto p = t.plan(x.seq, l, h, sel);
          if (!p.is_ok()) {  // only for lack of unpinned slots
            ASSERT_NE(p.status().message().find("hot slots"), std::string::npos) << p.status().to_string();
            ++plan_errors;
            continue;
          }
          ASSERT_EQ(p->n_hits + p->n_misses, static_cast<int32_t>(sel.size()));
          selected_total += static_cast<int64_t>(sel.size());
          plans.push_back(std::move(*p));
        }
    // Cancel some sequences between plan and execute: their plans go stale.
    for (Live& x : live)
      if (rng() % 150 == 0) t.cancel(x.seq);
    drop_ended();
    // A newcomer fills and fetches before the stale plans run, likely reusing their slots
    // and pages.
    if (started < kSequences && static_cast<int32_t>(live.size()) < cfg.max_seqs) {
      start_one();
      Live& x = live.back();
      if (grow(x, 64 + static_cast<int>(rng() % 64))) {
        for (int l = 0; l < g.n_layer; ++l)
          for (int h = 0; h < g.n_kv_heads; ++h) {
            const std::vector<int32_t> sel = random_selection(x.seq);
            auto p = t.plan(x.seq, l, h, sel);
            if (!p.is_ok()) {
              ++plan_errors;
              continue;
            }
            selected_total += static_cast<int64_t>(sel.size());
            t.execute(*p);
          }
      }
      drop_ended();
    }
    std::shuffle(plans.begin(), plans.end(), rng);
    for (const FetchPlan& p : plans) t.execute(p);
    check_hot_slots(t, by_id());
    const FetchStats st = t.end_step();
    ASSERT_EQ(st.bytes_moved, (st.misses - st.stale_dropped) * piece_bytes);
    ASSERT_EQ(t.usage().hot_slots_pinned, 0);
    // Finish the sequences that reached their length; a few more are cancelled idle.
    for (Live& x : live) {
      if (x.seq.n_tokens() >= x.target)
        t.finish(x.seq);
      else if (rng() % 500 == 0)
        t.cancel(x.seq);
    }
    drop_ended();
    const TierUsage u = t.usage();
    ASSERT_EQ(u.live_leases, static_cast<int32_t>(live.size()));
    ASSERT_EQ(u.open_regions, static_cast<int32_t>(live.size()));
  }

  EXPECT_EQ(t.usage(), baseline);
  EXPECT_EQ(t.leases().n_live(), 0);
  EXPECT_EQ(t.host().pool().n_free(), host_pages);
  for (int l = 0; l < g.n_layer; ++l)
    for (int h = 0; h < g.n_kv_heads; ++h) {
      EXPECT_EQ(t.device().hot_set(l, h).n_free(), t.device().sizing().n_hot_slots);
      EXPECT_TRUE(t.device().hot_set(l, h).check().is_ok());
    }
  const FetchStats tot = t.device().total_stats();
  EXPECT_EQ(tot.hits + tot.misses, selected_total);
  EXPECT_EQ(tot.bytes_moved, (tot.misses - tot.stale_dropped) * piece_bytes);
  EXPECT_EQ(t.n_finished() + t.n_cancelled(), kSequences);
  EXPECT_GT(tot.stale_dropped, 0);
  EXPECT_GT(tot.evictions, 0);
  EXPECT_GT(t.n_finished(), 0);
  std::printf(
      "[ stress ] %d sequences: %lld finished, %lld cancelled (%d out of pages); hits %lld misses %lld "
      "evictions %lld stale dropped %lld bytes %lld; %d plans refused for pinned slots\n",
      kSequences, static_cast<long long>(t.n_finished()), static_cast<long long>(t.n_cancelled()), out_of_pages,
      static_cast<long long>(tot.hits), static_cast<long long>(tot.misses), static_cast<long long>(tot.evictions),
      static_cast<long long>(tot.stale_dropped), static_cast<long long>(tot.bytes_moved), plan_errors);
}

}  // namespace
}  // namespace hs
