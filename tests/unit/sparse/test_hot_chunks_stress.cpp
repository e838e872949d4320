// tests/unit/sparse/test_hot_chunks_stress.cpp — the device tier (sparse/hot_chunks.h) over a
// real KvCache, driven directly the way backend/cpu_attention.cpp drives it, for what
// test_hot_chunks.cpp does not cover (these checks come from the removed standalone tier's
// tests, kv/tier/{host,device}_tier):
//   - sizing: resident regions are paid from the budget first, then whole slots per full
//     (layer, kv head); a budget short of one slot, a scaled dtype with C != P, a C that does
//     not divide P are refused;
//   - host pieces are the KvCache rows (every dtype, pages out of order), one per (sequence,
//     layer, head, chunk), and a fetch copies them byte for byte (every dtype);
//   - attention over the pieces a step resolves to — hot slots, the resident sinks / ring,
//     the pages — equals float softmax attention over the same tokens' rows;
//   - lifecycle stress: hundreds of sequences start, grow, take a lease and a resident region
//     (or find none free), sync sinks + ring, fetch random full chunks (deferred PendingCopy
//     lists run in shuffled order after every fetch of the step, or immediate copies), get
//     cancelled (some after their fetches but before their copies ran, with a newcomer
//     fetching into the freed slots in the same step), run out of pages, or finish. After
//     every step each hot slot of a live lease holds exactly the page bytes of its chunk (no
//     stale copy in a reused slot, no pinned slot taken), every resident region holds exactly
//     the sink and ring rows, each fetch's hits / misses / evictions / refusal and each sync's
//     resident bytes are what the pools' state predicts; after the last sequence ends every
//     pool — leases, KV pages, resident regions, hot slots, pins — is back to its baseline
//     and the cumulative counters add up.
// Fresh random data each run (seed printed; HS_TEST_SEED=... replays one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_quant.h"
#include "sparse/hot_chunks.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::random_chunks;
using test::write_random;

constexpr KvDtype kAllDtypes[] = {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kFp8};

// The tier's shape: the cache geometry, C, sinks, window, resident regions, full layers.
struct Shape {
  KvGeometry g;
  int C = 16;
  int S = 16;
  int W = 32;
  int32_t resident_seqs = 0;
  std::vector<bool> full;  // [n_layer]; empty: all

  int64_t piece() const { return PieceLayout::make(g.dtype, g.head_dim, C).bytes; }
  int64_t n_sets() const {
    int64_t n = 0;
    for (int l = 0; l < g.n_layer; ++l) n += full.empty() || full[l] ? g.n_kv_heads : 0;
    return n;
  }
  int32_t sink_chunks() const { return (S + C - 1) / C; }
  int32_t ring_chunks() const { return (W + C - 1) / C + 1; }
  int64_t region_bytes() const {
    return resident_seqs > 0 ? static_cast<int64_t>(resident_seqs) * n_sets() * (sink_chunks() + ring_chunks()) * piece()
                             : 0;
  }
  bool is_full(int l) const { return full.empty() || full[l]; }
  // A budget that buys exactly `slots` hot slots per full (layer, kv head) after the regions.
  HotChunks::Config config(int32_t slots) const {
    HotChunks::Config cfg;
    cfg.chunk_tokens = C;
    cfg.full_layer = full;
    cfg.resident_seqs = resident_seqs;
    cfg.sink_tokens = S;
    cfg.window_tokens = W;
    cfg.budget_bytes = region_bytes() + n_sets() * slots * piece() + piece() - 1;
    return cfg;
  }
};

// The valid rows of resident piece `got` (chunk `chunk`, keys [0, n_keys)) equal the page's.
void expect_rows_equal_page(const HotChunks& hot, const SeqKv& seq, int layer, int head, int32_t chunk,
                            int32_t n_keys, const uint8_t* got) {
  const PieceLayout& L = hot.piece_layout();
  const int C = hot.chunk_tokens();
  const uint8_t* want = hot.host_piece(seq, layer, head, chunk);
  const int n_valid = std::min(C, n_keys - chunk * C);
  for (int t = 0; t < n_valid; ++t) {
    ASSERT_EQ(std::memcmp(got + L.row_offset(t, 0), want + L.row_offset(t, 0), static_cast<size_t>(2 * L.row_bytes)),
              0)
        << "layer " << layer << " head " << head << " resident chunk " << chunk << " row " << t;
    if (L.scale_bytes > 0) {
      ASSERT_EQ(std::memcmp(got + L.scale_offset(t, 0), want + L.scale_offset(t, 0), 2 * L.scale_bytes), 0)
          << "layer " << layer << " head " << head << " resident chunk " << chunk << " scales of row " << t;
    }
  }
}

TEST(HotChunksStress, SizingPaysResidentRegionsFirstThenWholeSlots) {
  Shape s;
  s.g = KvGeometry{3, 2, 64, 16, KvDtype::kInt8};
  s.C = 16;
  s.S = 16;
  s.W = 32;
  s.resident_seqs = 3;
  s.full = {true, false, true};
  KvCache kv(s.g, 8, 4);
  const int64_t piece = s.piece();
  ASSERT_EQ(piece, PieceLayout::make(KvDtype::kInt8, 64, 16).bytes);
  ASSERT_EQ(s.region_bytes(), 3 * 4 * (1 + 3) * piece);  // 3 regions × 4 sets × (1 sink + W/C + 1 ring)
  {
    auto h = HotChunks::create(kv, s.config(5));
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    HotChunks& hot = **h;
    EXPECT_EQ(hot.slots_per_set(), 5);
    EXPECT_EQ(hot.slots_total(), 4 * 5);
    EXPECT_EQ(hot.bytes(), 4 * 5 * piece);
    EXPECT_EQ(hot.ring_chunks(), 3);
    EXPECT_EQ(hot.piece_bytes(), piece);
    EXPECT_EQ(hot.resident_regions_used(), 0);
    EXPECT_NE(hot.hot_set(0, 1), nullptr);
    EXPECT_EQ(hot.hot_set(1, 0), nullptr);  // not a full layer: no slots
    EXPECT_NE(hot.hot_set(2, 0), nullptr);
    EXPECT_TRUE(kv.has_lease_listener(&hot));
  }
  EXPECT_EQ(kv.n_lease_listeners(), 0u);  // unregistered when it died
  HotChunks::Config cfg = s.config(1);
  cfg.budget_bytes = s.region_bytes() + s.n_sets() * piece - 1;  // regions, but not one slot per set
  EXPECT_FALSE(HotChunks::create(kv, cfg).is_ok());
  cfg.budget_bytes = s.region_bytes();
  EXPECT_FALSE(HotChunks::create(kv, cfg).is_ok());
  cfg.budget_bytes = s.region_bytes() + s.n_sets() * piece;
  {
    auto h = HotChunks::create(kv, cfg);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    EXPECT_EQ((*h)->slots_per_set(), 1);
  }
  // A scaled dtype keeps its scales after the page's rows: C must be the page size.
  KvCache kv32(KvGeometry{1, 1, 64, 32, KvDtype::kInt8}, 4, 2);
  HotChunks::Config c16;
  c16.chunk_tokens = 16;
  EXPECT_FALSE(HotChunks::create(kv32, c16).is_ok());
  c16.chunk_tokens = 32;
  EXPECT_TRUE(HotChunks::create(kv32, c16).is_ok());
  // C must divide P.
  KvCache kvf(KvGeometry{1, 1, 64, 32, KvDtype::kF16}, 4, 2);
  HotChunks::Config c12;
  c12.chunk_tokens = 12;
  EXPECT_FALSE(HotChunks::create(kvf, c12).is_ok());
}

TEST(HotChunksStress, HostPiecesAreThePageRowsAndFetchesCopyThemForEveryDtype) {
  const unsigned seed = test::sparse_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(kv_dtype_name(dt));
    Shape s;
    s.g = KvGeometry{2, 2, 64, kv_dtype_plain(dt) ? 32 : 16, dt};
    s.C = 16;
    KvCache kv(s.g, 16, 4);
    auto h = HotChunks::create(kv, s.config(12));
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    HotChunks& hot = **h;
    const PieceLayout& L = hot.piece_layout();
    SeqKv a, b;
    ASSERT_TRUE(kv.reserve(a, 70).is_ok());
    ASSERT_TRUE(kv.reserve(b, 20).is_ok());
    std::shuffle(a.blocks.begin(), a.blocks.end(), rng);  // pages out of position order
    a.n_tokens = 70;
    b.n_tokens = 20;
    write_random(kv, a, 0, 70, rng);
    write_random(kv, b, 0, 20, rng);
    std::set<const uint8_t*> pieces;
    std::vector<float> k(64), v(64), kk(64), vv(64);
    for (int l = 0; l < 2; ++l)
      for (int hd = 0; hd < 2; ++hd) {
        for (int32_t p = 0; p < 70; ++p) {
          kv.read(a, l, hd, p, k.data(), v.data());
          const uint8_t* piece = hot.host_piece(a, l, hd, p / 16);
          const int t = p % 16;
          const bool sc = L.scale_bytes > 0;
          kv_decode_row(dt, piece + L.row_offset(t, 0), sc ? piece + L.scale_offset(t, 0) : nullptr, 64, kk.data());
          kv_decode_row(dt, piece + L.row_offset(t, 1), sc ? piece + L.scale_offset(t, 1) : nullptr, 64, vv.data());
          ASSERT_EQ(std::memcmp(kk.data(), k.data(), 64 * sizeof(float)), 0) << "K layer " << l << " pos " << p;
          ASSERT_EQ(std::memcmp(vv.data(), v.data(), 64 * sizeof(float)), 0) << "V layer " << l << " pos " << p;
          pieces.insert(piece);
        }
        for (int32_t c = 0; c < 2; ++c) pieces.insert(hot.host_piece(b, l, hd, c));
      }
    EXPECT_EQ(pieces.size(), 2u * 2 * (5 + 2));  // no two (seq, layer, head, chunk) share a piece

    ASSERT_TRUE(kv.lease(a).is_ok());
    ASSERT_TRUE(kv.lease(b).is_ok());
    for (int round = 0; round < 2; ++round) {
      std::vector<HotChunks::PendingCopy> copies;
      std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> got;  // (chunks, slots)
      for (int l = 0; l < 2; ++l)
        for (int hd = 0; hd < 2; ++hd) {
          const std::vector<int32_t> ca = {0, 1, 2, 3}, cb = {0};  // the full chunks
          std::vector<int32_t> sa(4), sb(1);
          ASSERT_TRUE(hot.fetch(a, l, hd, ca, sa));
          ASSERT_TRUE(hot.fetch(b, l, hd, cb, sb, &copies));  // b's copies deferred
          for (size_t i = 0; i < 4; ++i)
            ASSERT_EQ(std::memcmp(hot.slot_ptr(l, hd, sa[i]), hot.host_piece(a, l, hd, ca[i]), hot.piece_bytes()), 0);
          got.push_back({cb, sb});
        }
      EXPECT_EQ(copies.size(), round == 0 ? 4u : 0u);
      for (const HotChunks::PendingCopy& pc : copies) std::memcpy(pc.dst, pc.src, static_cast<size_t>(hot.piece_bytes()));
      int i = 0;
      for (int l = 0; l < 2; ++l)
        for (int hd = 0; hd < 2; ++hd, ++i)
          ASSERT_EQ(std::memcmp(hot.slot_ptr(l, hd, got[i].second[0]), hot.host_piece(b, l, hd, 0), hot.piece_bytes()),
                    0);
      const HotChunkStats st = hot.end_step();
      EXPECT_EQ(st.hits, round == 0 ? 0 : 20);
      EXPECT_EQ(st.misses, round == 0 ? 20 : 0);
      EXPECT_EQ(st.bytes_moved, st.misses * hot.piece_bytes());
    }
    kv.release(a);
    kv.release(b);
    EXPECT_EQ(hot.slots_used(), 0);
    EXPECT_EQ(kv.pool().n_used(), 0);
    EXPECT_EQ(kv.leases().n_live(), 0);
  }
}

// What backend/cpu_attention.cpp does per (token, kv head): each selected chunk is read from
// its hot slot if fetched, else from the resident region if there, else from the page.
TEST(HotChunksStress, AttentionOverSlotsRegionAndPagesMatchesFloatReference) {
  const unsigned seed = test::sparse_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(kv_dtype_name(dt));
    Shape s;
    s.g = KvGeometry{2, 2, 64, kv_dtype_plain(dt) ? 32 : 16, dt};
    s.C = 16;
    s.S = 16;
    s.W = 32;  // ring of 3 chunks
    s.resident_seqs = 1;
    KvCache kv(s.g, 40, 4);
    auto h = HotChunks::create(kv, s.config(8));
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    HotChunks& hot = **h;
    const int C = 16, n = 250;  // chunks 0..15, the last one holds 10 tokens
    SeqKv seq, other;
    for (SeqKv* q : {&seq, &other}) {
      ASSERT_TRUE(kv.reserve(*q, n).is_ok());
      std::shuffle(q->blocks.begin(), q->blocks.end(), rng);
      q->n_tokens = n;
      write_random(kv, *q, 0, n, rng);
      ASSERT_TRUE(kv.lease(*q).is_ok());
    }
    ASSERT_TRUE(hot.acquire_resident(seq));
    EXPECT_FALSE(hot.acquire_resident(other));  // the only region is taken
    EXPECT_EQ(hot.resident_regions_used(), 1);
    const int layer = 1, head = 1;
    hot.sync_resident(seq, layer, head, n);
    const std::vector<int32_t> sel = {0, 3, 7, 9, 13, 14, 15};  // sink, fetched ×3, ring ×3
    const std::vector<int32_t> fetched = {3, 7, 9};
    std::vector<int32_t> slots(fetched.size());
    std::vector<HotChunks::PendingCopy> copies;
    ASSERT_TRUE(hot.fetch(seq, layer, head, fetched, slots, &copies));
    ASSERT_EQ(copies.size(), fetched.size());
    for (const HotChunks::PendingCopy& pc : copies) std::memcpy(pc.dst, pc.src, static_cast<size_t>(hot.piece_bytes()));
    for (const SeqKv* q : {&seq, &other}) {
      std::vector<PieceSpan> spans;
      for (int32_t c : sel) {
        const auto f = std::find(fetched.begin(), fetched.end(), c);
        const uint8_t* p = nullptr;
        if (q == &seq && f != fetched.end()) {
          p = hot.slot_ptr(layer, head, slots[f - fetched.begin()]);
        } else {
          p = hot.resident_piece(*q, layer, head, c);
          if (q == &seq)
            EXPECT_EQ(p != nullptr, f == fetched.end()) << "chunk " << c;
          else
            EXPECT_EQ(p, nullptr) << "chunk " << c;  // no region: sinks and window from the pages
        }
        if (!p) p = hot.host_piece(*q, layer, head, c);
        spans.push_back({PieceView{p, &hot.piece_layout()}, std::min(C, n - c * C)});
      }
      const int n_q = 4, hd = 64;
      std::vector<float> qv(n_q * hd), mx(n_q), sm(n_q), acc(n_q * hd);
      for (float& x : qv) x = nd(rng);
      const float scale = 1.0f / 8.0f;
      kv_attend_pieces(qv.data(), n_q, spans.data(), static_cast<int>(spans.size()), scale, mx.data(), sm.data(),
                       acc.data());
      for (int gq = 0; gq < n_q; ++gq) {
        std::vector<double> sc, o(hd, 0.0);
        std::vector<std::vector<float>> vs;
        for (int32_t c : sel)
          for (int32_t pos = c * C; pos < std::min(c * C + C, n); ++pos) {
            std::vector<float> k(hd), v(hd);
            kv.read(*q, layer, head, pos, k.data(), v.data());
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += static_cast<double>(qv[gq * hd + d]) * k[d];
            sc.push_back(dot * scale);
            vs.push_back(v);
          }
        const double m = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (size_t j = 0; j < sc.size(); ++j) {
          const double p = std::exp(sc[j] - m);
          z += p;
          for (int d = 0; d < hd; ++d) o[d] += p * vs[j][d];
        }
        for (int d = 0; d < hd; ++d)
          ASSERT_NEAR(acc[gq * hd + d] / sm[gq], o[d] / z, 1e-5) << "query head " << gq << " d " << d;
      }
    }
    hot.end_step();
    kv.release(seq);
    kv.release(other);
    EXPECT_EQ(hot.resident_regions_used(), 0);
    EXPECT_EQ(hot.slots_used(), 0);
  }
}

// ---- lifecycle stress ------------------------------------------------------------------

struct Live {
  SeqKv kv;
  int32_t target = 0;           // finishes at this length
  bool region = false;          // holds a resident region
  bool ended = false;           // released (finished or cancelled)
  std::vector<int32_t> synced;  // [n_sets] keys its region was synced to (the test's model)
};

struct StressCase {
  const char* name;
  Shape shape;
  int32_t n_blocks;     // KV pages: fewer than the live sequences' targets need
  int32_t max_leases;   // below the live sequences at times: lease() fails
  int32_t slots;        // per full (layer, kv head)
};

class Stress {
 public:
  Stress(const StressCase& c, std::mt19937& rng)
      : c_(c), s_(c.shape), rng_(rng), kv_(s_.g, c.n_blocks, c.max_leases) {
    for (int l = 0; l < s_.g.n_layer; ++l)
      for (int h = 0; h < s_.g.n_kv_heads; ++h)
        if (s_.is_full(l)) sets_.push_back({l, h});
  }

  void run(int n_sequences, int max_live);

 private:
  struct Fetched {  // one successful fetch of this step
    Live* seq;
    int layer, head;
    std::vector<int32_t> chunks, slots;
  };
  struct Copy {
    Live* seq;
    HotChunks::PendingCopy pc;
  };

  void start_one();
  bool grow(Live& x, int n);  // false: out of pages, the sequence was cancelled (released)
  void tier_step(Live& x);    // lease, region, sync, fetch every full (layer, head)
  void end(Live& x, int64_t* counter) {
    kv_.release(x.kv);
    x.ended = true;
    x.region = false;
    ++*counter;
  }
  void drop_ended() {
    std::erase_if(fetched_, [](const Fetched& f) { return f.seq->ended; });
    std::erase_if(copies_, [](const Copy& c) { return c.seq->ended; });
    std::erase_if(live_, [](const std::unique_ptr<Live>& x) { return x->ended; });
  }
  void check_fetches() const;
  void check_regions() const;
  void check_every_slot() const;
  void check_pools() const;

  StressCase c_;
  Shape s_;
  std::mt19937& rng_;
  KvCache kv_;
  std::unique_ptr<HotChunks> hot_;
  std::vector<std::pair<int, int>> sets_;  // full (layer, kv head) pairs, in HotChunks' order
  std::vector<std::unique_ptr<Live>> live_;
  std::vector<Fetched> fetched_;
  std::vector<Copy> copies_;
  HotChunkStats want_step_, want_total_;
  int64_t pinned_ = 0;  // slots this step's fetches pinned (all distinct)

 public:
  int started = 0;
  int64_t finished = 0, cancelled = 0, cancelled_mid_step = 0, out_of_pages = 0;
  int64_t lease_refused = 0, region_refused = 0, fetches = 0, fetch_refused = 0, deferred = 0;
};

void Stress::start_one() {
  auto x = std::make_unique<Live>();
  x->target = 40 + static_cast<int32_t>(rng_() % 560);
  live_.push_back(std::move(x));
  ++started;
}

bool Stress::grow(Live& x, int n) {
  const int32_t begin = x.kv.n_tokens;
  if (!kv_.reserve(x.kv, begin + n).is_ok()) {
    end(x, &out_of_pages);
    return false;
  }
  write_random(kv_, x.kv, begin, begin + n, rng_);
  x.kv.n_tokens = begin + n;
  return true;
}

void Stress::tier_step(Live& x) {
  const int C = s_.C;
  const int32_t n = x.kv.n_tokens;
  if (n < C) return;  // nothing to fetch yet: no lease taken
  if (!kv_.leases().is_live(x.kv.lease)) {
    const bool room = kv_.leases().n_live() < kv_.leases().capacity();
    const bool ok = kv_.lease(x.kv).is_ok();
    ASSERT_EQ(ok, room) << "lease() with " << kv_.leases().n_live() << " live";
    if (!ok) {  // this step reads the pages
      ++lease_refused;
      return;
    }
  }
  // A region is free iff fewer than resident_seqs are in use; a holder keeps its own.
  const bool want_region = x.region || hot_->resident_regions_used() < s_.resident_seqs;
  const bool got_region = hot_->acquire_resident(x.kv);
  ASSERT_EQ(got_region, want_region);
  if (got_region && !x.region) x.synced.assign(sets_.size(), 0);
  x.region = got_region;
  region_refused += !got_region;
  const uint32_t id = x.kv.lease.id, gen = x.kv.lease.generation;
  const int32_t sink_rows = s_.sink_chunks() * C;
  for (size_t si = 0; si < sets_.size(); ++si) {
    const auto [l, h] = sets_[si];
    if (x.region) {
      // The rows [synced, n) that belong in the sinks, and those in the ring's chunks.
      const int32_t ring_begin = std::max(0, ((n - 1) / C - s_.ring_chunks() + 1) * C);
      int64_t rows = 0;
      for (int32_t t = x.synced[si]; t < n; ++t) rows += (t < sink_rows) + (t >= ring_begin);
      want_step_.resident_bytes += rows * kv_token_bytes(s_.g.dtype, s_.g.head_dim);
      hot_->sync_resident(x.kv, l, h, n);
      x.synced[si] = n;
    }
    const HotSet& set = *hot_->hot_set(l, h);
    const auto chunks = random_chunks(n / C, 1 + static_cast<int>(rng_() % 6), rng_);  // full chunks only
    // What the fetch must do, from the set's state now: hits are pinned first, then the
    // misses need free slots or unpinned (evictable) ones; free ones go first.
    int32_t need = 0, unpinned_hits = 0;
    std::vector<int32_t> hit_slot(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      hit_slot[i] = set.find({id, gen, chunks[i]});
      if (hit_slot[i] < 0)
        ++need;
      else
        unpinned_hits += set.pins(hit_slot[i]) == 0;
    }
    const bool fits = need <= set.n_free() + set.n_evictable() - unpinned_hits;
    const int32_t free_before = set.n_free(), resident_before = set.n_resident(), pinned_before = set.n_pinned();
    std::vector<int32_t> slots(chunks.size(), -7);
    const bool defer = rng_() % 4 != 0;  // as the attention tasks do; else copied at once
    std::vector<HotChunks::PendingCopy> pcs;
    ++fetches;
    const bool ok = hot_->fetch(x.kv, l, h, chunks, slots, defer ? &pcs : nullptr);
    ASSERT_EQ(ok, fits) << "fetch of " << chunks.size() << " chunks, " << need << " misses, " << free_before
                        << " free, layer " << l << " head " << h;
    ASSERT_TRUE(set.check().is_ok()) << set.check().to_string();
    if (!ok) {  // nothing changed but the refused counter
      ++fetch_refused;
      want_step_.refused += static_cast<int64_t>(chunks.size());
      ASSERT_EQ(set.n_resident(), resident_before);
      ASSERT_EQ(set.n_pinned(), pinned_before);
      for (int32_t sl : slots) ASSERT_EQ(sl, -1);
      continue;
    }
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (hit_slot[i] >= 0) {
        ASSERT_EQ(slots[i], hit_slot[i]) << "a hit moved";
      }
      ASSERT_GT(set.pins(slots[i]), 0);
    }
    ASSERT_EQ(set.n_pinned(), pinned_before + static_cast<int32_t>(chunks.size()));
    ASSERT_EQ(pcs.size(), defer ? static_cast<size_t>(need) : 0u);
    for (const HotChunks::PendingCopy& pc : pcs) {
      ASSERT_EQ(hit_slot[pc.index], -1);
      ASSERT_EQ(pc.dst, hot_->slot_ptr(l, h, slots[pc.index]));
      ASSERT_EQ(pc.src, hot_->host_piece(x.kv, l, h, chunks[pc.index]));
      copies_.push_back({&x, pc});
    }
    deferred += static_cast<int64_t>(pcs.size());
    want_step_.hits += static_cast<int64_t>(chunks.size()) - need;
    want_step_.misses += need;
    want_step_.bytes_moved += need * hot_->piece_bytes();
    want_step_.evictions += std::max(0, need - free_before);
    pinned_ += static_cast<int64_t>(chunks.size());
    fetched_.push_back({&x, l, h, chunks, slots});
  }
}

// Every slot a fetch of this step returned still holds its key and the page's bytes.
void Stress::check_fetches() const {
  for (const Fetched& f : fetched_) {
    const HotSet& set = *hot_->hot_set(f.layer, f.head);
    for (size_t i = 0; i < f.chunks.size(); ++i) {
      const int32_t sl = f.slots[i];
      ASSERT_TRUE(set.resident(sl));
      ASSERT_EQ(set.key(sl), (HotKey{f.seq->kv.lease.id, f.seq->kv.lease.generation, f.chunks[i]}))
          << "pinned slot " << sl << " changed hands within the step";
      ASSERT_EQ(std::memcmp(hot_->slot_ptr(f.layer, f.head, sl),
                            hot_->host_piece(f.seq->kv, f.layer, f.head, f.chunks[i]), hot_->piece_bytes()),
                0)
          << "layer " << f.layer << " head " << f.head << " slot " << sl << " chunk " << f.chunks[i];
    }
  }
}

// Each region holds exactly the sink chunks and the ring's chunks of keys [0, n), as in the pages.
void Stress::check_regions() const {
  const int C = s_.C;
  for (const auto& xp : live_) {
    const Live& x = *xp;
    if (!x.region) continue;
    const int32_t n = x.kv.n_tokens, last = (n - 1) / C;
    for (const auto& [l, h] : sets_)
      for (int32_t c = 0; c <= last; ++c) {
        const bool want = (c < s_.sink_chunks()) || c > last - s_.ring_chunks();
        const uint8_t* p = hot_->resident_piece(x.kv, l, h, c);
        ASSERT_EQ(p != nullptr, want) << "chunk " << c << " of " << last + 1 << " layer " << l << " head " << h;
        if (p) {
          ASSERT_NO_FATAL_FAILURE(expect_rows_equal_page(*hot_, x.kv, l, h, c, n, p));
        }
      }
  }
}

// Every resident hot slot belongs to a live lease of its current generation and holds the
// page bytes of its (full) chunk.
void Stress::check_every_slot() const {
  std::map<uint32_t, const Live*> by_id;
  for (const auto& x : live_)
    if (kv_.leases().is_live(x->kv.lease)) by_id[x->kv.lease.id] = x.get();
  for (const auto& [l, h] : sets_) {
    const HotSet& set = *hot_->hot_set(l, h);
    ASSERT_TRUE(set.check().is_ok()) << set.check().to_string();
    for (int32_t sl = 0; sl < set.n_slots(); ++sl) {
      if (!set.resident(sl)) continue;
      const HotKey& key = set.key(sl);
      const auto it = by_id.find(key.lease_id);
      ASSERT_NE(it, by_id.end()) << "slot " << sl << " owned by a lease that ended";
      const Live& x = *it->second;
      ASSERT_EQ(x.kv.lease.generation, key.generation) << "slot " << sl << " from an old generation";
      ASSERT_LE((key.chunk + 1) * s_.C, x.kv.n_tokens) << "slot " << sl << " holds a chunk that is not full";
      ASSERT_EQ(std::memcmp(hot_->slot_ptr(l, h, sl), hot_->host_piece(x.kv, l, h, key.chunk), hot_->piece_bytes()), 0)
          << "layer " << l << " head " << h << " slot " << sl << " chunk " << key.chunk << ": stale bytes";
    }
  }
}

void Stress::check_pools() const {
  int32_t leased = 0, regions = 0, pages = 0;
  for (const auto& x : live_) {
    leased += kv_.leases().is_live(x->kv.lease);
    regions += x->region;
    pages += static_cast<int32_t>(x->kv.blocks.size());
    ASSERT_TRUE(!x->region || kv_.leases().is_live(x->kv.lease));
  }
  ASSERT_EQ(kv_.leases().n_live(), leased);
  ASSERT_EQ(hot_->resident_regions_used(), regions);
  ASSERT_EQ(kv_.pool().n_used(), pages);
  ASSERT_EQ(hot_->slots_pinned(), 0);
}

void Stress::run(int n_sequences, int max_live) {
  auto h = HotChunks::create(kv_, s_.config(c_.slots));
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  hot_ = std::move(*h);
  ASSERT_EQ(hot_->slots_per_set(), c_.slots);
  ASSERT_EQ(hot_->ring_chunks(), s_.ring_chunks());
  const int32_t free_pages = kv_.pool().n_free();
  ASSERT_EQ(free_pages, c_.n_blocks);
  int64_t selected_total = 0;
  for (int step = 0; started < n_sequences || !live_.empty(); ++step) {
    ASSERT_LT(step, 100000);
    want_step_ = HotChunkStats{};
    pinned_ = 0;
    // Admit, then grow: a prefill burst for a new sequence, 1..8 tokens (decode-like) otherwise.
    while (started < n_sequences && static_cast<int>(live_.size()) < max_live - 1 && rng_() % 3 != 0) start_one();
    for (auto& x : live_) grow(*x, x->kv.n_tokens == 0 ? 16 + static_cast<int>(rng_() % 64) : 1 + rng_() % 8);
    drop_ended();
    // The step's tiered part for every live sequence.
    for (auto& x : live_) ASSERT_NO_FATAL_FAILURE(tier_step(*x));
    ASSERT_EQ(hot_->slots_pinned(), pinned_);
    // Some sequences end after their fetches but before their copies ran: those copies are
    // dropped with them (their attention never runs), the slots are freed, pinned or not.
    for (auto& x : live_)
      if (rng_() % 150 == 0) end(*x, &cancelled_mid_step);
    drop_ended();
    // A newcomer fetches in the same step, likely into the freed slots and onto the freed pages.
    if (started < n_sequences && static_cast<int>(live_.size()) < max_live) {
      start_one();
      Live& x = *live_.back();
      if (grow(x, 64 + static_cast<int>(rng_() % 64))) {
        ASSERT_NO_FATAL_FAILURE(tier_step(x));
      }
      drop_ended();
    }
    // The deferred copies run in any order, after every fetch of the step (as attention tasks).
    std::shuffle(copies_.begin(), copies_.end(), rng_);
    for (const Copy& c : copies_) std::memcpy(c.pc.dst, c.pc.src, static_cast<size_t>(hot_->piece_bytes()));
    ASSERT_NO_FATAL_FAILURE(check_fetches());
    ASSERT_NO_FATAL_FAILURE(check_regions());
    ASSERT_NO_FATAL_FAILURE(check_every_slot());
    const HotChunkStats st = hot_->end_step();
    ASSERT_EQ(st.hits, want_step_.hits) << "step " << step;
    ASSERT_EQ(st.misses, want_step_.misses) << "step " << step;
    ASSERT_EQ(st.evictions, want_step_.evictions) << "step " << step;
    ASSERT_EQ(st.refused, want_step_.refused) << "step " << step;
    ASSERT_EQ(st.bytes_moved, st.misses * hot_->piece_bytes());
    ASSERT_EQ(st.resident_bytes, want_step_.resident_bytes) << "step " << step;
    want_total_ += st;
    selected_total += st.hits + st.misses;
    fetched_.clear();
    copies_.clear();
    ASSERT_EQ(hot_->slots_pinned(), 0);
    // Between steps: the sequences that reached their length finish; a few are cancelled idle.
    for (auto& x : live_) {
      if (x->kv.n_tokens >= x->target)
        end(*x, &finished);
      else if (rng_() % 500 == 0)
        end(*x, &cancelled);
    }
    drop_ended();
    ASSERT_NO_FATAL_FAILURE(check_every_slot());
    ASSERT_NO_FATAL_FAILURE(check_pools());
  }
  // Baseline: every pool as it started.
  EXPECT_EQ(kv_.leases().n_live(), 0);
  EXPECT_EQ(kv_.pool().n_free(), free_pages);
  EXPECT_EQ(hot_->resident_regions_used(), 0);
  EXPECT_EQ(hot_->slots_used(), 0);
  EXPECT_EQ(hot_->slots_pinned(), 0);
  for (const auto& [l, hd] : sets_) {
    const HotSet& set = *hot_->hot_set(l, hd);
    EXPECT_EQ(set.n_free(), c_.slots);
    EXPECT_EQ(set.n_pinned(), 0);
    EXPECT_TRUE(set.check().is_ok()) << set.check().to_string();
  }
  // Counters add up.
  const HotChunkStats& tot = hot_->total();
  EXPECT_EQ(tot.hits, want_total_.hits);
  EXPECT_EQ(tot.misses, want_total_.misses);
  EXPECT_EQ(tot.evictions, want_total_.evictions);
  EXPECT_EQ(tot.refused, want_total_.refused);
  EXPECT_EQ(tot.resident_bytes, want_total_.resident_bytes);
  EXPECT_EQ(tot.hits + tot.misses, selected_total);
  EXPECT_EQ(tot.bytes_moved, tot.misses * hot_->piece_bytes());
  EXPECT_LE(tot.evictions, tot.misses);
  EXPECT_EQ(finished + cancelled + cancelled_mid_step + out_of_pages, n_sequences);
  // The run went through every path.
  EXPECT_GT(finished, 0);
  EXPECT_GT(cancelled_mid_step, 0);
  EXPECT_GT(out_of_pages, 0);
  EXPECT_GT(tot.hits, 0);
  EXPECT_GT(tot.evictions, 0);
  EXPECT_GT(tot.refused, 0);
  EXPECT_GT(deferred, 0);
  EXPECT_GT(region_refused, 0);
  EXPECT_GT(lease_refused, 0);
  std::printf(
      "[  stress  ] %s: %d sequences: %lld finished, %lld cancelled (%lld mid-step, %lld out of pages); %lld fetches "
      "(%lld refused), %lld hits, %lld misses (%lld deferred), %lld evictions, %lld resident bytes; %lld lease and "
      "%lld region refusals\n",
      c_.name, n_sequences, static_cast<long long>(finished),
      static_cast<long long>(cancelled + cancelled_mid_step + out_of_pages),
      static_cast<long long>(cancelled_mid_step), static_cast<long long>(out_of_pages),
      static_cast<long long>(fetches), static_cast<long long>(fetch_refused), static_cast<long long>(tot.hits),
      static_cast<long long>(tot.misses), static_cast<long long>(deferred), static_cast<long long>(tot.evictions),
      static_cast<long long>(tot.resident_bytes), static_cast<long long>(lease_refused),
      static_cast<long long>(region_refused));
}

TEST(HotChunksStress, ManySequencesKeepSlotsExactAndReturnEveryPoolToBaseline) {
  const unsigned seed = test::sparse_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " (HS_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  // Up to 8 live sequences (targets 40..600 tokens) on pages for 2048 tokens; 6 leases;
  // resident regions for 3; 24 slots per set against up to 6 × 6 selected chunks.
  const StressCase cases[] = {
      {"f16 P32 C16, S16 W48, a layer without slots",
       {KvGeometry{3, 2, 32, 32, KvDtype::kF16}, 16, 16, 48, 3, {true, false, true}}, 64, 6, 24},
      {"int8 P=C=16, S8 W40", {KvGeometry{2, 2, 32, 16, KvDtype::kInt8}, 16, 8, 40, 3, {}}, 128, 6, 24},
      {"int4 P=C=32, S32 W64", {KvGeometry{2, 2, 32, 32, KvDtype::kInt4}, 32, 32, 64, 3, {}}, 64, 6, 24},
  };
  for (const StressCase& c : cases) {
    SCOPED_TRACE(c.name);
    Stress stress(c, rng);
    ASSERT_NO_FATAL_FAILURE(stress.run(/*n_sequences=*/240, /*max_live=*/8));
  }
}

}  // namespace
}  // namespace hs
