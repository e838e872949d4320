// kv/tier/device_tier.cpp — see device_tier.h.
#include "kv/tier/device_tier.h"

#include <algorithm>
#include <cstring>

namespace hs {

FetchStats& FetchStats::operator+=(const FetchStats& o) {
  hits += o.hits;
  resident_hits += o.resident_hits;
  misses += o.misses;
  bytes_moved += o.bytes_moved;
  evictions += o.evictions;
  stale_dropped += o.stale_dropped;
  return *this;
}

Result<DeviceTierSizing> DeviceTier::size_for(const TierGeometry& g, const DeviceTierConfig& cfg) {
  HS_ASSIGN_OR_RETURN(HostPageLayout layout,
                      HostPageLayout::make(g.dtype, g.n_kv_heads, g.head_dim, g.page_tokens, g.chunk_tokens));
  const int C = g.chunk_tokens;
  if (g.n_layer <= 0 || cfg.max_seqs <= 0 || cfg.sink_tokens < 0 || cfg.window_tokens < 0 ||
      cfg.sink_tokens % C != 0 || cfg.window_tokens % C != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "kv tiers: device tier needs layers > 0, max_seqs > 0, sink ({}) and window ({}) tokens "
                      "multiples of the chunk size {}",
                      cfg.sink_tokens, cfg.window_tokens, C);
  DeviceTierSizing s;
  const int64_t stride = layout.piece.stride;
  const int64_t per_head_sets = static_cast<int64_t>(g.n_layer) * g.n_kv_heads;
  s.n_sink_chunks = cfg.sink_tokens / C;
  s.n_ring_chunks = cfg.window_tokens / C + 1;
  s.resident_bytes_per_seq = per_head_sets * (s.n_sink_chunks + s.n_ring_chunks) * stride;
  s.resident_bytes = cfg.max_seqs * s.resident_bytes_per_seq;
  const int64_t left = cfg.budget_bytes - s.resident_bytes;
  const int64_t slots = left > 0 ? left / (per_head_sets * stride) : 0;
  if (slots < 1)
    return make_error(StatusCode::kInvalidArgument,
                      "kv tiers: --device-kv-budget {} B is too small: the sink + window region of {} sequences "
                      "takes {} B and one hot slot per (layer, kv head) {} B more",
                      cfg.budget_bytes, cfg.max_seqs, s.resident_bytes, per_head_sets * stride);
  s.n_hot_slots = static_cast<int32_t>(std::min<int64_t>(slots, INT32_MAX / 2));
  s.hot_bytes = per_head_sets * s.n_hot_slots * stride;
  return s;
}

Result<std::unique_ptr<DeviceTier>> DeviceTier::create(const TierGeometry& g, const DeviceTierConfig& cfg,
                                                       const LeaseTable* leases) {
  HS_ASSIGN_OR_RETURN(DeviceTierSizing size, size_for(g, cfg));
  if (leases == nullptr || leases->capacity() > cfg.max_seqs)
    return make_error(StatusCode::kInvalidArgument, "kv tiers: lease table capacity must be <= max_seqs ({})",
                      cfg.max_seqs);
  std::unique_ptr<DeviceTier> t(new DeviceTier(g, cfg, size, leases));
  if (!t->resident_ || !t->hot_)
    return make_error(StatusCode::kInvalidArgument, "kv tiers: cannot allocate {} bytes for the device tier",
                      size.resident_bytes + size.hot_bytes);
  return t;
}

DeviceTier::DeviceTier(const TierGeometry& g, const DeviceTierConfig& cfg, const DeviceTierSizing& size,
                       const LeaseTable* leases)
    : g_(g),
      cfg_(cfg),
      size_(size),
      piece_(PieceLayout::make(g.dtype, g.head_dim, g.chunk_tokens)),
      leases_(leases),
      resident_(static_cast<uint8_t*>(std::calloc(static_cast<size_t>(size.resident_bytes), 1))),
      hot_(static_cast<uint8_t*>(std::calloc(static_cast<size_t>(size.hot_bytes), 1))),
      open_(cfg.max_seqs, 0) {
  sets_.reserve(static_cast<size_t>(g.n_layer) * g.n_kv_heads);
  for (int i = 0; i < g.n_layer * g.n_kv_heads; ++i) sets_.emplace_back(size.n_hot_slots, cfg.max_seqs);
}

void DeviceTier::open(const SeqLease& lease) {
  if (!open_[lease.id]) ++n_open_;
  open_[lease.id] = 1;
}

void DeviceTier::close(const SeqLease& lease) {
  if (!lease.valid() || !open_[lease.id]) return;
  for (HotSet& s : sets_) s.release_owner(lease.id);
  open_[lease.id] = 0;
  --n_open_;
}

ChunkHome DeviceTier::home_of(int32_t chunk, int32_t n_tokens) const {
  if (chunk < size_.n_sink_chunks) return ChunkHome::kSink;
  const int32_t cur = (n_tokens - 1) / g_.chunk_tokens;  // the chunk being filled
  return chunk > cur - size_.n_ring_chunks ? ChunkHome::kRing : ChunkHome::kHot;
}

void DeviceTier::write_resident_row(const SeqLease& lease, const HostTier& host, const HostSeq& seq, int layer,
                                    int head, int32_t pos) {
  const int C = g_.chunk_tokens, P = g_.page_tokens;
  const int32_t chunk = pos / C;
  const int32_t index =
      chunk < size_.n_sink_chunks ? chunk : size_.n_sink_chunks + chunk % size_.n_ring_chunks;
  uint8_t* dst = resident_ptr(lease.id, layer, head, index);
  const uint8_t* page = host.page(seq.blocks[pos / P], layer);
  const HostPageLayout& L = host.layout();
  const int t = pos % P, tc = pos % C;
  // K and V rows are adjacent in both the page and the piece; so are their scales.
  std::memcpy(dst + piece_.row_offset(tc, 0), page + L.row_offset(head, t, 0), 2 * piece_.row_bytes);
  if (piece_.scale_bytes > 0)
    std::memcpy(dst + piece_.scale_offset(tc, 0), page + L.scale_offset(head, t, 0), 2 * piece_.scale_bytes);
}

void DeviceTier::pin(int32_t set, int32_t slot) {
  sets_[set].pin(slot);
  pinned_.push_back({set, slot, sets_[set].epoch(slot)});
}

Result<FetchPlan> DeviceTier::plan(const SeqLease& lease, const HostSeq& seq, int layer, int head,
                                   const std::vector<int32_t>& selected) {
  if (!leases_->is_live(lease) || !open_[lease.id])
    return make_error(StatusCode::kInternal, "kv tiers: plan for a lease that is not live (id {} gen {})", lease.id,
                      lease.generation);
  const int C = g_.chunk_tokens;
  const int32_t n_chunks = (seq.n_tokens + C - 1) / C;
  const int32_t set_index = layer * g_.n_kv_heads + head;
  HotSet& hs = sets_[set_index];
  FetchPlan plan;
  plan.lease = lease;
  plan.layer = layer;
  plan.head = head;
  plan.entries.resize(selected.size());
  // Pass 1: classify; pin hot hits first so pass 2's evictions cannot take them.
  std::vector<int32_t> missing;  // chunks not resident (duplicates possible)
  const size_t pins_before = pinned_.size();
  for (size_t i = 0; i < selected.size(); ++i) {
    const int32_t c = selected[i];
    if (c < 0 || c >= n_chunks) {
      for (size_t p = pins_before; p < pinned_.size(); ++p) sets_[set_index].unpin(pinned_[p].slot);
      pinned_.resize(pins_before);
      return make_error(StatusCode::kInvalidArgument, "kv tiers: selected chunk {} outside [0, {})", c, n_chunks);
    }
    FetchEntry& e = plan.entries[i];
    e.chunk = c;
    e.n_valid = std::min<int32_t>(C, seq.n_tokens - c * C);
    e.home = home_of(c, seq.n_tokens);
    if (e.home == ChunkHome::kSink) {
      e.slot = c;
    } else if (e.home == ChunkHome::kRing) {
      e.slot = size_.n_sink_chunks + c % size_.n_ring_chunks;
    } else if (const int32_t s = hs.find({lease.id, lease.generation, c}); s >= 0) {
      e.slot = s;
      pin(set_index, s);
    } else {
      missing.push_back(c);
      continue;
    }
    ++plan.n_hits;
  }
  std::sort(missing.begin(), missing.end());
  const int32_t need = static_cast<int32_t>(std::unique(missing.begin(), missing.end()) - missing.begin());
  if (need > hs.n_free() + hs.n_evictable()) {
    for (size_t p = pins_before; p < pinned_.size(); ++p) hs.unpin(pinned_[p].slot);
    pinned_.resize(pins_before);
    return make_error(StatusCode::kInvalidArgument,
                      "kv tiers: layer {} head {} needs {} hot slots, {} free or evictable of {} (raise "
                      "--device-kv-budget)",
                      layer, head, need, hs.n_free() + hs.n_evictable(), hs.n_slots());
  }
  // Pass 2: assign slots to the misses (a repeated chunk is a hit the second time).
  const int cpp = g_.page_tokens / C;
  FetchStats st;
  for (FetchEntry& e : plan.entries) {
    if (e.home != ChunkHome::kHot || e.slot >= 0) continue;
    const HotSet::Acquired a = hs.acquire({lease.id, lease.generation, e.chunk});
    e.slot = a.slot;  // >= 0: checked above
    pin(set_index, a.slot);
    if (a.hit) {
      ++plan.n_hits;
      continue;
    }
    e.miss = true;
    e.slot_epoch = hs.epoch(a.slot);
    e.src_block = seq.blocks[e.chunk / cpp];
    e.src_chunk_in_page = e.chunk % cpp;
    ++plan.n_misses;
    st.evictions += a.evicted;
  }
  for (const FetchEntry& e : plan.entries) st.resident_hits += e.home != ChunkHome::kHot;
  st.hits = plan.n_hits;
  st.misses = plan.n_misses;
  step_ += st;
  return plan;
}

void DeviceTier::execute(const FetchPlan& plan, const HostTier& host) {
  const bool live = leases_->is_live(plan.lease);
  const HotSet& hs = sets_[plan.layer * g_.n_kv_heads + plan.head];
  const HotKey owner_of = {plan.lease.id, plan.lease.generation, 0};
  for (const FetchEntry& e : plan.entries) {
    if (!e.miss) continue;
    HotKey k = owner_of;
    k.chunk = e.chunk;
    if (!live || !hs.resident(e.slot) || hs.epoch(e.slot) != e.slot_epoch || !(hs.key(e.slot) == k)) {
      ++step_.stale_dropped;
      continue;
    }
    const HostPiece src = host.chunk_ptr(e.src_block, plan.layer, plan.head, e.src_chunk_in_page);
    std::memcpy(slot_ptr(plan.layer, plan.head, e.slot), src.data, static_cast<size_t>(src.bytes));
    step_.bytes_moved += src.bytes;
  }
}

FetchStats DeviceTier::end_step() {
  for (const PinRecord& p : pinned_) {
    HotSet& hs = sets_[p.set];
    // A slot freed (cancel) or handed to another key since it was pinned has a new epoch.
    if (hs.resident(p.slot) && hs.epoch(p.slot) == p.epoch) hs.unpin(p.slot);
  }
  pinned_.clear();
  const FetchStats s = step_;
  total_ += s;
  step_ = FetchStats{};
  return s;
}

PieceView DeviceTier::piece(const FetchPlan& plan, const FetchEntry& e) const {
  const uint8_t* p = e.home == ChunkHome::kHot ? slot_ptr(plan.layer, plan.head, e.slot)
                                               : resident_ptr(plan.lease.id, plan.layer, plan.head, e.slot);
  return PieceView{p, &piece_};
}

int32_t DeviceTier::hot_slots_used() const {
  int32_t n = 0;
  for (const HotSet& s : sets_) n += s.n_resident();
  return n;
}

int32_t DeviceTier::hot_slots_pinned() const {
  int32_t n = 0;
  for (const HotSet& s : sets_) n += s.n_pinned();
  return n;
}

}  // namespace hs
