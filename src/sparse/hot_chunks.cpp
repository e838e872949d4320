// sparse/hot_chunks.cpp — see hot_chunks.h.
#include "sparse/hot_chunks.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cstring>

namespace hs {

HotChunkStats& HotChunkStats::operator+=(const HotChunkStats& o) {
  hits += o.hits;
  misses += o.misses;
  bytes_moved += o.bytes_moved;
  resident_bytes += o.resident_bytes;
  evictions += o.evictions;
  refused += o.refused;
  return *this;
}

Result<std::unique_ptr<HotChunks>> HotChunks::create(KvCache& kv, const Config& cfg) {
  const KvGeometry& g = kv.geometry();
  const int C = cfg.chunk_tokens;
  if (C <= 0 || C > 64 || g.page_tokens % C != 0)
    return make_error(StatusCode::kInvalidArgument, "hot chunks: chunk size {} must divide the page size {} (<= 64)",
                      C, g.page_tokens);
  std::vector<bool> full = cfg.full_layer.empty() ? std::vector<bool>(g.n_layer, true) : cfg.full_layer;
  if (static_cast<int>(full.size()) != g.n_layer)
    return make_error(StatusCode::kInvalidArgument, "hot chunks: full_layer has {} entries for {} layers", full.size(),
                      g.n_layer);
  int64_t n_sets = 0;
  for (bool f : full) n_sets += f ? g.n_kv_heads : 0;
  if (!kv_dtype_plain(g.dtype) && C != g.page_tokens)
    return make_error(StatusCode::kInvalidArgument,
                      "hot chunks: a {} KV cache keeps per-token scales after each page's rows, so the sparse chunk "
                      "({}) must equal the page size ({})", kv_dtype_name(g.dtype), C, g.page_tokens);
  const int64_t piece = PieceLayout::make(g.dtype, g.head_dim, C).bytes;
  const int64_t region_pieces =
      cfg.resident_seqs > 0 ? (cfg.sink_tokens + C - 1) / C + (cfg.window_tokens + C - 1) / C + 1 : 0;
  const int64_t region_bytes = static_cast<int64_t>(cfg.resident_seqs) * n_sets * region_pieces * piece;
  const int64_t slots = n_sets > 0 ? (cfg.budget_bytes - region_bytes) / (n_sets * piece) : 0;
  if (slots < 1)
    return make_error(StatusCode::kInvalidArgument,
                      "--device-kv-budget {} B is too small: one hot slot per full-attention (layer, kv head) takes "
                      "{} x {} B after {} B of resident sinks + window for {} sequences (use 0 for no device tier)",
                      cfg.budget_bytes, n_sets, piece, region_bytes, cfg.resident_seqs);
  const int32_t n_slots = static_cast<int32_t>(std::min<int64_t>(slots, INT32_MAX / 2));
  std::unique_ptr<HotChunks> h(new HotChunks(kv, C, n_slots, full, cfg));
  if (!h->slot_bytes_ || (region_bytes > 0 && !h->region_bytes_))
    return make_error(StatusCode::kInvalidArgument, "hot chunks: cannot allocate {} bytes", h->bytes());
  kv.add_lease_listener(h.get());
  return h;
}

HotChunks::HotChunks(KvCache& kv, int C, int32_t n_slots, const std::vector<bool>& full_layer, const Config& cfg)
    : kv_(kv), C_(C), n_kv_heads_(kv.geometry().n_kv_heads), n_slots_(n_slots) {
  const KvGeometry& g = kv.geometry();
  piece_ = PieceLayout::make(g.dtype, g.head_dim, C);
  set_index_.assign(static_cast<size_t>(g.n_layer) * n_kv_heads_, -1);
  set_base_.assign(set_index_.size(), 0);
  int64_t n_sets = 0;
  for (int l = 0; l < g.n_layer; ++l)
    if (full_layer[l]) n_sets += n_kv_heads_;
  sets_.reserve(n_sets);
  for (int l = 0; l < g.n_layer; ++l) {
    if (!full_layer[l]) continue;
    for (int h = 0; h < n_kv_heads_; ++h) {
      const size_t i = static_cast<size_t>(l) * n_kv_heads_ + h;
      set_index_[i] = static_cast<int32_t>(sets_.size());
      set_base_[i] = static_cast<int64_t>(sets_.size()) * n_slots;
      sets_.emplace_back(n_slots, kv.leases().capacity());
    }
  }
  slot_bytes_.reset(static_cast<uint8_t*>(std::calloc(static_cast<size_t>(bytes()), 1)));
  if (cfg.resident_seqs > 0) {
    sink_chunks_ = (cfg.sink_tokens + C - 1) / C;
    ring_chunks_ = (cfg.window_tokens + C - 1) / C + 1;  // a window not aligned to C spans one more
    region_pieces_ = sink_chunks_ + ring_chunks_;
    regions_.resize(cfg.resident_seqs);
    for (Region& r : regions_) r.synced.assign(sets_.size(), 0);
    region_of_lease_.assign(kv.leases().capacity(), -1);
    region_bytes_.reset(static_cast<uint8_t*>(
        std::calloc(static_cast<size_t>(cfg.resident_seqs) * sets_.size() * region_pieces_ * piece_.bytes, 1)));
  }
}

bool HotChunks::acquire_resident(const SeqKv& seq) {
  if (regions_.empty() || !kv_.leases().is_live(seq.lease)) return false;
  if (region_of_lease_[seq.lease.id] >= 0) return true;
  for (size_t r = 0; r < regions_.size(); ++r) {
    if (regions_[r].used) continue;
    regions_[r].used = true;
    std::fill(regions_[r].synced.begin(), regions_[r].synced.end(), 0);
    region_of_lease_[seq.lease.id] = static_cast<int32_t>(r);
    return true;
  }
  return false;
}

void HotChunks::sync_resident(const SeqKv& seq, int layer, int head, int32_t n_keys) {
  const int32_t r = region_of_lease_[seq.lease.id];
  const int32_t si = set_index_[layer * n_kv_heads_ + head];
  assert(r >= 0 && si >= 0);
  int32_t& synced = regions_[r].synced[si];
  if (n_keys < synced) synced = 0;  // cannot happen within a lease; start over rather than read stale rows
  const int32_t sink_end = std::min(n_keys, sink_chunks_ * C_);
  // The ring keeps chunks [last - ring + 1, last]: rows older than its first chunk are not copied.
  const int32_t ring_begin = std::max(0, ((n_keys - 1) / C_ - ring_chunks_ + 1) * C_);
  const int64_t data = 2 * piece_.row_bytes, scales = 2LL * piece_.scale_bytes;  // one token's K|V rows, scales
  int64_t moved = 0;
  auto copy_row = [&](int32_t t, uint8_t* dst_piece) {
    const uint8_t* src = host_piece(seq, layer, head, t / C_);
    const int row = t % C_;
    std::memcpy(dst_piece + piece_.row_offset(row, 0), src + piece_.row_offset(row, 0), static_cast<size_t>(data));
    if (scales > 0)
      std::memcpy(dst_piece + piece_.scale_offset(row, 0), src + piece_.scale_offset(row, 0),
                  static_cast<size_t>(scales));
    moved += data + scales;
  };
  for (int32_t t = synced; t < sink_end; ++t) copy_row(t, region_piece(r, si, t / C_));
  for (int32_t t = std::max(synced, ring_begin); t < n_keys; ++t)
    copy_row(t, region_piece(r, si, sink_chunks_ + (t / C_) % ring_chunks_));
  synced = n_keys;
  sets_[si].step.resident_bytes += moved;
}

const uint8_t* HotChunks::resident_piece(const SeqKv& seq, int layer, int head, int32_t chunk) const {
  if (regions_.empty() || !seq.lease.valid()) return nullptr;
  const int32_t r = region_of_lease_[seq.lease.id];
  const int32_t si = set_index_[layer * n_kv_heads_ + head];
  if (r < 0 || si < 0) return nullptr;
  const int32_t synced = regions_[r].synced[si];
  if (chunk < sink_chunks_ && chunk * C_ < synced) return region_piece(r, si, chunk);
  if (synced == 0) return nullptr;
  const int32_t last = (synced - 1) / C_;
  if (chunk <= last && chunk > last - ring_chunks_) return region_piece(r, si, sink_chunks_ + chunk % ring_chunks_);
  return nullptr;
}

int32_t HotChunks::resident_regions_used() const {
  int32_t n = 0;
  for (const Region& r : regions_) n += r.used;
  return n;
}

HotChunks::~HotChunks() {
  kv_.remove_lease_listener(this);
}

const uint8_t* HotChunks::host_piece(const SeqKv& seq, int layer, int head, int32_t chunk) const {
  const KvGeometry& g = kv_.geometry();
  const int32_t pos = chunk * C_;
  // Plain dtypes: C consecutive rows of the page's block; scaled dtypes: C == P, the block.
  return kv_.head_block(layer, seq.blocks[pos / g.page_tokens], head) +
         kv_.head_layout().row_offset(pos % g.page_tokens, 0);
}

bool HotChunks::fetch(const SeqKv& seq, int layer, int head, std::span<const int32_t> chunks,
                      std::span<int32_t> slots, std::vector<PendingCopy>* copies) {
  assert(slots.size() >= chunks.size());
  assert(kv_.leases().is_live(seq.lease));
  const int32_t si = set_index_[layer * n_kv_heads_ + head];
  assert(si >= 0);
  Set& set = sets_[si];
  HotSet& hs = set.hot;
  const uint32_t id = seq.lease.id, gen = seq.lease.generation;
  // Pass 1: hits, pinned at once so pass 2's evictions cannot take them.
  const size_t pins_before = set.pins.size();
  int32_t need = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    assert((chunks[i] + 1) * C_ <= static_cast<int32_t>(seq.blocks.size()) * kv_.geometry().page_tokens);
    const int32_t s = hs.find({id, gen, chunks[i]});
    slots[i] = s;
    if (s >= 0) {
      hs.pin(s);
      set.pins.push_back({s, hs.epoch(s)});
    } else {
      ++need;
    }
  }
  if (need > hs.n_free() + hs.n_evictable()) {
    for (size_t p = pins_before; p < set.pins.size(); ++p) hs.unpin(set.pins[p].slot);
    set.pins.resize(pins_before);
    set.step.refused += static_cast<int64_t>(chunks.size());
    std::fill(slots.begin(), slots.begin() + chunks.size(), -1);
    return false;
  }
  // Pass 2: misses take a slot (free, else LRU eviction) and get their piece copied in.
  HotChunkStats& st = set.step;
  st.hits += static_cast<int64_t>(chunks.size()) - need;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (slots[i] >= 0) continue;
    const HotSet::Acquired a = hs.acquire({id, gen, chunks[i]});
    assert(a.slot >= 0 && !a.hit);
    hs.pin(a.slot);
    set.pins.push_back({a.slot, hs.epoch(a.slot)});
    uint8_t* dst = slot_bytes_.get() + (set_base_[layer * n_kv_heads_ + head] + a.slot) * piece_.bytes;
    const uint8_t* src = host_piece(seq, layer, head, chunks[i]);
    if (copies)
      copies->push_back({dst, src, static_cast<int32_t>(i)});
    else
      std::memcpy(dst, src, static_cast<size_t>(piece_.bytes));
    slots[i] = a.slot;
    ++st.misses;
    st.bytes_moved += piece_.bytes;
    st.evictions += a.evicted;
  }
  return true;
}

HotChunkStats HotChunks::end_step() {
  HotChunkStats s;
  for (Set& set : sets_) {
    for (const PinRecord& p : set.pins)
      // A slot freed (lease ended) or handed to another key since it was pinned has a new epoch.
      if (set.hot.resident(p.slot) && set.hot.epoch(p.slot) == p.epoch) set.hot.unpin(p.slot);
    set.pins.clear();
    s += set.step;
    set.step = HotChunkStats{};
  }
  total_ += s;
  return s;
}

void HotChunks::on_lease_end(const SeqLease& lease) {
  if (!lease.valid()) return;
  for (Set& set : sets_) set.hot.release_owner(lease.id);
  if (!region_of_lease_.empty() && region_of_lease_[lease.id] >= 0) {
    regions_[region_of_lease_[lease.id]].used = false;
    region_of_lease_[lease.id] = -1;
  }
}

int32_t HotChunks::slots_total() const { return static_cast<int32_t>(sets_.size()) * n_slots_; }

int32_t HotChunks::slots_used() const {
  int32_t n = 0;
  for (const Set& s : sets_) n += s.hot.n_resident();
  return n;
}

int32_t HotChunks::slots_pinned() const {
  int32_t n = 0;
  for (const Set& s : sets_) n += s.hot.n_pinned();
  return n;
}

const HotSet* HotChunks::hot_set(int layer, int head) const {
  const int32_t si = set_index_[layer * n_kv_heads_ + head];
  return si < 0 ? nullptr : &sets_[si].hot;
}

}  // namespace hs
