// kv/tier/device_tier.h — the device tier: what attention reads on a sparse step.
//
// Two regions, both in the piece format of kv/kv_quant.h (the host tier's bytes, copied
// as is, so a fetch is one copy per piece and the attention kernels read either tier):
//   - resident: per lease id, per (layer, kv head), the sink chunks (first S tokens) and a
//     ring of R = W/C + 1 chunk slots holding the recent window of W tokens plus the chunk
//     being filled. New tokens' rows land here as they are appended (chunk c → ring slot
//     c % R), so sinks and the window never cross the bus.
//     [max_seqs][n_layer][n_kv_heads][S/C + R][piece stride]
//   - hot: per (layer, kv head) a HotSet of chunk slots with residency map + LRU.
//     [n_layer][n_kv_heads][n_hot_slots][piece stride]
// --device-kv-budget BYTES pays for the resident region of max_seqs sequences first; the
// rest is split evenly into hot slots over every (layer, kv head) (each selects the same
// token budget per step).
//
// A step: plan() per (sequence, layer, kv head) classifies each selected chunk as a hit
// (sink, ring, or hot) or a miss (assigned a hot slot, evicting the LRU unpinned one), and
// pins every hot slot it uses until end_step(); execute() copies the misses from the host
// tier, dropping any entry whose lease generation or slot epoch changed since planning (a
// cancelled sequence, a reused slot). Counters: hits, misses, bytes moved, evictions,
// stale drops — per step and cumulative. Costs: plan O(selected) hash lookups; execute one
// memcpy of piece.bytes per miss. Not thread-safe: the engine thread plans and executes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kv/kv_quant.h"
#include "kv/tier/host_tier.h"
#include "kv/tier/hot_set.h"
#include "kv/tier/lease.h"

namespace hs {

struct DeviceTierConfig {
  int64_t budget_bytes = 0;     // --device-kv-budget
  int32_t max_seqs = 16;        // sequences with a resident region (= lease capacity)
  int32_t sink_tokens = 16;     // S, a multiple of C
  int32_t window_tokens = 256;  // W, a multiple of C
};

// How a budget is spent (DeviceTier::size_for).
struct DeviceTierSizing {
  int32_t n_sink_chunks = 0;         // S / C
  int32_t n_ring_chunks = 0;         // W / C + 1
  int64_t resident_bytes_per_seq = 0;
  int64_t resident_bytes = 0;        // max_seqs * resident_bytes_per_seq
  int32_t n_hot_slots = 0;           // per (layer, kv head)
  int64_t hot_bytes = 0;
};

enum class ChunkHome : uint8_t { kSink, kRing, kHot };

struct FetchEntry {
  int32_t chunk = 0;        // chunk index in the sequence (tokens [chunk*C, chunk*C + C))
  ChunkHome home = ChunkHome::kHot;
  bool miss = false;        // needs a host → device copy
  int32_t slot = -1;        // hot slot, or index in the sequence's resident region
  uint32_t slot_epoch = 0;  // hot slot's epoch when planned
  int32_t src_block = -1;   // host page holding the chunk
  int32_t src_chunk_in_page = 0;
  int32_t n_valid = 0;      // tokens of the chunk that hold K/V (C except the last chunk)
};

struct FetchPlan {
  SeqLease lease;
  int layer = 0;
  int head = 0;
  std::vector<FetchEntry> entries;  // one per selected chunk, in selection order
  int32_t n_hits = 0;
  int32_t n_misses = 0;
};

struct FetchStats {
  int64_t hits = 0;           // selected chunks already on the device (sink, ring or hot)
  int64_t resident_hits = 0;  // of the hits, sink or ring chunks
  int64_t misses = 0;         // selected chunks assigned a hot slot to fill from the host
  int64_t bytes_moved = 0;    // host → device bytes actually copied
  int64_t evictions = 0;      // hot slots taken from another chunk
  int64_t stale_dropped = 0;  // planned copies dropped: lease ended or slot changed hands
  FetchStats& operator+=(const FetchStats& o);
};

class DeviceTier {
 public:
  static Result<DeviceTierSizing> size_for(const TierGeometry& g, const DeviceTierConfig& cfg);
  // `leases` decides liveness in execute(); its capacity must be >= cfg.max_seqs.
  static Result<std::unique_ptr<DeviceTier>> create(const TierGeometry& g, const DeviceTierConfig& cfg,
                                                    const LeaseTable* leases);

  // Sequence lifecycle: open() claims the resident region of lease.id; close() frees it
  // and every hot slot of lease.id in every (layer, head).
  void open(const SeqLease& lease);
  void close(const SeqLease& lease);

  // Copies the encoded K|V rows of `pos` (and their scales) from the host tier into the
  // resident region: the sink slot for chunks < S/C, else ring slot (pos / C) % R.
  void write_resident_row(const SeqLease& lease, const HostTier& host, const HostSeq& seq, int layer, int head,
                          int32_t pos);

  // Plans the selected chunks (indices < ceil(seq.n_tokens / C)) of one (layer, head).
  // Error (nothing changed) when the lease is not live, a chunk is out of range, or the
  // misses need more slots than are free or unpinned.
  Result<FetchPlan> plan(const SeqLease& lease, const HostSeq& seq, int layer, int head,
                         const std::vector<int32_t>& selected);
  // Copies the plan's misses host → device; drops stale ones (counted).
  void execute(const FetchPlan& plan, const HostTier& host);
  // Unpins every slot pinned by this step's plans; returns the step's stats and adds them
  // to the totals.
  FetchStats end_step();

  // The piece an entry resolves to (valid after execute, until end_step).
  PieceView piece(const FetchPlan& plan, const FetchEntry& e) const;
  uint8_t* slot_ptr(int layer, int head, int32_t slot) {
    return hot_.get() + ((static_cast<int64_t>(layer) * g_.n_kv_heads + head) * size_.n_hot_slots + slot) *
                            piece_.stride;
  }
  uint8_t* resident_ptr(uint32_t lease_id, int layer, int head, int32_t index) {
    const int32_t per = size_.n_sink_chunks + size_.n_ring_chunks;
    return resident_.get() +
           (((static_cast<int64_t>(lease_id) * g_.n_layer + layer) * g_.n_kv_heads + head) * per + index) *
               piece_.stride;
  }
  const uint8_t* slot_ptr(int layer, int head, int32_t slot) const {
    return const_cast<DeviceTier*>(this)->slot_ptr(layer, head, slot);
  }
  const uint8_t* resident_ptr(uint32_t lease_id, int layer, int head, int32_t index) const {
    return const_cast<DeviceTier*>(this)->resident_ptr(lease_id, layer, head, index);
  }

  // Where chunk `chunk` of a sequence with n_tokens tokens lives on the device.
  ChunkHome home_of(int32_t chunk, int32_t n_tokens) const;

  const TierGeometry& geometry() const { return g_; }
  const DeviceTierSizing& sizing() const { return size_; }
  const PieceLayout& piece_layout() const { return piece_; }
  const HotSet& hot_set(int layer, int head) const { return sets_[layer * g_.n_kv_heads + head]; }
  int32_t n_open() const { return n_open_; }
  int32_t hot_slots_used() const;    // resident hot slots over every (layer, head)
  int32_t hot_slots_pinned() const;
  const FetchStats& step_stats() const { return step_; }
  const FetchStats& total_stats() const { return total_; }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  struct PinRecord {
    int32_t set;
    int32_t slot;
    uint32_t epoch;
  };
  DeviceTier(const TierGeometry& g, const DeviceTierConfig& cfg, const DeviceTierSizing& size,
             const LeaseTable* leases);
  void pin(int32_t set, int32_t slot);

  TierGeometry g_;
  DeviceTierConfig cfg_;
  DeviceTierSizing size_;
  PieceLayout piece_;
  const LeaseTable* leases_;
  std::unique_ptr<uint8_t, FreeDeleter> resident_;  // [max_seqs][n_layer][n_kv_heads][S/C + R][stride]
  std::unique_ptr<uint8_t, FreeDeleter> hot_;       // [n_layer][n_kv_heads][n_hot_slots][stride]
  std::vector<HotSet> sets_;                        // [n_layer * n_kv_heads]
  std::vector<uint8_t> open_;                       // [max_seqs] resident region in use
  int32_t n_open_ = 0;
  std::vector<PinRecord> pinned_;                   // pins taken this step
  FetchStats step_, total_;
};

}  // namespace hs
