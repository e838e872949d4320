// kv/tier/hot_set.cpp — see hot_set.h.
#include "kv/tier/hot_set.h"

#include <cassert>

namespace hs {

HotSet::HotSet(int32_t n_slots, int32_t max_owners)
    : keys_(n_slots),
      epoch_(n_slots, 0),
      pins_(n_slots, 0),
      resident_(n_slots, 0),
      prev_(n_slots + 1),
      next_(n_slots + 1),
      oprev_(n_slots, -1),
      onext_(n_slots, -1),
      owner_head_(max_owners, -1),
      map_(n_slots) {
  prev_[n_slots] = next_[n_slots] = n_slots;  // empty list
  free_.reserve(n_slots);
  for (int32_t s = n_slots - 1; s >= 0; --s) free_.push_back(s);  // slot 0 is handed out first
}

HotSet::SlotTable::SlotTable(int32_t n_slots) {
  size_t cap = 16;
  while (cap < static_cast<size_t>(n_slots) * 2) cap <<= 1;
  e_.resize(cap);
  mask_ = cap - 1;
}

int32_t HotSet::SlotTable::find(const HotKey& k) const {
  for (size_t i = home(k);; i = (i + 1) & mask_) {
    const Entry& e = e_[i];
    if (e.slot < 0) return -1;
    if (e.key == k) return e.slot;
  }
}

void HotSet::SlotTable::insert(const HotKey& k, int32_t slot) {
  size_t i = home(k);
  while (e_[i].slot >= 0) i = (i + 1) & mask_;
  e_[i] = {k, slot};
  ++size_;
}

void HotSet::SlotTable::erase(const HotKey& k) {
  size_t i = home(k);
  while (!(e_[i].slot >= 0 && e_[i].key == k)) i = (i + 1) & mask_;
  // Backward shift: move later entries of the probe run into the hole when their home
  // position does not lie (cyclically) in (hole, j].
  size_t hole = i;
  for (size_t j = (i + 1) & mask_; e_[j].slot >= 0; j = (j + 1) & mask_) {
    const size_t h = home(e_[j].key);
    const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    e_[hole] = e_[j];
    hole = j;
  }
  e_[hole].slot = -1;
  --size_;
}

void HotSet::lru_push_mru(int32_t s) {
  const int32_t z = sentinel(), tail = prev_[z];
  prev_[s] = tail;
  next_[s] = z;
  next_[tail] = s;
  prev_[z] = s;
}

void HotSet::lru_remove(int32_t s) {
  next_[prev_[s]] = next_[s];
  prev_[next_[s]] = prev_[s];
  prev_[s] = next_[s] = -1;
}

void HotSet::owner_push(int32_t s) {
  int32_t& head = owner_head_[keys_[s].lease_id];
  oprev_[s] = -1;
  onext_[s] = head;
  if (head >= 0) oprev_[head] = s;
  head = s;
}

void HotSet::owner_remove(int32_t s) {
  if (oprev_[s] >= 0)
    onext_[oprev_[s]] = onext_[s];
  else
    owner_head_[keys_[s].lease_id] = onext_[s];
  if (onext_[s] >= 0) oprev_[onext_[s]] = oprev_[s];
  oprev_[s] = onext_[s] = -1;
}

void HotSet::free_slot(int32_t s) {
  if (pins_[s] > 0) {
    pins_[s] = 0;
    --n_pinned_;
  } else {
    lru_remove(s);
  }
  map_.erase(keys_[s]);
  resident_[s] = 0;
  ++epoch_[s];
  free_.push_back(s);
}

int32_t HotSet::find(const HotKey& key) const {
  return map_.find(key);
}

HotSet::Acquired HotSet::acquire(const HotKey& key) {
  assert(key.lease_id < owner_head_.size());
  Acquired a;
  if (const int32_t hit = map_.find(key); hit >= 0) {
    a.slot = hit;
    a.hit = true;
    if (pins_[a.slot] == 0) {
      lru_remove(a.slot);
      lru_push_mru(a.slot);
    }
    return a;
  }
  int32_t s;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    s = lru_slot();
    if (s < 0) return a;  // everything pinned
    a.evicted = true;
    a.evicted_key = keys_[s];
    lru_remove(s);
    owner_remove(s);
    map_.erase(keys_[s]);
  }
  keys_[s] = key;
  resident_[s] = 1;
  pins_[s] = 0;
  ++epoch_[s];
  owner_push(s);
  map_.insert(key, s);
  lru_push_mru(s);
  a.slot = s;
  return a;
}

void HotSet::pin(int32_t s) {
  assert(resident_[s]);
  if (pins_[s]++ == 0) {
    lru_remove(s);
    ++n_pinned_;
  }
}

void HotSet::unpin(int32_t s) {
  assert(resident_[s] && pins_[s] > 0);
  if (--pins_[s] == 0) {
    lru_push_mru(s);
    --n_pinned_;
  }
}

int32_t HotSet::release_owner(uint32_t owner) {
  int32_t n = 0;
  while (owner_head_[owner] >= 0) {
    const int32_t s = owner_head_[owner];
    owner_remove(s);
    free_slot(s);
    ++n;
  }
  return n;
}

Status HotSet::check() const {
  const int32_t n = n_slots(), z = sentinel();
  std::vector<uint8_t> in_lru(n, 0), in_free(n, 0);
  int32_t lru_len = 0;
  for (int32_t s = next_[z], p = z; s != z; p = s, s = next_[s]) {
    if (s < 0 || s >= n || prev_[s] != p || in_lru[s])
      return make_error(StatusCode::kInternal, "hot set: broken LRU link at {}", s);
    in_lru[s] = 1;
    if (!resident_[s] || pins_[s] != 0) return make_error(StatusCode::kInternal, "hot set: slot {} on LRU", s);
    if (++lru_len > n) return make_error(StatusCode::kInternal, "hot set: LRU cycle");
  }
  for (int32_t s : free_) {
    if (resident_[s] || in_free[s]) return make_error(StatusCode::kInternal, "hot set: bad free slot {}", s);
    in_free[s] = 1;
  }
  int32_t pinned = 0, resident = 0;
  for (int32_t s = 0; s < n; ++s) {
    if (!resident_[s]) {
      if (!in_free[s]) return make_error(StatusCode::kInternal, "hot set: slot {} lost", s);
      continue;
    }
    ++resident;
    pinned += pins_[s] > 0;
    if (pins_[s] == 0 && !in_lru[s]) return make_error(StatusCode::kInternal, "hot set: unpinned {} not on LRU", s);
    if (map_.find(keys_[s]) != s) return make_error(StatusCode::kInternal, "hot set: map misses {}", s);
  }
  if (pinned != n_pinned_ || resident != map_.size())
    return make_error(StatusCode::kInternal, "hot set: counts (pinned {} vs {}, resident {} vs map {})", pinned,
                      n_pinned_, resident, map_.size());
  int32_t owned = 0;
  for (size_t o = 0; o < owner_head_.size(); ++o)
    for (int32_t s = owner_head_[o], p = -1; s >= 0; p = s, s = onext_[s]) {
      if (oprev_[s] != p || !resident_[s] || keys_[s].lease_id != o)
        return make_error(StatusCode::kInternal, "hot set: owner list {} broken at {}", o, s);
      if (++owned > n) return make_error(StatusCode::kInternal, "hot set: owner cycle");
    }
  if (owned != resident) return make_error(StatusCode::kInternal, "hot set: {} owned vs {} resident", owned, resident);
  return Status::ok();
}

}  // namespace hs
