// backend/cpu_attention.h — the CPU backend's attention op: dense over paged KV, or sparse
// (sketch selection, device-tier fetch) when a SparseRuntime is attached.
//
// Plans one step's attention of one layer as tasks of (token, kv head, key split) — long
// ranges are split (flash-decoding) so a single decode step uses every thread — runs them
// on the pool and merges the partials per (token, kv head). Sparse: decode tokens of
// full-attention layers past min_context select chunks (sparse/selector.h); with a device
// tier (sparse/hot_chunks.h) the selected chunks are fetched into hot slots and attention
// reads them there. This is the code that used to live in Decoder::attention.
// Prefill (a sequence with >= kMinTileTokens tokens in the step, f32/f16 pages) runs blocked
// tiles of consecutive tokens instead (cpu::attention_prefill_tile): each key is read once
// per tile, not once per token.
// Cost: O(keys · head_dim · G) per (token, kv head) read once per group (per tile in
// prefill); scratch grows to the largest step and is reused.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "kv/kv_quant.h"
#include "sparse/hot_chunks.h"
#include "sparse/selector.h"
#include "backend/cpu_sparse_attention.h"
#include "sparse/sparse_runtime.h"

namespace hs {

class CpuAttention {
 public:
  void set_sparse(SparseRuntime* rt, HotChunks* hot) { sparse_ = rt; hot_ = hot; }
  SparseRuntime* sparse() const { return sparse_; }
  // K/V of the plan's tokens into layer `layer` (and the sketch store, when sparse).
  void write(const ForwardPlan& plan, int layer, const float* k, const float* v, int kv_dim, int head_dim);
  // q, out: [n][n_head * head_dim] f32.
  void run(const ForwardPlan& plan, int layer, const float* q, float* out, const AttentionParams& p);
  // Ends the step of the device tier: drops this step's pins, counters to the sparse runtime.
  void end_step();

 private:
  void select_chunks(const ForwardPlan& plan, int layer, const float* q, const AttentionParams& p);
  bool tiered(int layer, const AttentionParams& p) const;
  void fetch_chunks(const ForwardPlan& plan, int layer, const AttentionParams& p);

  SparseRuntime* sparse_ = nullptr;
  HotChunks* hot_ = nullptr;
  bool hot_used_ = false;  // a fetch ran this step: end_step() is due

  struct AttnTask {
    int32_t token, kv_head, begin, end;  // keys [begin, end) of one kv head for one batch token
    int32_t piece_begin = -1, piece_end = -1;  // pieces: its chunks are pieces_[piece_begin, piece_end)
    int32_t tail_sel = -1;                     // >= 0: the estimated tail of selection tail_sel instead
  };
  // Prefill tiles: a sequence with many tokens in the step runs cpu::attention_prefill_tile
  // over tiles of consecutive tokens (one task per tile and kv head) instead of AttnTasks.
  struct TileTask {
    int32_t seq, kv_head, row_begin, n_tokens;  // tokens tile_rows_[row_begin, +n_tokens)
  };
  void plan_tiles(const ForwardPlan& plan, const AttentionParams& p);
  std::vector<TileTask> tile_tasks_;                  // [n_tiles * n_kv_heads], longest first
  std::vector<int32_t> tile_rows_;                    // [tiled tokens] batch rows, grouped by sequence
  std::vector<int32_t> seq_tiled_;                    // [n_seqs] 1: the sequence's tokens run as tiles
  std::vector<int32_t> tile_offset_, tile_fill_;      // [n_seqs + 1], [n_seqs] scratch of plan_tiles
  std::vector<AttnTask> tasks_;                       // [n_tasks]
  std::vector<std::pair<int32_t, int32_t>> spans_;    // [n * n_kv_heads] task range per (token, kv head)
  std::vector<float> partials_;                       // [n_tasks][group][2 + head_dim]
  std::vector<cpu::AttnPartial> parts_;               // [n_tasks] views into partials_
  // Sparse selection (decode tokens on full-attention layers past min_context).
  std::vector<int32_t> sel_items_;                    // [n_sel] t * n_kv_heads + kv_head
  std::vector<int32_t> sel_index_;                    // [n * n_kv_heads] index into sel_items_ or -1
  std::vector<std::vector<int32_t>> selected_;        // [n_sel] chosen chunk ids
  std::vector<SelectInput> sel_inputs_;               // [n_sel]
  BatchSelectScratch sel_scratch_;
  std::vector<KeyRange> ranges_;                      // scratch
  // Device tier (tiered layers only).
  std::vector<std::vector<int32_t>> sel_slots_;       // [n_sel][selected chunks] hot slot, or -1: read the page
  std::vector<std::pair<int32_t, int32_t>> sel_hot_;  // [n_sel] [begin, end) of the fetched chunks in selected_
  std::vector<std::vector<HotChunks::PendingCopy>> sel_copies_;  // [n_sel] misses to copy into their slots
  std::vector<uint8_t> sel_resident_;                 // [n_sel] the sequence has a sinks + ring region
  std::vector<PieceSpan> pieces_;                     // [n pieces of the layer's piece tasks]
  std::vector<const uint8_t*> piece_src_;             // [n pieces] host piece to copy in first, or null
  std::vector<const uint8_t*> pending_;               // scratch [selected chunks]
};

}  // namespace hs
