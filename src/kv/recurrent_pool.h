// kv/recurrent_pool.h — fixed slots of per-sequence recurrent state (hybrid models' conv and
// delta-rule state), keyed by the sequence's lease, and checkpoint slots of that state for the
// prefix cache.
//
// A Gated-DeltaNet layer keeps no KV: each sequence carries a fixed-size state instead (per
// linear layer (kernel - 1) · conv_dim conv inputs and n_v · k_dim · v_dim delta-rule floats).
// This pool hands out slot ids; the memory itself is the model's ([n_linear_layers] tensors
// of [n_total()][slot floats] in its backend's memory), as KvCache hands out block ids that
// index the backend's pages. Ids [0, n_slots) are live slots, [n_slots, n_total) checkpoints.
// A sequence's live slot is found through its SeqLease (taken from the KvCache on first use)
// and freed when that lease ends: KvCache::release, the one call every end of a sequence goes
// through (finish, cancel, timeout, error, preemption), tells this pool as one of its LeaseListeners (the
// device tier may be another). A slot's old contents never leak to its next
// owner: the backend ops start a sequence whose first step token is at position 0 from zeros.
//
// Checkpoints (kv/prefix_cache.h decides when): a copy of a live slot's state, named by the
// prefix hash of the page boundary it was taken at. They outlive the sequence; when all are in
// use one is overwritten by a two-class LRU: a *shared* checkpoint (saved at the end of a prefix
// that another conversation was seen to share, or restored at least once) is kept over an
// unshared one (a conversation's own prompt or rolling state, which may never be asked for
// again), so the least recently used unshared checkpoint goes first. Shared ones fill at most
// kMaxSharedShare of the slots: past that the least recently used shared one goes, so new
// prefixes always find room. A Checkpoint handle carries the slot's
// generation (bumped at every overwrite), so a stale handle can never drop or restore another
// prefix's state. The copies are the model's (set_copier: HybridDecoder installs it).
// Cost: O(1) per lookup (hash map), O(n_checkpoints) to find an LRU victim; one state copy
// (state_bytes_per_slot) per save or restore.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"

namespace hs {

class RecurrentPool final : public LeaseListener {
 public:
  // Copies the state of slot src into slot dst (ids in [0, n_total)).
  using Copier = std::function<Status(int32_t src, int32_t dst)>;
  struct Checkpoint {
    int32_t slot = -1;  // in [n_slots, n_total); -1: none
    uint32_t generation = 0;
    bool valid() const { return slot >= 0; }
    bool operator==(const Checkpoint&) const = default;
  };

  // Adds itself to `kv`'s lease listeners (kv must outlive this pool); removes itself when it dies.
  RecurrentPool(KvCache& kv, int32_t n_slots, int32_t n_checkpoints = 0);
  ~RecurrentPool() override;
  RecurrentPool(const RecurrentPool&) = delete;
  RecurrentPool& operator=(const RecurrentPool&) = delete;

  int32_t n_slots() const { return static_cast<int32_t>(owner_.size()); }
  int32_t n_checkpoints() const { return static_cast<int32_t>(ckpt_.size()); }
  int32_t n_total() const { return n_slots() + n_checkpoints(); }
  int32_t n_used() const { return n_used_; }                 // live slots held
  int32_t n_checkpoints_used() const { return static_cast<int32_t>(by_key_.size()); }
  int32_t n_checkpoints_shared() const { return n_shared_; }
  // The share of the checkpoint slots shared checkpoints may fill before they evict each other.
  static constexpr double kMaxSharedShare = 0.75;
  KvCache& kv() const { return kv_; }
  void set_copier(Copier c) { copy_ = std::move(c); }

  // The slot of `seq`, taking a lease and a free slot when it has none (*fresh = true then).
  // Error when every slot is held (the scheduler admits at most n_slots hybrid sequences).
  Result<int32_t> slot(SeqKv& seq, bool* fresh = nullptr);

  // Checkpoints, by key (a prefix hash).
  bool has(uint64_t key) const { return by_key_.count(key) != 0; }
  // Copies seq's live state into a checkpoint named `key` (the least recently used one is
  // overwritten when none is free, by the two-class LRU above); the existing one when `key` is
  // already saved (*saved = false then; `shared` still promotes it). Error without a live slot,
  // checkpoint slots or a copier.
  Result<Checkpoint> save(SeqKv& seq, uint64_t key, bool* saved = nullptr, bool shared = false);
  // Copies checkpoint `key` into seq's live slot (taken now: seq must be fresh, with no slot yet),
  // after which the slot counts as resumed (slot() says fresh = false); the checkpoint becomes
  // shared (it was reused). Error when `key` is not saved or no live slot is free.
  Status restore(uint64_t key, SeqKv& seq);
  // Frees the checkpoint if `c` still names it (a later overwrite makes c stale: then nothing).
  void drop(const Checkpoint& c);

  void on_lease_end(const SeqLease& lease) override;

 private:
  struct Ckpt {
    uint64_t key = 0;
    bool used = false;
    bool shared = false;
    uint32_t generation = 0;
    uint64_t last_use = 0;
  };
  int32_t take_live_slot(const SeqLease& lease);
  int32_t pick_victim() const;  // a free checkpoint, else by the two-class LRU
  void set_shared(Ckpt& c, bool shared);

  KvCache& kv_;
  Copier copy_;
  std::vector<SeqLease> owner_;       // [n_slots] lease holding each slot (invalid: free)
  std::vector<int32_t> slot_of_;      // [max_leases] slot of lease id, -1 none
  int32_t n_used_ = 0;
  std::vector<Ckpt> ckpt_;            // [n_checkpoints]
  std::unordered_map<uint64_t, int32_t> by_key_;  // key -> index into ckpt_
  uint64_t clock_ = 0;
  int32_t n_shared_ = 0;  // used checkpoints with shared set
};

}  // namespace hs
