// kv/tier/lease.h — sequence leases with generation counters.
//
// A sequence's claim on tier resources (host pages, its resident sink/ring region, hot
// slots) is a SeqLease {id, generation}. The id is a small dense index (< capacity) other
// pools use directly as an array index (the device tier's per-sequence region, the hot
// sets' owner lists). Releasing a lease bumps its id's generation, so every plan, copy or
// handle made under the old generation is recognizably stale: `is_live` is false for it
// forever, even after the id is handed to another sequence. Ids are reused FIFO (the least
// recently released first) so a fresh id is not the one a late copy was aimed at.
// Cost: O(1) per operation; not thread-safe (the engine thread owns it).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/status.h"

namespace hs {

struct SeqLease {
  static constexpr uint32_t kNone = 0xffffffffu;
  uint32_t id = kNone;
  uint32_t generation = 0;
  bool valid() const { return id != kNone; }
  friend bool operator==(const SeqLease&, const SeqLease&) = default;
};

class LeaseTable {
 public:
  explicit LeaseTable(int32_t capacity);

  // A live lease with a free id; error when all `capacity` ids are live.
  Result<SeqLease> acquire();
  // Ends the lease: bumps the generation and frees the id. Error (no effect) when the lease
  // is not live (double release, or a stale copy of a lease).
  Status release(const SeqLease& lease);
  bool is_live(const SeqLease& lease) const {
    return lease.id < live_.size() && live_[lease.id] && gen_[lease.id] == lease.generation;
  }
  uint32_t generation(uint32_t id) const { return gen_[id]; }

  int32_t capacity() const { return static_cast<int32_t>(gen_.size()); }
  int32_t n_live() const { return capacity() - static_cast<int32_t>(free_.size()); }

 private:
  std::vector<uint32_t> gen_;  // [capacity] current generation of each id (starts at 1)
  std::vector<uint8_t> live_;  // [capacity] 1 while leased
  std::deque<uint32_t> free_;  // ids not leased, least recently released first
};

}  // namespace hs
