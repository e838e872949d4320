// kv/recurrent_pool.cpp — see recurrent_pool.h.
#include "kv/recurrent_pool.h"

#include <algorithm>

namespace hs {

RecurrentPool::RecurrentPool(KvCache& kv, int32_t n_slots, int32_t n_checkpoints)
    : kv_(kv), owner_(static_cast<size_t>(n_slots)),
      slot_of_(static_cast<size_t>(kv.leases().capacity()), -1), ckpt_(static_cast<size_t>(std::max(0, n_checkpoints))) {
  kv_.add_lease_listener(this);
}

RecurrentPool::~RecurrentPool() { kv_.remove_lease_listener(this); }

int32_t RecurrentPool::take_live_slot(const SeqLease& lease) {
  for (int32_t s = 0; s < n_slots(); ++s)
    if (!owner_[s].valid()) {
      owner_[s] = lease;
      slot_of_[lease.id] = s;
      ++n_used_;
      return s;
    }
  return -1;
}

Result<int32_t> RecurrentPool::slot(SeqKv& seq, bool* fresh) {
  HS_ASSIGN_OR_RETURN(SeqLease lease, kv_.lease(seq));
  if (fresh) *fresh = false;
  const int32_t have = slot_of_[lease.id];
  if (have >= 0 && owner_[have] == lease) return have;
  if (fresh) *fresh = true;
  const int32_t s = take_live_slot(lease);
  if (s >= 0) return s;
  return make_error(StatusCode::kUnsupported, "recurrent state: all {} slots are held by live sequences",
                    n_slots());
}

void RecurrentPool::set_shared(Ckpt& c, bool shared) {
  if (c.shared == shared) return;
  n_shared_ += shared ? 1 : -1;
  c.shared = shared;
}

int32_t RecurrentPool::pick_victim() const {
  const int32_t cap = static_cast<int32_t>(kMaxSharedShare * n_checkpoints());
  // Unshared first, unless the shared ones already fill more than their share (or there is no
  // unshared one): then the least recently used shared one.
  const bool from_shared = n_shared_ > cap || n_shared_ == n_checkpoints();
  int32_t victim = -1;
  for (int32_t i = 0; i < n_checkpoints(); ++i) {
    const Ckpt& c = ckpt_[i];
    if (!c.used) return i;
    if (c.shared != from_shared) continue;
    if (victim < 0 || c.last_use < ckpt_[victim].last_use) victim = i;
  }
  return victim;
}

Result<RecurrentPool::Checkpoint> RecurrentPool::save(SeqKv& seq, uint64_t key, bool* saved, bool shared) {
  if (saved) *saved = false;
  if (ckpt_.empty()) return make_error(StatusCode::kUnsupported, "recurrent state: no checkpoint slots");
  if (!copy_) return make_error(StatusCode::kUnsupported, "recurrent state: no model attached to copy the state");
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    Ckpt& c = ckpt_[it->second];
    c.last_use = ++clock_;
    if (shared) set_shared(c, true);
    return Checkpoint{n_slots() + it->second, c.generation};
  }
  const SeqLease lease = seq.lease;
  const int32_t live = lease.valid() && lease.id < slot_of_.size() ? slot_of_[lease.id] : -1;
  if (live < 0 || !(owner_[live] == lease))
    return make_error(StatusCode::kInvalidArgument, "recurrent state: checkpoint of a sequence without a slot");
  const int32_t victim = pick_victim();
  Ckpt& c = ckpt_[victim];
  if (c.used) by_key_.erase(c.key);
  set_shared(c, false);
  c.used = false;
  ++c.generation;
  HS_RETURN_IF_ERROR(copy_(live, n_slots() + victim));
  c.used = true;
  c.key = key;
  c.last_use = ++clock_;
  set_shared(c, shared);
  by_key_[key] = victim;
  if (saved) *saved = true;
  return Checkpoint{n_slots() + victim, c.generation};
}

Status RecurrentPool::restore(uint64_t key, SeqKv& seq) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return make_error(StatusCode::kNotFound, "recurrent state: no checkpoint for this prefix");
  if (!copy_) return make_error(StatusCode::kUnsupported, "recurrent state: no model attached to copy the state");
  bool fresh = false;
  HS_ASSIGN_OR_RETURN(int32_t live, slot(seq, &fresh));
  if (!fresh)
    return make_error(StatusCode::kInvalidArgument, "recurrent state: restore into a sequence that has state already");
  Ckpt& c = ckpt_[it->second];
  c.last_use = ++clock_;
  set_shared(c, true);
  return copy_(n_slots() + it->second, live);
}

void RecurrentPool::drop(const Checkpoint& h) {
  const int32_t i = h.slot - n_slots();
  if (i < 0 || i >= n_checkpoints()) return;
  Ckpt& c = ckpt_[i];
  if (!c.used || c.generation != h.generation) return;
  by_key_.erase(c.key);
  set_shared(c, false);
  c.used = false;
  ++c.generation;
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
}

}  // namespace hs
