// kv/recurrent_pool.h — fixed slots of per-sequence recurrent state (hybrid models' conv and
// delta-rule state), keyed by the sequence's lease.
//
// A Gated-DeltaNet layer keeps no KV: each sequence carries a fixed-size state instead (per
// linear layer (kernel - 1) · conv_dim conv inputs and n_v · k_dim · v_dim delta-rule floats).
// This pool hands out slot ids; the memory itself is the model's ([n_linear_layers] tensors
// of [n_slots][slot floats] in its backend's memory), as KvCache hands out block ids that
// index the backend's pages. A sequence's slot is found through its SeqLease (taken from the
// KvCache on first use) and freed when that lease ends: KvCache::release, the one call every
// end of a sequence goes through, tells this pool as its LeaseListener (any listener that was
// there before keeps being told). A slot's old contents never leak to its next owner: the
// backend ops start a sequence whose first step token is at position 0 from zeros.
// Not yet: checkpoints of the state at page boundaries for the prefix cache (issue 15).
// Cost: O(1) per lookup; memory [max_leases] ints here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"

namespace hs {

class RecurrentPool final : public LeaseListener {
 public:
  // Attaches to `kv` (which must outlive this pool) as its lease listener, chaining the
  // listener already there.
  RecurrentPool(KvCache& kv, int32_t n_slots);
  ~RecurrentPool() override;
  RecurrentPool(const RecurrentPool&) = delete;
  RecurrentPool& operator=(const RecurrentPool&) = delete;

  int32_t n_slots() const { return static_cast<int32_t>(owner_.size()); }
  int32_t n_used() const { return n_used_; }
  KvCache& kv() const { return kv_; }

  // The slot of `seq`, taking a lease and a free slot when it has none (*fresh = true then).
  // Error when every slot is held (the scheduler admits at most n_slots hybrid sequences).
  Result<int32_t> slot(SeqKv& seq, bool* fresh = nullptr);

  void on_lease_end(const SeqLease& lease) override;

 private:
  KvCache& kv_;
  LeaseListener* next_ = nullptr;
  std::vector<SeqLease> owner_;       // [n_slots] lease holding each slot (invalid: free)
  std::vector<int32_t> slot_of_;      // [max_leases] slot of lease id, -1 none
  int32_t n_used_ = 0;
};

}  // namespace hs
