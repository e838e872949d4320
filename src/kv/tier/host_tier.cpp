// kv/tier/host_tier.cpp — see host_tier.h.
#include "kv/tier/host_tier.h"

#include <cassert>

namespace hs {

Result<HostTier> HostTier::create(const TierGeometry& g, int32_t n_blocks) {
  if (g.n_layer <= 0 || n_blocks <= 0)
    return make_error(StatusCode::kInvalidArgument, "kv tiers: host tier needs n_layer > 0 and pages > 0 ({}, {})",
                      g.n_layer, n_blocks);
  HS_ASSIGN_OR_RETURN(HostPageLayout layout,
                      HostPageLayout::make(g.dtype, g.n_kv_heads, g.head_dim, g.page_tokens, g.chunk_tokens));
  const int64_t total = static_cast<int64_t>(g.n_layer) * n_blocks * layout.page_bytes;
  auto* data = static_cast<uint8_t*>(std::calloc(static_cast<size_t>(total), 1));
  if (data == nullptr)
    return make_error(StatusCode::kInvalidArgument, "kv tiers: cannot allocate {} bytes for the host tier", total);
  return HostTier(g, layout, n_blocks, data);
}

HostTier::HostTier(const TierGeometry& g, const HostPageLayout& layout, int32_t n_blocks, uint8_t* data)
    : g_(g), layout_(layout), pool_(n_blocks), data_(data) {}

Status HostTier::reserve(HostSeq& seq, int32_t n_tokens) {
  const int32_t need = (n_tokens + g_.page_tokens - 1) / g_.page_tokens;
  while (static_cast<int32_t>(seq.blocks.size()) < need) {
    auto id = pool_.allocate();
    if (!id.is_ok()) return id.status();
    seq.blocks.push_back(*id);
  }
  return Status::ok();
}

void HostTier::release(HostSeq& seq) {
  for (int32_t id : seq.blocks) pool_.release(id);
  seq.blocks.clear();
  seq.n_tokens = 0;
}

void HostTier::write_row(int32_t block, int layer, int head, int t, const float* k, const float* v) {
  assert(pool_.ref_count(block) > 0);
  uint8_t* p = page(block, layer);
  const KvStoreDtype dt = g_.dtype;
  kv_encode_row(dt, k, g_.head_dim, p + layout_.row_offset(head, t, 0), p + layout_.scale_offset(head, t, 0));
  kv_encode_row(dt, v, g_.head_dim, p + layout_.row_offset(head, t, 1), p + layout_.scale_offset(head, t, 1));
}

void HostTier::read_row(int32_t block, int layer, int head, int t, float* k, float* v) const {
  const uint8_t* p = page(block, layer);
  const KvStoreDtype dt = g_.dtype;
  kv_decode_row(dt, p + layout_.row_offset(head, t, 0), p + layout_.scale_offset(head, t, 0), g_.head_dim, k);
  kv_decode_row(dt, p + layout_.row_offset(head, t, 1), p + layout_.scale_offset(head, t, 1), g_.head_dim, v);
}

HostPiece HostTier::chunk_ptr(int32_t block, int layer, int head, int chunk_in_page) const {
  return HostPiece{page(block, layer) + layout_.piece_offset(head, chunk_in_page), layout_.piece.bytes};
}

}  // namespace hs
