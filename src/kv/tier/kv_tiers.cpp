// kv/tier/kv_tiers.cpp — see kv_tiers.h.
#include "kv/tier/kv_tiers.h"

namespace hs {

Result<std::unique_ptr<KvTiers>> KvTiers::create(const TierGeometry& g, int32_t host_blocks,
                                                 const DeviceTierConfig& cfg) {
  HS_ASSIGN_OR_RETURN(HostTier host, HostTier::create(g, host_blocks));
  std::unique_ptr<KvTiers> t(new KvTiers(cfg.max_seqs, std::move(host)));
  HS_ASSIGN_OR_RETURN(t->device_, DeviceTier::create(g, cfg, &t->leases_));
  return t;
}

Result<TierSeq> KvTiers::start() {
  HS_ASSIGN_OR_RETURN(SeqLease lease, leases_.acquire());
  device_->open(lease);
  TierSeq seq;
  seq.lease = lease;
  return seq;
}

void KvTiers::write(const TierSeq& seq, int layer, int head, int32_t pos, const float* k, const float* v) {
  host_.write(seq.host, layer, head, pos, k, v);
  device_->write_resident_row(seq.lease, host_, seq.host, layer, head, pos);
}

void KvTiers::end(TierSeq& seq, int64_t* counter) {
  if (!leases_.is_live(seq.lease)) return;
  device_->close(seq.lease);
  host_.release(seq.host);
  (void)leases_.release(seq.lease);  // live: cannot fail
  seq.lease = SeqLease{};
  ++*counter;
}

TierUsage KvTiers::usage() const {
  TierUsage u;
  u.live_leases = leases_.n_live();
  u.host_blocks_used = host_.pool().n_used();
  u.open_regions = device_->n_open();
  u.hot_slots_used = device_->hot_slots_used();
  u.hot_slots_pinned = device_->hot_slots_pinned();
  return u;
}

}  // namespace hs
