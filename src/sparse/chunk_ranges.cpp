// sparse/chunk_ranges.cpp — see chunk_ranges.h.
#include "sparse/chunk_ranges.h"

#include <algorithm>

namespace hs {

void chunk_ranges(std::span<const int32_t> chunks, int chunk_tokens, int32_t n_tokens, int32_t split_tokens,
                  std::vector<KeyRange>& out) {
  out.clear();
  auto emit = [&](int32_t b, int32_t e) {
    if (split_tokens <= 0) {
      out.push_back({b, e});
      return;
    }
    for (int32_t x = b; x < e; x += split_tokens) out.push_back({x, std::min(e, x + split_tokens)});
  };
  int32_t run_b = -1, run_e = -1;
  for (int32_t c : chunks) {
    const int32_t b = c * chunk_tokens;
    const int32_t e = std::min(n_tokens, b + chunk_tokens);
    if (b >= e) continue;
    if (b == run_e) {
      run_e = e;
      continue;
    }
    if (run_b >= 0) emit(run_b, run_e);
    run_b = b;
    run_e = e;
  }
  if (run_b >= 0) emit(run_b, run_e);
}

}  // namespace hs
