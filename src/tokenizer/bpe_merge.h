// tokenizer/bpe_merge.h — the BPE merge loop of HF `tokenizers` (models/bpe/word.rs), shared
// by the byte-level and the SentencePiece-style tokenizers.
//
// Symbols sit in a doubly linked list over a fixed array; a min-heap holds candidate merges
// keyed by (rank, position of the left symbol). Popping the best candidate, checking it is
// still current (both symbols alive and the pair still merges to the same token), merging, and
// pushing the two new neighbour pairs gives, step by step, "merge the best-ranked adjacent pair,
// leftmost first" — the exact order HF applies, which matters when ranks tie or chains overlap.
// Cost: O(n log n) for n initial symbols; the rank lookup is the caller's (a hash probe).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace hs::tok {

// Result of a rank lookup: the merged token and its rank (lower merges first).
struct MergeRank {
  uint64_t rank = 0;
  int32_t id = -1;  // -1: the pair does not merge
};

struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // indices into symbols, -1 at the ends
    bool alive;
  };
  struct Candidate {
    uint64_t rank;
    int32_t pos;
    int32_t id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Symbol> symbols;       // [n_initial_symbols]
  std::vector<Candidate> heap;       // min-heap by (rank, pos)
};

// Merge `ids` (initial symbols) in place and append the result to `out`.
// RankFn: MergeRank(int32_t left, int32_t right).
template <typename RankFn>
void bpe_merge(const std::vector<int32_t>& ids, RankFn&& rank_of, BpeScratch& s,
               std::vector<int32_t>& out) {
  const auto n = static_cast<int32_t>(ids.size());
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  s.symbols.resize(ids.size());
  for (int32_t i = 0; i < n; ++i) s.symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  s.heap.clear();
  const auto cmp = std::greater<BpeScratch::Candidate>();
  for (int32_t i = 0; i + 1 < n; ++i) {
    const MergeRank m = rank_of(ids[i], ids[i + 1]);
    if (m.id >= 0) s.heap.push_back({m.rank, i, m.id});
  }
  std::make_heap(s.heap.begin(), s.heap.end(), cmp);

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), cmp);
    const BpeScratch::Candidate top = s.heap.back();
    s.heap.pop_back();
    BpeScratch::Symbol& left = s.symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    BpeScratch::Symbol& right = s.symbols[left.next];
    // Stale entry: the pair at this position changed since it was pushed.
    const MergeRank cur = rank_of(left.id, right.id);
    if (cur.id != top.id) continue;

    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) s.symbols[right.next].prev = top.pos;

    if (left.prev >= 0) {
      const MergeRank m = rank_of(s.symbols[left.prev].id, left.id);
      if (m.id >= 0) {
        s.heap.push_back({m.rank, left.prev, m.id});
        std::push_heap(s.heap.begin(), s.heap.end(), cmp);
      }
    }
    if (left.next >= 0) {
      const MergeRank m = rank_of(left.id, s.symbols[left.next].id);
      if (m.id >= 0) {
        s.heap.push_back({m.rank, top.pos, m.id});
        std::push_heap(s.heap.begin(), s.heap.end(), cmp);
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = s.symbols[i].next) out.push_back(s.symbols[i].id);
}

}  // namespace hs::tok
