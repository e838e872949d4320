// sparse/hot_chunks.h — the device tier of the sparse decode path: per (layer, kv head) a
// pool of hot chunk slots that the selected chunks are fetched into from the KV cache.
//
// What is where (docs/sparse-attention.md, "Device tier in the decode path"):
//   - the KvCache pages are the host tier, the source of truth;
//   - sink and window chunks (and the chunk being filled) are the always-resident part of a
//     selection: with Config::resident_seqs > 0 each sequence (lease) gets a resident region
//     per (layer, kv head) — its sink chunks and a ring of the last ceil(W/C) + 1 chunks (chunk
//     c in ring slot c mod ring) — kept in sync by sync_resident(), which copies only the rows
//     written since the last call (one row per decode step; the last W after a prefill). A
//     sequence without a region (all taken) reads them from the pages;
//   - every other selected chunk is looked up here by (lease id, generation, chunk): a hit
//     uses its slot, a miss takes a slot (a free one, else the least recently used unpinned
//     one: an eviction) and copies the piece in. Slots a step uses stay pinned until
//     end_step(), so another sequence's fetch in the same step cannot take them.
// A slot holds one kv head's chunk of C tokens of K|V exactly as the piece sits in a KV page
// ([C][K|V][head_dim] of the cache dtype, contiguous), so attention reads slots and host
// pieces with the same kernel (kv_attend_pieces) and the same float math.
// Bookkeeping is kv/tier/hot_set.h (residency map, O(1) LRU, pins, per-owner lists); leases
// come from the KvCache (kv/kv_cache.h): when one ends, on_lease_end frees its slots in every
// (layer, head), and its bumped generation keeps any copy keyed by it from ever hitting.
// Only full chunks may be fetched (their K|V never changes while the lease lives).
//
// Memory: budget_bytes split evenly over the full-attention (layer, kv head) pairs, in
// pieces of C · 2 · head_dim · elem bytes. Costs: fetch is O(chunks) hash lookups plus one
// memcpy per miss; on the CPU both tiers are RAM, so a "fetch" is a RAM-to-RAM copy that a
// GPU build would do over the bus — the counters are what matter here.
// Thread safety: fetch() calls for different (layer, head) pairs may run concurrently; all
// other calls belong to the engine thread between steps.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"
#include "kv/tier/hot_set.h"

namespace hs {

struct HotChunkStats {
  int64_t hits = 0;         // selected non-resident chunks found in their slot
  int64_t misses = 0;       // selected non-resident chunks copied into a slot
  int64_t bytes_moved = 0;  // misses × piece bytes
  int64_t evictions = 0;    // misses that took a slot from another chunk
  int64_t refused = 0;      // chunks of fetches that found no room (read from the pages instead)
  int64_t resident_bytes = 0;  // rows copied into the sink / ring regions
  HotChunkStats& operator+=(const HotChunkStats& o);
};

class HotChunks final : public LeaseListener {
 public:
  struct Config {
    int64_t budget_bytes = 256ll << 20;  // --device-kv-budget
    int chunk_tokens = 16;               // C (divides the page size)
    std::vector<bool> full_layer;        // [n_layer] layers that get slots (empty: all)
    // Resident sinks + window ring (0 sequences: none). Paid from budget_bytes first.
    int32_t resident_seqs = 0;
    int sink_tokens = 0;    // S
    int window_tokens = 0;  // W
  };
  // Adds itself to `kv`'s lease listeners (removed when it dies); error when the budget does not pay for one
  // slot per full (layer, kv head).
  static Result<std::unique_ptr<HotChunks>> create(KvCache& kv, const Config& cfg);
  ~HotChunks() override;
  HotChunks(const HotChunks&) = delete;
  HotChunks& operator=(const HotChunks&) = delete;

  int chunk_tokens() const { return C_; }
  int64_t piece_bytes() const { return piece_.bytes; }
  const PieceLayout& piece_layout() const { return piece_; }
  int32_t slots_per_set() const { return n_slots_; }
  int64_t bytes() const { return static_cast<int64_t>(sets_.size()) * n_slots_ * piece_.bytes; }

  // Chunk `chunk` of (layer, kv head) of `seq` in its KV page: [C][K|V][head_dim].
  const uint8_t* host_piece(const SeqKv& seq, int layer, int head, int32_t chunk) const;
  // Slot `slot` of (layer, kv head): [C][K|V][head_dim].
  const uint8_t* slot_ptr(int layer, int head, int32_t slot) const {
    return slot_bytes_.get() + (set_base_[layer * n_kv_heads_ + head] + slot) * piece_.bytes;
  }

  // Makes the full chunks `chunks` (unique) of (layer, head) of `seq` hot and writes their
  // slots to `slots` [chunks.size()]; seq.lease must be live. Hits first (pinned), then
  // misses (slot + copy, pinned). Returns false and changes nothing but the `refused`
  // counter when the misses need more slots than are free or unpinned.
  // With `copies`, the misses' piece copies are not done here but appended as {slot bytes,
  // host piece} pairs (piece_bytes() each) for the caller to run before the slots are read,
  // e.g. by the attention task that reads the slot next (the copy then leaves the piece in
  // that thread's cache) — the bookkeeping and counters are the same.
  struct PendingCopy {
    uint8_t* dst;
    const uint8_t* src;
    int32_t index;  // into chunks / slots
  };
  bool fetch(const SeqKv& seq, int layer, int head, std::span<const int32_t> chunks, std::span<int32_t> slots,
             std::vector<PendingCopy>* copies = nullptr);
  // Resident region of `seq` (sinks + window ring in every full (layer, kv head)): taken on
  // first use, freed when the lease ends. False when every region is in use or there are
  // none (the caller then reads sinks and window from the pages). Engine thread only.
  bool acquire_resident(const SeqKv& seq);
  // Copies the rows of (layer, head) of `seq` written since the last call that belong in its
  // sinks or ring, so they hold keys [0, n_keys) as needed. The region must be acquired.
  // Calls for different (layer, head) pairs may run concurrently.
  void sync_resident(const SeqKv& seq, int layer, int head, int32_t n_keys);
  // The resident copy of `chunk` (a sink chunk, or a chunk still in the ring after the last
  // sync), as a piece of piece_layout(); null if not resident.
  const uint8_t* resident_piece(const SeqKv& seq, int layer, int head, int32_t chunk) const;
  int32_t resident_regions_used() const;
  int32_t ring_chunks() const { return ring_chunks_; }

  // Unpins every slot pinned since the last call; returns this step's counters and adds
  // them to total().
  HotChunkStats end_step();
  const HotChunkStats& total() const { return total_; }

  // Frees every slot of lease.id in every (layer, head) (KvCache::release calls it).
  void on_lease_end(const SeqLease& lease) override;

  int32_t slots_total() const;   // over every full (layer, kv head)
  int32_t slots_used() const;    // resident
  int32_t slots_pinned() const;
  // nullptr for a layer without slots.
  const HotSet* hot_set(int layer, int head) const;

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  struct PinRecord {
    int32_t slot;
    uint32_t epoch;
  };
  struct Set {  // one (layer, kv head); touched by one thread at a time
    HotSet hot;
    std::vector<PinRecord> pins;  // pinned since the last end_step
    HotChunkStats step;
    Set(int32_t n_slots, int32_t max_owners) : hot(n_slots, max_owners) {}
  };
  HotChunks(KvCache& kv, int C, int32_t n_slots, const std::vector<bool>& full_layer, const Config& cfg);
  // Region r, set si, piece p (sinks first, then the ring).
  uint8_t* region_piece(int32_t r, int32_t si, int32_t p) const {
    return region_bytes_.get() + ((static_cast<int64_t>(r) * sets_.size() + si) * region_pieces_ + p) * piece_.bytes;
  }
  struct Region {
    bool used = false;
    std::vector<int32_t> synced;  // [n_sets] keys whose rows have been considered (copied where they belong)
  };

  KvCache& kv_;
  int C_;
  int n_kv_heads_;
  int32_t n_slots_;               // per full (layer, kv head)
  PieceLayout piece_;
  std::vector<int32_t> set_index_;  // [n_layer * n_kv_heads] index into sets_, -1: no slots
  std::vector<int64_t> set_base_;   // [n_layer * n_kv_heads] first slot of the pair in slot_bytes_
  std::vector<Set> sets_;           // [full (layer, kv head) pairs]
  // [n_sets][n_slots][C][K|V][head_dim] cache dtype; calloc: pages are touched when first used.
  std::unique_ptr<uint8_t, FreeDeleter> slot_bytes_;
  // Resident regions: [resident_seqs][n_sets][sink_chunks + ring_chunks] pieces.
  int32_t sink_chunks_ = 0, ring_chunks_ = 0, region_pieces_ = 0;
  std::vector<Region> regions_;             // [resident_seqs]
  std::vector<int32_t> region_of_lease_;    // [lease capacity] region index, -1: none
  std::unique_ptr<uint8_t, FreeDeleter> region_bytes_;
  HotChunkStats total_;
};

}  // namespace hs
