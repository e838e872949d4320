// tests/unit/kv/test_tiers.cpp — host tier addressing, device tier fetches (bytes equal the
// host's, hit/miss/byte accounting), stale copies after cancel, sparse attention over the
// fetched pieces. The many-sequence lifecycle stress test is in test_tiers_stress.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "kv/tier/kv_tiers.h"
#include "kv/tier/piece_attention.h"

namespace hs {
namespace {

uint32_t fresh_seed() {
  const uint32_t s = std::random_device{}();
  std::printf("[ seed ] %u\n", s);
  return s;
}

TierGeometry small_geometry(KvStoreDtype dt) {
  TierGeometry g;
  g.n_layer = 2;
  g.n_kv_heads = 2;
  g.head_dim = 64;
  g.page_tokens = 32;
  g.chunk_tokens = 16;
  g.dtype = dt;
  return g;
}

// A budget giving exactly `hot_slots` hot slots per (layer, head).
DeviceTierConfig config_with_slots(const TierGeometry& g, int32_t hot_slots, int32_t max_seqs = 4) {
  DeviceTierConfig cfg;
  cfg.max_seqs = max_seqs;
  cfg.sink_tokens = 16;
  cfg.window_tokens = 32;
  cfg.budget_bytes = 1;
  const DeviceTierSizing probe = [&] {
    auto s = DeviceTier::size_for(g, DeviceTierConfig{1LL << 40, max_seqs, 16, 32});
    return *s;
  }();
  const int64_t stride = PieceLayout::make(g.dtype, g.head_dim, g.chunk_tokens).stride;
  cfg.budget_bytes = probe.resident_bytes + static_cast<int64_t>(g.n_layer) * g.n_kv_heads * hot_slots * stride;
  return cfg;
}

// Appends n tokens of N(0,1) rows (every layer and head) to seq.
void append(KvTiers& t, TierSeq& seq, int n, std::mt19937& rng) {
  const TierGeometry& g = t.host().geometry();
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int32_t begin = seq.n_tokens();
  ASSERT_TRUE(t.reserve(seq, begin + n).is_ok());
  std::vector<float> k(g.head_dim), v(g.head_dim);
  for (int32_t pos = begin; pos < begin + n; ++pos)
    for (int l = 0; l < g.n_layer; ++l)
      for (int h = 0; h < g.n_kv_heads; ++h) {
        for (int d = 0; d < g.head_dim; ++d) k[d] = nd(rng), v[d] = nd(rng);
        t.write(seq, l, h, pos, k.data(), v.data());
      }
  t.commit(seq, begin + n);
}

// The device piece of every entry holds the host's bytes: whole pieces for hot chunks, the
// valid rows (+ scales) for sink and ring chunks (a ring slot's tail may hold older rows).
void expect_pieces_equal_host(const KvTiers& t, const TierSeq& seq, const FetchPlan& plan) {
  const PieceLayout& L = t.host().piece_layout();
  for (const FetchEntry& e : plan.entries) {
    const uint8_t* dev = t.piece(plan, e).base;
    const HostPiece host = t.host().chunk(seq.host, plan.layer, plan.head, e.chunk);
    if (e.home == ChunkHome::kHot) {
      ASSERT_EQ(std::memcmp(dev, host.data, host.bytes), 0) << "hot chunk " << e.chunk;
      continue;
    }
    for (int tok = 0; tok < e.n_valid; ++tok) {
      ASSERT_EQ(std::memcmp(dev + L.row_offset(tok, 0), host.data + L.row_offset(tok, 0), 2 * L.row_bytes), 0)
          << "resident chunk " << e.chunk << " token " << tok;
      ASSERT_EQ(std::memcmp(dev + L.scale_offset(tok, 0), host.data + L.scale_offset(tok, 0), 2 * L.scale_bytes), 0);
    }
  }
}

TEST(TierHost, RowsRoundTripAndChunksAreContiguousPieces) {
  std::mt19937 rng(fresh_seed());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvStoreDtype dt : {KvStoreDtype::kF32, KvStoreDtype::kF16, KvStoreDtype::kInt8, KvStoreDtype::kInt4}) {
    const TierGeometry g = small_geometry(dt);
    auto host = HostTier::create(g, 8);
    ASSERT_TRUE(host.is_ok());
    HostSeq a, b;
    ASSERT_TRUE(host->reserve(a, 70).is_ok());  // 3 pages
    ASSERT_TRUE(host->reserve(b, 20).is_ok());  // 1 page
    EXPECT_EQ(host->pool().n_used(), 4);
    std::vector<float> rows(2 * 2 * 70 * 2 * 64);  // [layer][head][pos][K|V][hd] written values
    for (float& x : rows) x = nd(rng);
    auto at = [&](int l, int h, int p) { return &rows[(((l * 2 + h) * 70 + p) * 2) * 64]; };
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        for (int p = 0; p < 70; ++p) host->write(a, l, h, p, at(l, h, p), at(l, h, p) + 64);
    std::set<const uint8_t*> pieces;
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) {
        for (int p = 0; p < 70; ++p) {
          float k[64], v[64], kk[64];
          host->read(a, l, h, p, k, v);
          const float tol = dt == KvStoreDtype::kF32 ? 0.0f : dt == KvStoreDtype::kF16 ? 3e-3f : 1.0f;
          for (int d = 0; d < 64; ++d) {
            ASSERT_NEAR(k[d], at(l, h, p)[d], tol);
            ASSERT_NEAR(v[d], at(l, h, p)[64 + d], tol);
          }
          // The chunk piece holding p decodes to the same row.
          const HostPiece piece = host->chunk(a, l, h, p / 16);
          EXPECT_EQ(piece.bytes, host->piece_layout().bytes);
          const PieceView pv = host->view(piece);
          kv_decode_row(dt, pv.k_row(p % 16), pv.k_scale(p % 16), 64, kk);
          ASSERT_EQ(std::memcmp(kk, k, sizeof(k)), 0);
          pieces.insert(piece.data);
        }
        for (int c = 0; c < 2; ++c) pieces.insert(host->chunk(b, l, h, c).data);
      }
    EXPECT_EQ(pieces.size(), 2u * 2 * (5 + 2));  // no two (seq, layer, head, chunk) share a piece
    host->release(a);
    host->release(b);
    EXPECT_EQ(host->pool().n_used(), 0);
  }
}

TEST(TierDevice, SizingFromBudget) {
  const TierGeometry g = small_geometry(KvStoreDtype::kInt8);
  const DeviceTierConfig cfg = config_with_slots(g, 5, 3);
  auto s = DeviceTier::size_for(g, cfg);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->n_hot_slots, 5);
  EXPECT_EQ(s->n_sink_chunks, 1);
  EXPECT_EQ(s->n_ring_chunks, 3);  // W/C + 1
  EXPECT_EQ(s->resident_bytes, 3 * 2 * 2 * 4 * PieceLayout::make(g.dtype, 64, 16).stride);
  DeviceTierConfig small = cfg;
  small.budget_bytes = s->resident_bytes;  // no room for a hot slot
  EXPECT_FALSE(DeviceTier::size_for(g, small).is_ok());
}

// (d) fetched bytes equal host bytes, for every dtype; (e) hits + misses == selected and
// bytes_moved == misses × piece bytes; a repeat of the same selection is all hits.
TEST(TierDevice, FetchCopiesHostBytesAndCounts) {
  std::mt19937 rng(fresh_seed());
  for (KvStoreDtype dt : {KvStoreDtype::kF16, KvStoreDtype::kBF16, KvStoreDtype::kInt8, KvStoreDtype::kInt4}) {
    const TierGeometry g = small_geometry(dt);
    auto tiers = KvTiers::create(g, 64, config_with_slots(g, 12));
    ASSERT_TRUE(tiers.is_ok()) << tiers.status().to_string();
    KvTiers& t = **tiers;
    auto seq = t.start();
    ASSERT_TRUE(seq.is_ok());
    append(t, *seq, 300, rng);  // 19 chunks: sink 0, ring 17..18, hot candidates 1..16
    const int64_t piece_bytes = t.host().piece_layout().bytes;
    for (int step = 0; step < 6; ++step) {
      int64_t selected = 0;
      std::vector<FetchPlan> plans;
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 2; ++h) {
          std::vector<int32_t> sel;
          for (int i = 0; i < 8; ++i) sel.push_back(static_cast<int32_t>(rng() % 19));
          if (step % 2 == 1) sel = std::vector<int32_t>{1, 2, 3};  // repeated: hot after the first time
          selected += static_cast<int64_t>(sel.size());
          auto plan = t.plan(*seq, l, h, sel);
          ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
          EXPECT_EQ(plan->n_hits + plan->n_misses, static_cast<int32_t>(sel.size()));
          t.execute(*plan);
          expect_pieces_equal_host(t, *seq, *plan);
          plans.push_back(std::move(*plan));
        }
      const FetchStats st = t.end_step();
      SCOPED_TRACE(testing::Message() << kv_store_dtype_name(dt) << " step " << step);
      EXPECT_EQ(st.hits + st.misses, selected);
      EXPECT_EQ(st.bytes_moved, st.misses * piece_bytes);
      EXPECT_LE(st.evictions, st.misses);
      EXPECT_EQ(st.stale_dropped, 0);
      if (step == 3 || step == 5) {
        EXPECT_EQ(st.misses, 0);  // {1,2,3} stayed hot
      }
    }
    const FetchStats tot = t.device().total_stats();
    EXPECT_EQ(tot.bytes_moved, tot.misses * piece_bytes);
    t.finish(*seq);
    EXPECT_EQ(t.usage(), TierUsage{});
  }
}

// Chunks in the sinks and the ring are never copied; everything else is a hot-set miss
// the first time.
TEST(TierDevice, SinksAndRingAreResident) {
  std::mt19937 rng(fresh_seed());
  const TierGeometry g = small_geometry(KvStoreDtype::kInt8);
  auto tiers = KvTiers::create(g, 64, config_with_slots(g, 8));
  ASSERT_TRUE(tiers.is_ok());
  KvTiers& t = **tiers;
  auto seq = t.start();
  ASSERT_TRUE(seq.is_ok());
  append(t, *seq, 100, rng);  // chunks 0..6, 6 partial (4 tokens); ring = {4, 5, 6}
  auto plan = t.plan(*seq, 1, 0, {0, 4, 5, 6, 3, 1});
  ASSERT_TRUE(plan.is_ok());
  const ChunkHome want[] = {ChunkHome::kSink, ChunkHome::kRing, ChunkHome::kRing,
                            ChunkHome::kRing, ChunkHome::kHot,  ChunkHome::kHot};
  for (size_t i = 0; i < plan->entries.size(); ++i) EXPECT_EQ(plan->entries[i].home, want[i]) << i;
  EXPECT_EQ(plan->entries[3].n_valid, 4);
  EXPECT_EQ(plan->n_misses, 2);
  t.execute(*plan);
  expect_pieces_equal_host(t, *seq, *plan);
  const FetchStats st = t.end_step();
  EXPECT_EQ(st.resident_hits, 4);
  EXPECT_EQ(st.bytes_moved, 2 * t.host().piece_layout().bytes);
  EXPECT_FALSE(t.plan(*seq, 0, 0, {7}).is_ok());  // beyond the sequence
  // The ring advances: after 40 more tokens chunk 4 is no longer resident.
  append(t, *seq, 40, rng);
  auto later = t.plan(*seq, 1, 0, {4, 8});
  ASSERT_TRUE(later.is_ok());
  EXPECT_EQ(later->entries[0].home, ChunkHome::kHot);
  EXPECT_EQ(later->entries[1].home, ChunkHome::kRing);
  t.execute(*later);
  expect_pieces_equal_host(t, *seq, *later);
  t.end_step();
  t.cancel(*seq);
  EXPECT_EQ(t.usage(), TierUsage{});
}

// More misses than free or unpinned slots: the plan fails and leaves nothing pinned.
TEST(TierDevice, PlanFailsCleanlyWhenSlotsArePinned) {
  std::mt19937 rng(fresh_seed());
  const TierGeometry g = small_geometry(KvStoreDtype::kInt8);
  auto tiers = KvTiers::create(g, 64, config_with_slots(g, 3));
  ASSERT_TRUE(tiers.is_ok());
  KvTiers& t = **tiers;
  auto seq = t.start();
  ASSERT_TRUE(seq.is_ok());
  append(t, *seq, 200, rng);
  auto p1 = t.plan(*seq, 0, 0, {1, 2});
  ASSERT_TRUE(p1.is_ok());
  EXPECT_FALSE(t.plan(*seq, 0, 0, {1, 3, 4}).is_ok());  // needs 2, only 1 unpinned
  EXPECT_EQ(t.device().hot_set(0, 0).n_pinned(), 2);
  auto p2 = t.plan(*seq, 0, 0, {1, 3});  // 1 hit + 1 miss fits
  ASSERT_TRUE(p2.is_ok());
  t.execute(*p1);
  t.execute(*p2);
  t.end_step();
  EXPECT_EQ(t.usage().hot_slots_pinned, 0);
  t.finish(*seq);
  EXPECT_EQ(t.usage(), TierUsage{});
}

// (c) A plan made under generation g whose sequence is cancelled, with the slot then
// reused by another sequence: executing the old plan must not touch the new owner's slot.
TEST(TierDevice, StaleCopyNeverLandsInReusedSlot) {
  std::mt19937 rng(fresh_seed());
  const TierGeometry g = small_geometry(KvStoreDtype::kInt8);
  auto tiers = KvTiers::create(g, 64, config_with_slots(g, 1));  // one hot slot per (layer, head)
  ASSERT_TRUE(tiers.is_ok());
  KvTiers& t = **tiers;
  auto a = t.start();
  ASSERT_TRUE(a.is_ok());
  append(t, *a, 200, rng);
  auto old_plan = t.plan(*a, 1, 1, {2});
  ASSERT_TRUE(old_plan.is_ok());
  ASSERT_TRUE(old_plan->entries[0].miss);
  const int32_t slot = old_plan->entries[0].slot;
  t.cancel(*a);  // before the copy ran; a's pages go back to the pool
  auto b = t.start();
  ASSERT_TRUE(b.is_ok());
  append(t, *b, 200, rng);  // likely on a's old pages
  auto plan_b = t.plan(*b, 1, 1, {5});
  ASSERT_TRUE(plan_b.is_ok());
  ASSERT_EQ(plan_b->entries[0].slot, slot);  // the only slot: reused
  t.execute(*plan_b);
  t.execute(*old_plan);  // late copy for a dead generation
  const HostPiece want = t.host().chunk(b->host, 1, 1, 5);
  EXPECT_EQ(std::memcmp(t.device().slot_ptr(1, 1, slot), want.data, want.bytes), 0);
  FetchStats st = t.end_step();
  EXPECT_EQ(st.stale_dropped, 1);
  EXPECT_EQ(st.bytes_moved, want.bytes);
  // Same with a slot that changed hands by eviction (the lease is still live).
  auto p1 = t.plan(*b, 0, 0, {3});
  ASSERT_TRUE(p1.is_ok());
  t.end_step();  // p1 never executed; its slot is unpinned
  auto p2 = t.plan(*b, 0, 0, {4});  // evicts chunk 3
  ASSERT_TRUE(p2.is_ok());
  t.execute(*p2);
  t.execute(*p1);
  const HostPiece want4 = t.host().chunk(b->host, 0, 0, 4);
  EXPECT_EQ(std::memcmp(t.device().slot_ptr(0, 0, p2->entries[0].slot), want4.data, want4.bytes), 0);
  st = t.end_step();
  EXPECT_EQ(st.stale_dropped, 1);
  EXPECT_EQ(st.evictions, 1);
  t.finish(*b);
  EXPECT_EQ(t.usage(), TierUsage{});
}

// Attention over the fetched pieces equals float softmax attention over the same tokens'
// decoded rows (read back from the host tier).
TEST(TierAttention, PiecesMatchFloatReference) {
  std::mt19937 rng(fresh_seed());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvStoreDtype dt : {KvStoreDtype::kF32, KvStoreDtype::kF16, KvStoreDtype::kInt8, KvStoreDtype::kInt4}) {
    const TierGeometry g = small_geometry(dt);
    auto tiers = KvTiers::create(g, 64, config_with_slots(g, 8));
    ASSERT_TRUE(tiers.is_ok());
    KvTiers& t = **tiers;
    auto seq = t.start();
    ASSERT_TRUE(seq.is_ok());
    append(t, *seq, 250, rng);  // last chunk 15 holds 10 tokens
    const std::vector<int32_t> sel = {0, 7, 3, 15, 14, 9};
    auto plan = t.plan(*seq, 1, 1, sel);
    ASSERT_TRUE(plan.is_ok());
    t.execute(*plan);
    const int n_q = 4, hd = 64;
    std::vector<float> q(n_q * hd);
    for (float& x : q) x = nd(rng);
    const std::vector<PieceSpan> spans = plan_spans(t.device(), *plan);
    std::vector<float> mx(n_q), sm(n_q), acc(n_q * hd), out(n_q * hd);
    const float scale = 1.0f / 8.0f;
    attention_over_pieces(q.data(), n_q, spans.data(), static_cast<int>(spans.size()), scale, mx.data(), sm.data(),
                          acc.data());
    finish_partial(sm.data(), acc.data(), n_q, hd, out.data());
    t.end_step();
    for (int gq = 0; gq < n_q; ++gq) {
      std::vector<double> s, o(hd, 0.0);
      std::vector<std::vector<float>> vs;
      for (int32_t c : sel)
        for (int32_t pos = c * 16; pos < std::min(c * 16 + 16, 250); ++pos) {
          std::vector<float> k(hd), v(hd);
          t.host().read(seq->host, 1, 1, pos, k.data(), v.data());
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[gq * hd + d]) * k[d];
          s.push_back(dot * scale);
          vs.push_back(v);
        }
      const double m = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (size_t j = 0; j < s.size(); ++j) {
        const double p = std::exp(s[j] - m);
        z += p;
        for (int d = 0; d < hd; ++d) o[d] += p * vs[j][d];
      }
      for (int d = 0; d < hd; ++d)
        ASSERT_NEAR(out[gq * hd + d], o[d] / z, 1e-5) << kv_store_dtype_name(dt) << " head " << gq << " d " << d;
    }
    t.finish(*seq);
  }
}

}  // namespace
}  // namespace hs
