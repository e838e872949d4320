// kv/recurrent_pool.cpp — see recurrent_pool.h.
#include "kv/recurrent_pool.h"

namespace hs {

RecurrentPool::RecurrentPool(KvCache& kv, int32_t n_slots)
    : kv_(kv), next_(kv.lease_listener()), owner_(static_cast<size_t>(n_slots)),
      slot_of_(static_cast<size_t>(kv.leases().capacity()), -1) {
  kv_.set_lease_listener(this);
}

RecurrentPool::~RecurrentPool() {
  if (kv_.lease_listener() == this) kv_.set_lease_listener(next_);
}

Result<int32_t> RecurrentPool::slot(SeqKv& seq, bool* fresh) {
  HS_ASSIGN_OR_RETURN(SeqLease lease, kv_.lease(seq));
  if (fresh) *fresh = false;
  const int32_t have = slot_of_[lease.id];
  if (have >= 0 && owner_[have] == lease) return have;
  if (fresh) *fresh = true;
  for (int32_t s = 0; s < n_slots(); ++s)
    if (!owner_[s].valid()) {
      owner_[s] = lease;
      slot_of_[lease.id] = s;
      ++n_used_;
      return s;
    }
  return make_error(StatusCode::kUnsupported, "recurrent state: all {} slots are held by live sequences",
                    n_slots());
}

void RecurrentPool::on_lease_end(const SeqLease& lease) {
  if (lease.id < slot_of_.size()) {
    const int32_t s = slot_of_[lease.id];
    if (s >= 0 && owner_[s] == lease) {
      owner_[s] = SeqLease{};
      --n_used_;
    }
    slot_of_[lease.id] = -1;
  }
  if (next_) next_->on_lease_end(lease);
}

}  // namespace hs
