// kv/kv_cache.cpp — see kv_cache.h.
#include "kv/kv_cache.h"

#include <cassert>
#include <cstring>

#include "core/fp16.h"

namespace hs {

const char* kv_dtype_name(KvDtype t) { return kv_store_dtype_name(t); }

Result<KvDtype> parse_kv_dtype(std::string_view name) { return parse_kv_store_dtype(name); }

KvCache::KvCache(const KvGeometry& g, int32_t n_blocks, int32_t max_leases, bool host_pages)
    : g_(g), layout_(g.head_layout()), head_bytes_(layout_.stride), page_bytes_(g.page_bytes()), pool_(n_blocks),
      leases_(max_leases) {
  // Plain dtypes are read as [P][K|V][head_dim] elements: no padding between heads.
  assert(!kv_dtype_plain(g.dtype) || layout_.stride == layout_.bytes);
  if (!host_pages) return;
  layer_data_.resize(g.n_layer);
  for (auto& d : layer_data_) d.assign(static_cast<size_t>(n_blocks) * page_bytes_, 0);
}

Status KvCache::reserve(SeqKv& seq, int32_t n_tokens) {
  const int32_t need = (n_tokens + g_.page_tokens - 1) / g_.page_tokens;
  while (static_cast<int32_t>(seq.blocks.size()) < need) {
    auto id = pool_.allocate();
    if (!id.is_ok()) return id.status();
    seq.blocks.push_back(*id);
  }
  return Status::ok();
}

void KvCache::release(SeqKv& seq) {
  for (int32_t id : seq.blocks) pool_.release(id);
  seq.blocks.clear();
  seq.n_tokens = 0;
  if (leases_.is_live(seq.lease)) {
    // Listener first (frees the copies keyed by this generation), then the generation moves on.
    for (LeaseListener* l : lease_listeners_) l->on_lease_end(seq.lease);
    (void)leases_.release(seq.lease);
  }
  seq.lease = SeqLease{};
}

Result<SeqLease> KvCache::lease(SeqKv& seq) {
  if (leases_.is_live(seq.lease)) return seq.lease;
  HS_ASSIGN_OR_RETURN(seq.lease, leases_.acquire());
  return seq.lease;
}

uint8_t* KvCache::row_ptr(const SeqKv& seq, int layer, int head, int32_t pos) const {
  const int P = g_.page_tokens;
  return const_cast<uint8_t*>(head_block(layer, seq.blocks[pos / P], head)) + layout_.row_offset(pos % P, 0);
}

const void* KvCache::row(const SeqKv& seq, int layer, int head, int32_t pos) const {
  return row_ptr(seq, layer, head, pos);
}

void KvCache::write(const SeqKv& seq, int layer, int head, int32_t pos, const float* k, const float* v) {
  const int P = g_.page_tokens, t = pos % P;
  uint8_t* blk = const_cast<uint8_t*>(head_block(layer, seq.blocks[pos / P], head));
  const bool scaled = layout_.scale_bytes > 0;
  kv_encode_row(g_.dtype, k, g_.head_dim, blk + layout_.row_offset(t, 0), scaled ? blk + layout_.scale_offset(t, 0) : nullptr);
  kv_encode_row(g_.dtype, v, g_.head_dim, blk + layout_.row_offset(t, 1), scaled ? blk + layout_.scale_offset(t, 1) : nullptr);
}

void KvCache::read(const SeqKv& seq, int layer, int head, int32_t pos, float* k, float* v) const {
  const int P = g_.page_tokens, t = pos % P;
  const uint8_t* blk = head_block(layer, seq.blocks[pos / P], head);
  const bool scaled = layout_.scale_bytes > 0;
  kv_decode_row(g_.dtype, blk + layout_.row_offset(t, 0), scaled ? blk + layout_.scale_offset(t, 0) : nullptr,
                g_.head_dim, k);
  kv_decode_row(g_.dtype, blk + layout_.row_offset(t, 1), scaled ? blk + layout_.scale_offset(t, 1) : nullptr,
                g_.head_dim, v);
}

void KvCache::fill_random(std::mt19937& rng) {
  if (!has_host_pages()) return;  // a device backend's cache: the pages live (zeroed) on the device
  std::normal_distribution<float> nd(0.0f, 1.0f);
  if (kv_dtype_plain(g_.dtype)) {  // every element at once
    for (auto& layer : layer_data_) {
      if (g_.dtype == KvDtype::kF32) {
        float* f = reinterpret_cast<float*>(layer.data());
        for (size_t i = 0; i < layer.size() / 4; ++i) f[i] = nd(rng);
      } else {
        uint16_t* h = reinterpret_cast<uint16_t*>(layer.data());
        for (size_t i = 0; i < layer.size() / 2; ++i) h[i] = fp32_to_fp16(nd(rng));
      }
    }
    return;
  }
  std::vector<float> x(g_.head_dim);  // [head_dim]
  const bool scaled = layout_.scale_bytes > 0;
  for (int l = 0; l < g_.n_layer; ++l)
    for (int32_t b = 0; b < pool_.n_blocks(); ++b)
      for (int h = 0; h < g_.n_kv_heads; ++h) {
        uint8_t* blk = const_cast<uint8_t*>(head_block(l, b, h));
        for (int t = 0; t < g_.page_tokens; ++t)
          for (int kv = 0; kv < 2; ++kv) {
            for (float& e : x) e = nd(rng);
            kv_encode_row(g_.dtype, x.data(), g_.head_dim, blk + layout_.row_offset(t, kv),
                          scaled ? blk + layout_.scale_offset(t, kv) : nullptr);
          }
      }
}

}  // namespace hs
