// kv/kv_cache.h — paged KV storage for every attention layer, and per-sequence block tables.
//
// Page layout (ARCHITECTURE.md): P tokens of one layer of one sequence, one block per kv head,
// each block a kv/kv_quant.h piece of P tokens:
//   [n_kv_heads] × ( [P][K | V][row_bytes]  then  [P][K | V][scale_bytes] ), padded to 16 B,
// so one head's run of tokens is contiguous. For f32/f16 (no scales) that is the plain
// [n_kv_heads][P][K | V][head_dim] elements backend/cpu's PagedKvView reads; bf16, int8, int4
// and fp8 (per-token-per-head scales, kv_quant.h) are read through pieces (kv_attend_pieces).
// This cache is the host tier: every sequence's full KV history lives here.
// Block ids come from one BlockPool and index every layer's storage alike (vLLM style): a
// sequence has one block table for all layers.
// Cost: memory n_layer * n_blocks * page_bytes, allocated up front; per token and kv head
// 2 · head_dim · {4, 2, 2, 1, ½, 1} bytes for f32, f16, bf16, int8, int4, fp8 (+ 4 / 8 / 4 B of
// scales for int8 / int4 / fp8): f16 halves what a decode step reads at long context, int8 and
// fp8 halve it again, int4 quarters it.
//
// Leases (kv/tier/lease.h): a sequence that keeps copies of its KV elsewhere (the sparse
// path's hot chunk slots, sparse/hot_chunks.h) takes a SeqLease {id, generation} from the
// cache with lease(). release() — the one call every end of a sequence goes through
// (finish, cancel, timeout, error, preemption, bench and eval sequences) — ends the lease
// too: the generation moves on, so copies keyed by the old one can never be hit again even
// when the id is reused, and the LeaseListener (the hot chunk pool) frees its slots at once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"
#include "kv/kv_quant.h"
#include "kv/tier/lease.h"

namespace hs {

// The cache's element type is a kv/kv_quant.h store dtype: f32 | f16 | bf16 | int8 | int4 | fp8.
using KvDtype = KvStoreDtype;
const char* kv_dtype_name(KvDtype t);
Result<KvDtype> parse_kv_dtype(std::string_view name);  // "auto" (= f16) | f32 | f16 | bf16 | int8 | int4 | fp8
// f32 / f16: K and V rows are plain elements (backend/cpu PagedKvView can read them).
inline bool kv_dtype_plain(KvDtype t) { return t == KvDtype::kF32 || t == KvDtype::kF16; }
inline int kv_elem_bytes(KvDtype t) { return t == KvDtype::kF32 ? 4 : 2; }  // plain dtypes
// Bytes of one token's K and V of one kv head, scales included.
inline int64_t kv_token_bytes(KvDtype t, int head_dim) { return 2 * (kv_row_bytes(t, head_dim) + kv_scale_bytes(t)); }
// What the CLI uses unless told otherwise (llama.cpp's default too): half the bytes of f32
// per decode step; the golden tests run with it.
inline constexpr KvDtype kDefaultKvDtype = KvDtype::kF16;

struct KvGeometry {
  int n_layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 16;  // P
  KvDtype dtype = KvDtype::kF32;
  // One kv head's block of a page: a piece of P tokens.
  PieceLayout head_layout() const { return PieceLayout::make(dtype, head_dim, page_tokens); }
  int64_t head_bytes() const { return head_layout().stride; }
  int64_t page_bytes() const { return n_kv_heads * head_bytes(); }
  // Plain dtypes: the page in elements (what PagedKvView steps by).
  int64_t page_elems() const { return page_bytes() / kv_elem_bytes(dtype); }
};

// A sequence's view of the cache: its block table and how many tokens it holds.
// A copy of a SeqKv must not keep `lease` (two sequences would share hot copies).
struct SeqKv {
  std::vector<int32_t> blocks;  // [ceil(n_tokens / P)] page ids
  int32_t n_tokens = 0;         // tokens whose K/V are stored (positions 0..n_tokens-1)
  SeqLease lease;               // claim on copies of this KV (KvCache::lease); invalid until taken
};

// Told when a lease ends (KvCache::release), before its id can be handed out again.
class LeaseListener {
 public:
  virtual ~LeaseListener() = default;
  virtual void on_lease_end(const SeqLease& lease) = 0;
};

class KvCache {
 public:
  static constexpr int32_t kDefaultMaxLeases = 1024;
  // max_leases: sequences that may hold a lease at once (lease() fails beyond).
  // host_pages = false: block tables only, no page memory here (a device backend keeps the
  // pages: write/read/row/head_block must not be called).
  KvCache(const KvGeometry& g, int32_t n_blocks, int32_t max_leases = kDefaultMaxLeases, bool host_pages = true);
  bool has_host_pages() const { return !layer_data_.empty(); }

  const KvGeometry& geometry() const { return g_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Make room for positions [0, n_tokens) in `seq` (allocates pages as needed).
  Status reserve(SeqKv& seq, int32_t n_tokens);
  // Release every page of `seq`, end its lease (if any) and reset it.
  void release(SeqKv& seq);

  // The sequence's live lease, taken now if it has none. Error when every lease is in use.
  Result<SeqLease> lease(SeqKv& seq);
  const LeaseTable& leases() const { return leases_; }
  // Listeners told of every lease end, in the order they were added (the device tier, the
  // recurrent-state pool: several may listen at once). Each must remove itself before it dies.
  void add_lease_listener(LeaseListener* l) {
    if (l && !has_lease_listener(l)) lease_listeners_.push_back(l);
  }
  void remove_lease_listener(LeaseListener* l) {
    std::erase(lease_listeners_, l);
  }
  bool has_lease_listener(const LeaseListener* l) const {
    return std::find(lease_listeners_.begin(), lease_listeners_.end(), l) != lease_listeners_.end();
  }
  size_t n_lease_listeners() const { return lease_listeners_.size(); }

  // Store K and V ([head_dim] floats each) of (layer, kv head, position), converting to the
  // cache dtype. The position's page must be reserved.
  void write(const SeqKv& seq, int layer, int head, int32_t pos, const float* k, const float* v);
  // Read back K and V as floats (tests, debugging).
  void read(const SeqKv& seq, int layer, int head, int32_t pos, float* k, float* v) const;
  // Address of K of (layer, head, pos); for plain dtypes V follows head_dim elements later.
  const void* row(const SeqKv& seq, int layer, int head, int32_t pos) const;
  // The block (a piece of P tokens, geometry().head_layout()) of kv head `head` in page `block`.
  const uint8_t* head_block(int layer, int32_t block, int head) const {
    return layer_data_[layer].data() + static_cast<int64_t>(block) * page_bytes_ + head * head_bytes_;
  }
  const PieceLayout& head_layout() const { return layout_; }

  // Start of layer `layer`'s storage: page b starts b * page_bytes() later.
  const void* layer_base(int layer) const { return layer_data_[layer].data(); }
  // Fill every page with N(0, 1) values (benchmarks: synthetic context). A cache without host
  // pages (a device backend keeps them) is left alone: its synthetic context is the device
  // copy's zeroed pages (the same bytes are streamed either way).
  void fill_random(std::mt19937& rng);

 private:
  uint8_t* row_ptr(const SeqKv& seq, int layer, int head, int32_t pos) const;

  KvGeometry g_;
  PieceLayout layout_;  // one kv head's block
  int64_t head_bytes_ = 0, page_bytes_ = 0;
  BlockPool pool_;
  std::vector<std::vector<uint8_t>> layer_data_;  // [n_layer][n_blocks * page_bytes]
  LeaseTable leases_;
  std::vector<LeaseListener*> lease_listeners_;
};

}  // namespace hs
