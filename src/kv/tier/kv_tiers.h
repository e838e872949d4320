// kv/tier/kv_tiers.h — one object owning the three tier pools a sequence draws on: the
// lease table, the host tier (full history) and the device tier (sinks, ring, hot sets).
//
// The lifecycle every sequence follows:
//   start() → lease + resident region; reserve()/write()/commit() as tokens are appended
//   (each row is encoded once into the host page and copied into the sink/ring slot);
//   per sparse step plan() → execute() per (layer, kv head), attention reads the plan's
//   pieces, end_step(); finish() or cancel() releases host pages, hot slots, the resident
//   region and the lease (its generation moves on, so late copies for it are dropped).
// usage() is what tests compare with the baseline: after every sequence ends, all zero.
// Costs: those of the parts (host_tier.h, device_tier.h); no locking, the engine thread
// owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kv/tier/device_tier.h"
#include "kv/tier/host_tier.h"
#include "kv/tier/lease.h"

namespace hs {

struct TierSeq {
  SeqLease lease;
  HostSeq host;
  int32_t n_tokens() const { return host.n_tokens; }
};

struct TierUsage {
  int32_t live_leases = 0;
  int32_t host_blocks_used = 0;
  int32_t open_regions = 0;     // sequences holding a sink + ring region
  int32_t hot_slots_used = 0;   // over every (layer, kv head)
  int32_t hot_slots_pinned = 0;
  friend bool operator==(const TierUsage&, const TierUsage&) = default;
};

class KvTiers {
 public:
  // host_blocks pages of P tokens (every layer) in the host tier; cfg.max_seqs leases.
  static Result<std::unique_ptr<KvTiers>> create(const TierGeometry& g, int32_t host_blocks,
                                                 const DeviceTierConfig& cfg);

  Result<TierSeq> start();
  // Host pages for positions [0, n_tokens).
  Status reserve(TierSeq& seq, int32_t n_tokens) { return host_.reserve(seq.host, n_tokens); }
  // K and V [head_dim] of (layer, kv head, pos): host page + sink/ring slot.
  void write(const TierSeq& seq, int layer, int head, int32_t pos, const float* k, const float* v);
  // Positions [0, n_tokens) are written for every layer and head.
  void commit(TierSeq& seq, int32_t n_tokens) { seq.host.n_tokens = n_tokens; }

  Result<FetchPlan> plan(const TierSeq& seq, int layer, int head, const std::vector<int32_t>& selected) {
    return device_->plan(seq.lease, seq.host, layer, head, selected);
  }
  void execute(const FetchPlan& plan) { device_->execute(plan, host_); }
  FetchStats end_step() { return device_->end_step(); }
  PieceView piece(const FetchPlan& plan, const FetchEntry& e) const { return device_->piece(plan, e); }

  // Both release everything the sequence holds; a second call (or a stale copy of the
  // TierSeq) does nothing. Counted separately.
  void finish(TierSeq& seq) { end(seq, &n_finished_); }
  void cancel(TierSeq& seq) { end(seq, &n_cancelled_); }

  TierUsage usage() const;
  int64_t n_finished() const { return n_finished_; }
  int64_t n_cancelled() const { return n_cancelled_; }
  LeaseTable& leases() { return leases_; }
  HostTier& host() { return host_; }
  DeviceTier& device() { return *device_; }
  const HostTier& host() const { return host_; }
  const DeviceTier& device() const { return *device_; }

 private:
  KvTiers(int32_t max_seqs, HostTier host) : leases_(max_seqs), host_(std::move(host)) {}
  void end(TierSeq& seq, int64_t* counter);

  LeaseTable leases_;
  HostTier host_;
  std::unique_ptr<DeviceTier> device_;  // points at leases_: KvTiers is not movable
  int64_t n_finished_ = 0;
  int64_t n_cancelled_ = 0;
};

}  // namespace hs
