// kv/tier/lease.cpp — see lease.h.
#include "kv/tier/lease.h"

namespace hs {

LeaseTable::LeaseTable(int32_t capacity) : gen_(capacity, 1), live_(capacity, 0) {
  for (int32_t i = 0; i < capacity; ++i) free_.push_back(static_cast<uint32_t>(i));
}

Result<SeqLease> LeaseTable::acquire() {
  if (free_.empty())
    return make_error(StatusCode::kInvalidArgument, "kv tiers: all {} sequence leases are in use", capacity());
  const uint32_t id = free_.front();
  free_.pop_front();
  live_[id] = 1;
  return SeqLease{id, gen_[id]};
}

Status LeaseTable::release(const SeqLease& lease) {
  if (!is_live(lease))
    return make_error(StatusCode::kInternal, "kv tiers: release of a lease that is not live (id {} gen {})",
                      lease.id, lease.generation);
  live_[lease.id] = 0;
  ++gen_[lease.id];
  free_.push_back(lease.id);
  return Status::ok();
}

}  // namespace hs
