// kv/kv_cache.cpp — see kv_cache.h.
#include "kv/kv_cache.h"

#include <cstring>

#include "core/fp16.h"

namespace hs {

const char* kv_dtype_name(KvDtype t) { return t == KvDtype::kF32 ? "f32" : "f16"; }

Result<KvDtype> parse_kv_dtype(std::string_view name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "f16") return KvDtype::kF16;
  return make_error(StatusCode::kInvalidArgument, "unknown KV cache dtype '{}' (supported: f32, f16)", name);
}

KvCache::KvCache(const KvGeometry& g, int32_t n_blocks, int32_t max_leases)
    : g_(g), pool_(n_blocks), leases_(max_leases) {
  layer_data_.resize(g.n_layer);
  for (auto& d : layer_data_) d.assign(static_cast<size_t>(n_blocks) * g.page_bytes(), 0);
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
    if (lease_listener_) lease_listener_->on_lease_end(seq.lease);
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
  const int64_t elem = kv_elem_bytes(g_.dtype);
  uint8_t* page = const_cast<uint8_t*>(layer_data_[layer].data()) +
                  static_cast<int64_t>(seq.blocks[pos / P]) * g_.page_bytes();
  return page + (static_cast<int64_t>(head) * P + pos % P) * 2 * g_.head_dim * elem;
}

const void* KvCache::row(const SeqKv& seq, int layer, int head, int32_t pos) const {
  return row_ptr(seq, layer, head, pos);
}

void KvCache::write(const SeqKv& seq, int layer, int head, int32_t pos, const float* k, const float* v) {
  uint8_t* dst = row_ptr(seq, layer, head, pos);
  const int hd = g_.head_dim;
  if (g_.dtype == KvDtype::kF32) {
    std::memcpy(dst, k, hd * 4);
    std::memcpy(dst + hd * 4, v, hd * 4);
  } else {
    uint16_t* h = reinterpret_cast<uint16_t*>(dst);
    for (int d = 0; d < hd; ++d) h[d] = fp32_to_fp16(k[d]);
    for (int d = 0; d < hd; ++d) h[hd + d] = fp32_to_fp16(v[d]);
  }
}

void KvCache::read(const SeqKv& seq, int layer, int head, int32_t pos, float* k, float* v) const {
  const uint8_t* src = row_ptr(seq, layer, head, pos);
  const int hd = g_.head_dim;
  if (g_.dtype == KvDtype::kF32) {
    std::memcpy(k, src, hd * 4);
    std::memcpy(v, src + hd * 4, hd * 4);
  } else {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
    for (int d = 0; d < hd; ++d) k[d] = fp16_to_fp32(h[d]);
    for (int d = 0; d < hd; ++d) v[d] = fp16_to_fp32(h[hd + d]);
  }
}

void KvCache::fill_random(std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& layer : layer_data_) {
    if (g_.dtype == KvDtype::kF32) {
      float* f = reinterpret_cast<float*>(layer.data());
      for (size_t i = 0; i < layer.size() / 4; ++i) f[i] = nd(rng);
    } else {
      uint16_t* h = reinterpret_cast<uint16_t*>(layer.data());
      for (size_t i = 0; i < layer.size() / 2; ++i) h[i] = fp32_to_fp16(nd(rng));
    }
  }
}

}  // namespace hs
