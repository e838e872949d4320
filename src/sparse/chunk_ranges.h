// sparse/chunk_ranges.h — selected chunks as key ranges: one range per contiguous run of chunk
// ids, clipped to the context, optionally cut into pieces of at most split_tokens keys so one
// (token, kv head) can spread over threads. Every backend's attention over a selection reads
// these ranges. Cost: O(number of chunks).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hs {

struct KeyRange {
  int32_t begin = 0;
  int32_t end = 0;  // exclusive
  bool operator==(const KeyRange&) const = default;
};

// Ranges [begin, end) covering the chunks (ascending, unique), contiguous chunks merged,
// clipped to n_tokens, each at most split_tokens long (0: no limit).
void chunk_ranges(std::span<const int32_t> chunks, int chunk_tokens, int32_t n_tokens, int32_t split_tokens,
                  std::vector<KeyRange>& out);

}  // namespace hs
