// engine/step_cost.h — an estimate of how long a forward step takes, used by the scheduler
// to keep long prefills from stretching the inter-token latency of running decodes.
//
// A step over n tokens costs, roughly (docs/serving.md, "Fair chunked prefill"):
//   fixed      reading every weight once (memory-bound, shared by all batch tokens)
//   per token  the matmul arithmetic of one token
//   per key    reading one past token's K|V in every attention layer it is visible to
//              (sliding-window layers see at most `window` keys)
//   per row    the output layer's arithmetic for each sampled token
// Costs are in seconds from two machine rates (memory bandwidth, matmul throughput); only
// ratios matter to the scheduler, so the rates need not be exact. O(1) per query.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace hs {

struct StepCostModel {
  double fixed_s = 0;         // weights read once per step
  double per_token_s = 0;     // matmul arithmetic per batch token (all layers)
  double per_row_s = 0;       // output layer arithmetic per sampled row
  double per_key_full_s = 0;  // K|V bytes of one key over all full-attention layers
  double per_key_local_s = 0; // same over the sliding-window layers
  int32_t window = 0;         // sliding window (0: none)

  // Predicted parts of a chunk, unscaled: matmul arithmetic, attention reads.
  double chunk_other(int64_t n) const { return n * per_token_s; }
  double chunk_attn(int64_t pos0, int64_t n) const;

  // mem_bw: bytes/s; matmul_flops: FLOP/s.
  // kv_token_bytes: K + V of one token of one kv head in the cache (kv_token_bytes()).
  static StepCostModel from_config(const ModelConfig& c, int64_t weight_bytes, double kv_token_bytes,
                                   double mem_bw = 20e9, double matmul_flops = 150e9);

  // Attention reads of one token at position `pos` (it sees keys 0..pos).
  double key_cost(int64_t pos) const;
  // Per-token part (no fixed, no output row) of computing positions [pos0, pos0 + n).
  double chunk_cost(int64_t pos0, int64_t n) const;
  // Largest n <= max_n whose chunk_cost(pos0, n) <= allowance (0 when even one token exceeds it).
  int32_t max_chunk(int64_t pos0, int32_t max_n, double allowance) const;

  // Online calibration: the machine rates above are guesses, and attention (memory-bound,
  // per key) and matmuls (per token) are off by different factors. After each step the engine
  // reports the predicted non-attention and attention parts and the measured time;
  // exponentially weighted least squares fits  seconds ≈ a · other + b · attention  and the
  // costs are rescaled by a and b (b / a is what shapes the chunks). O(1) per step.
  void observe(double other_pred, double attn_pred, double seconds);
  double other_scale() const { return a_; }
  double attn_scale() const { return b_; }

 private:
  double a_ = 1, b_ = 1;
  double s_oo_ = 0, s_oa_ = 0, s_aa_ = 0, s_ot_ = 0, s_at_ = 0;  // weighted sums
};

}  // namespace hs
