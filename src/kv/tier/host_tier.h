// kv/tier/host_tier.h — the host tier: the full KV history of every sequence, the source
// of truth the device tier fetches from.
//
// Storage is page-granular: block ids come from a BlockPool owned here, and every layer
// has one page per block, laid out as kv/kv_quant.h's HostPageLayout
// ([n_kv_heads][P/C] pieces of [C][K|V][row] data + [C][K|V] scales), so one kv head's
// chunk of C tokens is one contiguous piece that a single copy moves. Rows are encoded on
// write (f32/f16/bf16, or int8/int4 with per-token-per-head scales).
// Memory: n_layer * n_blocks * page_bytes, reserved up front with calloc (the OS hands out
// zero pages lazily). On CUDA this buffer is the one to pin/map. Costs: write = one row
// encode per (layer, head, token); chunk_ptr is pointer arithmetic. Not thread-safe for
// reserve/release; writes to distinct rows may run in parallel.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"
#include "kv/kv_quant.h"

namespace hs {

struct TierGeometry {
  int n_layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 16;   // P
  int chunk_tokens = 16;  // C (divides P): the fetch unit
  KvStoreDtype dtype = KvStoreDtype::kF16;
};

// A sequence's host block table.
struct HostSeq {
  std::vector<int32_t> blocks;  // [ceil(n_tokens / P)] block ids
  int32_t n_tokens = 0;         // positions 0..n_tokens-1 hold K/V
};

// One contiguous piece: one kv head's C tokens of K|V data followed by their scales.
struct HostPiece {
  const uint8_t* data = nullptr;  // [bytes]
  int64_t bytes = 0;
};

class HostTier {
 public:
  static Result<HostTier> create(const TierGeometry& g, int32_t n_blocks);

  const TierGeometry& geometry() const { return g_; }
  const HostPageLayout& layout() const { return layout_; }
  const PieceLayout& piece_layout() const { return layout_.piece; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int64_t bytes() const { return static_cast<int64_t>(g_.n_layer) * pool_.n_blocks() * layout_.page_bytes; }

  // Pages for positions [0, n_tokens) of `seq` (allocates as needed; on error `seq` keeps
  // the pages it got, release() frees them).
  Status reserve(HostSeq& seq, int32_t n_tokens);
  // Drops one reference to every page of `seq` and resets it.
  void release(HostSeq& seq);

  // ---- by block: token t in [0, P), chunk_in_page in [0, P/C)
  void write_row(int32_t block, int layer, int head, int t, const float* k, const float* v);
  void read_row(int32_t block, int layer, int head, int t, float* k, float* v) const;
  HostPiece chunk_ptr(int32_t block, int layer, int head, int chunk_in_page) const;
  // Start of one page: [page_bytes] as in layout().
  uint8_t* page(int32_t block, int layer) {
    return data_.get() + (static_cast<int64_t>(layer) * pool_.n_blocks() + block) * layout_.page_bytes;
  }
  const uint8_t* page(int32_t block, int layer) const { return const_cast<HostTier*>(this)->page(block, layer); }

  // ---- by sequence position (the position's page must be reserved)
  void write(const HostSeq& seq, int layer, int head, int32_t pos, const float* k, const float* v) {
    write_row(seq.blocks[pos / g_.page_tokens], layer, head, pos % g_.page_tokens, k, v);
  }
  void read(const HostSeq& seq, int layer, int head, int32_t pos, float* k, float* v) const {
    read_row(seq.blocks[pos / g_.page_tokens], layer, head, pos % g_.page_tokens, k, v);
  }
  // Chunk `chunk` (tokens [chunk*C, chunk*C + C)) of the sequence.
  HostPiece chunk(const HostSeq& seq, int layer, int head, int32_t chunk) const {
    const int cpp = layout_.chunks_per_page;
    return chunk_ptr(seq.blocks[chunk / cpp], layer, head, chunk % cpp);
  }
  PieceView view(const HostPiece& p) const { return PieceView{p.data, &layout_.piece}; }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  HostTier(const TierGeometry& g, const HostPageLayout& layout, int32_t n_blocks, uint8_t* data);

  TierGeometry g_;
  HostPageLayout layout_;
  BlockPool pool_;
  std::unique_ptr<uint8_t, FreeDeleter> data_;  // [n_layer][n_blocks][page_bytes]
};

}  // namespace hs
