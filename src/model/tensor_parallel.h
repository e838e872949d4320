// model/tensor_parallel.h — how a decoder is split over the ranks of a tensor-parallel group
// (Megatron-LM's split; docs/tensor-parallel.md) and the weight slices each rank gets.
//
// Rank r of N owns n_head / N query heads (attention is computed per head, so a rank needs only
// its heads' q / k / v rows and its heads' columns of the output projection), the kv heads those
// query heads read (n_kv / N of them; when N > n_kv, the one kv head its group reads, replicated
// on N / n_kv ranks as vLLM does), a share of the FFN's intermediate columns (gate / up rows,
// down columns), and a share of the vocabulary rows of the output layer. The token embedding and
// the norms are replicated. Partial sums meet in an all-reduce after the output projection and
// after the FFN's down projection; the vocabulary shares are gathered.
// Hybrid (Gated-DeltaNet) models split their linear layers by key head: rank r owns n_k / N key
// heads, the value heads that read them (ssm_v_heads: a contiguous run in grouped files, every
// n_k-th head from each of its key heads in tiled ones), their rows of the q / k / v / z / beta /
// alpha projections, their conv channels, gates and recurrent state, and their columns of the out
// projection (an all-reduce after it, as after attention's). A mixture-of-experts FFN (qwen3next)
// splits every expert's intermediate columns, routed and shared alike (Megatron's split of each
// expert); the router and the shared expert's gate are replicated, so every rank routes alike.
//
// Slices: rows of a matrix (q / k / v / gate / up / output) are a view of the file in place;
// columns (o / down) are copied, in the weight's own type when the cut falls on its block
// boundaries, else dequantized to f32 (a Q4_K matrix of 896 columns cut in two). Cost: the
// column slices once more in host memory at load time (a copy of o and down in total).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/weight_view.h"
#include "model/model_config.h"

namespace hs {

// What one rank owns.
struct TpSlice {
  int rank = 0, size = 1;
  int q_head0 = 0, n_q_heads = 0;    // query heads [q_head0, q_head0 + n_q_heads)
  int kv_head0 = 0, n_kv_heads = 0;  // kv heads [kv_head0, kv_head0 + n_kv_heads)
  int64_t ff0 = 0, n_ff = 0;         // FFN intermediate columns [ff0, ff0 + n_ff)
  int64_t vocab0 = 0, n_vocab = 0;   // output rows [vocab0, vocab0 + n_vocab)
  int ssm_k_head0 = 0, n_ssm_k_heads = 0;  // hybrid: linear-layer key heads [ssm_k_head0, + n_ssm_k_heads)
  int64_t ffe0 = 0, n_ffe = 0;      // MoE: every routed expert's intermediate columns [ffe0, ffe0 + n_ffe)
  int64_t shexp0 = 0, n_shexp = 0;  // MoE: the shared expert's intermediate columns
};

// A hybrid model's value heads of rank s, in the order its local heads take them (so that the
// local v head j still reads local key head j % n_k (tiled) or j / (n_v / n_k) (grouped)).
std::vector<int> ssm_v_heads(const ModelConfig& c, const TpSlice& s);

// The model as rank s sees it: its heads, kv heads, FFN columns and key / value heads (n_embd,
// head sizes, the vocabulary and the layer pattern unchanged); c itself for one rank.
ModelConfig rank_config(const ModelConfig& c, const TpSlice& s);

// Spans [begin, begin + n) of rows, columns or vector entries, in order.
struct IndexSpan {
  int64_t begin = 0, n = 0;
};

// The split of `c` over `size` ranks. FFN shares are whole multiples of ff_align columns when
// n_ff is (pass the down projection's block size: its column slices then stay quantized). Errors
// say what does not divide: n_head % size, size and n_kv_heads neither dividing the other, a
// hybrid's linear-layer key heads % size, FFN or expert widths below size.
Result<std::vector<TpSlice>> plan_tensor_parallel(const ModelConfig& c, int size, int64_t ff_align = 1);

// Owns the bytes of column slices (and sliced vectors) for the life of the model; a CPU backend
// reads them in place, so they must not move: every buffer is allocated once and never resized.
class ShardStore {
 public:
  // Rows [r0, r0 + n) of w, a view of the same memory.
  static WeightView rows(const WeightView& w, int64_t r0, int64_t n);
  // Columns [c0, c0 + n) of w: w itself for the whole range; else a copy in w's type when c0 and
  // n are whole blocks, dequantized to f32 otherwise.
  Result<WeightView> cols(const WeightView& w, int64_t c0, int64_t n);
  // The spans' columns of w side by side: as cols(), in w's type when every span is whole blocks.
  Result<WeightView> cols(const WeightView& w, const std::vector<IndexSpan>& spans);
  // The spans' rows of w one after another: a view when there is one span, else a copy (w's type).
  Result<WeightView> rows(const WeightView& w, const std::vector<IndexSpan>& spans);
  // v[off, off + n) (v empty: empty), stored here.
  const std::vector<float>& sub(const std::vector<float>& v, int64_t off, int64_t n);
  // The spans' entries of v one after another, stored here.
  const std::vector<float>& sub(const std::vector<float>& v, const std::vector<IndexSpan>& spans);
  // Bytes of the copies held.
  int64_t bytes() const { return bytes_; }

 private:
  std::deque<std::unique_ptr<uint8_t[]>> bufs_;
  std::deque<std::vector<float>> vecs_;
  int64_t bytes_ = 0;
};

}  // namespace hs
