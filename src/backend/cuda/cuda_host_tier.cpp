// backend/cuda/cuda_host_tier.cpp — the CUDA host tier (docs/gpu-sparse.md, "Host tier"): the KV
// pages in mapped pinned host memory (bind_kv allocates them there when the tier is on), and,
// while a sparse runtime is attached, the device hot set that serves the sparse rows' selected
// pieces (hot_set.h): its pools, the per-layer fetch launched between selection and attention,
// and the hit / miss counters handed to the runtime at end_step.
//
// What it owns: one device allocation of the hot set (per sparse layer: residency map, slot
// metadata, the CLOCK state and the slots), its counters (device + a pinned copy) and the
// per-step fetch scratch (grown with the step, never shrunk).
// Cost: device memory = the hot budget (the residency map, 4 B per block and kv head and layer,
// comes out of it); per step and sparse layer one launch (resolve: n_kv CTAs, which also copy the
// misses' bytes over PCIe); end_step copies 32 bytes back.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "sparse/hot_chunks.h"
#include "sparse/sparse_runtime.h"

namespace hs::cuda {

namespace {
constexpr int64_t kAlign = 256;
int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Status CudaBackend::set_kv_tier(const KvTier& t) {
  if (t.host && t.hot_budget_bytes < 0)
    return make_error(StatusCode::kInvalidArgument, "--device-kv-budget {} B: must be >= 0", t.hot_budget_bytes);
  HS_CUDA(cudaSetDevice(device_));
  const bool rebind = kv_bound_ && t.host != kv_tier_.host;
  kv_tier_ = t;
  // HS_CUDA_HOT_FORCE_MISS=F: a fraction F of the selected pieces miss (1: every one).
  if (const char* e = std::getenv("HS_CUDA_HOT_FORCE_MISS")) hot_force_miss_ = std::clamp(std::strtof(e, nullptr), 0.0f, 1.0f);
  if (rebind) {
    const KvCache* kv = kv_bound_;
    kv_bound_ = nullptr;  // forces bind_kv to reallocate in the new place
    HS_RETURN_IF_ERROR(bind_kv(*kv));
  }
  if (sparse_) {
    free_hot_set();
    if (kv_bound_) HS_RETURN_IF_ERROR(bind_hot_set());
  }
  return Status::ok();
}

void CudaBackend::free_hot_set() {
  if (hot_.base || hot_.counters) {
    (void)cudaStreamSynchronize(stream_);
    ++alloc_generation_;
  }
  (void)cudaFree(hot_.base);
  (void)cudaFree(hot_.counters);
  (void)cudaFreeHost(hot_.counters_host);
  hot_ = HotSet{};
  hot_max_tokens_ = 0;
}

Status CudaBackend::bind_hot_set() {
  if (!kv_tier_.host || !sparse_ || !kv_bound_) return Status::ok();
  const KvGeometry& g = kv_geom_;
  const int n_layers = static_cast<int>(std::count_if(sketch_slot_.begin(), sketch_slot_.end(), [](int s) { return s >= 0; }));
  if (n_layers == 0) return Status::ok();
  if (hot_.base) return Status::ok();  // freed whenever the cache is rebound or the runtime changes
  const int64_t elem = kv_elem_unit_bytes(layer_kv_view(0).elem);
  const int64_t piece = kv_page_elems_ * elem / g.n_kv_heads;  // one kv head's block of a page (scaled: with its scales)
  const int cap = sparse_->config().max_selected_chunks();
  const int64_t res_ints = static_cast<int64_t>(g.n_kv_heads) * kv_blocks_;
  const int64_t clock_ints = 2LL * g.n_kv_heads;
  const int64_t fixed = align_up((res_ints + clock_ints) * 4);
  const int64_t per_layer = kv_tier_.hot_budget_bytes / n_layers;
  const int64_t per_slot = static_cast<int64_t>(g.n_kv_heads) * (piece + 12);
  const int64_t n_slots = per_layer > fixed + 2 * kAlign ? (per_layer - fixed - 2 * kAlign) / per_slot : 0;
  if (n_slots < cap) {
    const int64_t need = n_layers * (fixed + 2 * kAlign + cap * per_slot);
    return make_error(StatusCode::kInvalidArgument,
                      "--device-kv-budget {} B is too small for the GPU host tier: one sequence's selection ({} pieces "
                      "of {} B per (layer, kv head), {} sparse layers x {} kv heads) plus the residency map needs at "
                      "least {} B ({:.0f} MiB); each further sequence decoding at once needs {:.0f} MiB more",
                      kv_tier_.hot_budget_bytes, cap, piece, n_layers, g.n_kv_heads, need, need / 1048576.0,
                      n_layers * cap * per_slot / 1048576.0);
  }
  if (n_slots > 0x7fffffff / 2)
    return make_error(StatusCode::kInvalidArgument, "--device-kv-budget: {} slots per pool is too many", n_slots);
  HotSet h;
  h.n_slots = static_cast<int32_t>(n_slots);
  h.n_layers = n_layers;
  h.piece_bytes = piece;
  h.res_ints = res_ints;
  h.meta_ints = static_cast<int64_t>(g.n_kv_heads) * n_slots;
  h.clock_ints = clock_ints;
  h.slots_bytes = static_cast<int64_t>(g.n_kv_heads) * n_slots * piece;
  h.layer_bytes = align_up((res_ints + 3 * h.meta_ints + clock_ints) * 4) + align_up(h.slots_bytes);
  HS_RETURN_IF_ERROR(device_malloc(&h.base, static_cast<size_t>(h.layer_bytes) * n_layers,
                                   fmt::format("the hot set ({} layers x {} kv heads x {} slots of {} B)", n_layers,
                                               g.n_kv_heads, n_slots, piece)));
  void* counters = nullptr;
  if (Status st = device_malloc(&counters, kHotCounters * sizeof(unsigned long long), "the hot-set counters");
      !st.is_ok()) {
    (void)cudaFree(h.base);
    return st;
  }
  h.counters = static_cast<unsigned long long*>(counters);
  void* host = nullptr;
  if (cudaMallocHost(&host, kHotCounters * sizeof(unsigned long long)) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(h.base);
    (void)cudaFree(counters);
    return make_error(StatusCode::kIoError, "cuda: no pinned host memory for the hot-set counters");
  }
  h.counters_host = static_cast<unsigned long long*>(host);
  std::memset(host, 0, kHotCounters * sizeof(unsigned long long));
  hot_ = h;
  hot_max_tokens_ = n_slots / cap;
  sparse_->set_device_bytes(sparse_->device_sketch_bytes(), h.layer_bytes * n_layers);
  HS_CUDA(cudaMemsetAsync(hot_.counters, 0, kHotCounters * sizeof(unsigned long long), stream_));
  for (int l = 0; l < n_layers; ++l) HS_CUDA(launch_hot_reset(hot_pool(l), stream_));
  HS_CUDA(cudaStreamSynchronize(stream_));
  spdlog::info("cuda host tier: KV pages in pinned host memory; hot set {:.1f} MiB on the device ({} slots of {} B per "
               "(layer, kv head), {} sequences' selections of {} pieces per step)",
               static_cast<double>(h.layer_bytes) * n_layers / 1048576.0, n_slots, piece, hot_max_tokens_, cap);
  return Status::ok();
}

HotPoolView CudaBackend::hot_pool(int slot) const {
  HotPoolView v;
  uint8_t* base = static_cast<uint8_t*>(hot_.base) + static_cast<int64_t>(slot) * hot_.layer_bytes;
  int32_t* ints = reinterpret_cast<int32_t*>(base);
  v.res = ints;
  v.slot_block = ints + hot_.res_ints;
  v.slot_fill = v.slot_block + hot_.meta_ints;
  v.slot_used = reinterpret_cast<uint32_t*>(v.slot_fill + hot_.meta_ints);
  v.clock = v.slot_used + hot_.meta_ints;
  v.slots = base + align_up((hot_.res_ints + 3 * hot_.meta_ints + hot_.clock_ints) * 4);
  v.n_blocks = kv_blocks_;
  v.n_slots = hot_.n_slots;
  v.n_kv_heads = kv_geom_.n_kv_heads;
  v.page_tokens = kv_geom_.page_tokens;
  v.piece_bytes = hot_.piece_bytes;
  return v;
}

Result<CudaBackend::HotSetAudit> CudaBackend::audit_hot_set() {
  HotSetAudit a;
  if (!hot_.base) return a;
  HS_CUDA(cudaSetDevice(device_));
  HS_CUDA(cudaStreamSynchronize(stream_));
  const int n_kv = kv_geom_.n_kv_heads;
  const int64_t S = hot_.n_slots, piece = hot_.piece_bytes;
  for (int l = 0; l < static_cast<int>(sketch_slot_.size()); ++l) {
    if (sketch_slot_[l] < 0) continue;
    const HotPoolView pool = hot_pool(sketch_slot_[l]);
    const KvLayerView kv = layer_kv_view(l);
    std::vector<int32_t> res(static_cast<size_t>(n_kv) * kv_blocks_), blk(static_cast<size_t>(n_kv * S)),
        fill(static_cast<size_t>(n_kv * S));
    std::vector<uint8_t> slots(static_cast<size_t>(n_kv * S * piece)), page(static_cast<size_t>(piece));
    HS_CUDA(cudaMemcpy(res.data(), pool.res, res.size() * 4, cudaMemcpyDefault));
    HS_CUDA(cudaMemcpy(blk.data(), pool.slot_block, blk.size() * 4, cudaMemcpyDefault));
    HS_CUDA(cudaMemcpy(fill.data(), pool.slot_fill, fill.size() * 4, cudaMemcpyDefault));
    HS_CUDA(cudaMemcpy(slots.data(), pool.slots, slots.size(), cudaMemcpyDefault));
    const int64_t page_bytes = kv_page_elems_ * kv_elem_unit_bytes(kv.elem);
    const int64_t row = kv_elem_row_bytes(kv.elem, kv.head_dim), scale = kv_elem_scale_bytes(kv.elem);
    for (int h = 0; h < n_kv; ++h)
      for (int64_t s = 0; s < S; ++s) {
        ++a.slots;
        const int32_t b = blk[static_cast<size_t>(h * S + s)];
        if (b < 0) { ++a.empty; continue; }
        if (b >= kv_blocks_ || res[static_cast<size_t>(int64_t{h} * kv_blocks_ + b)] != s) continue;  // reclaimable
        ++a.resident;
        const int64_t f = fill[static_cast<size_t>(h * S + s)];
        HS_CUDA(cudaMemcpy(page.data(), static_cast<const uint8_t*>(kv.base) + b * page_bytes + h * piece,
                           static_cast<size_t>(piece), cudaMemcpyDefault));
        const uint8_t* got = slots.data() + (h * S + s) * piece;
        bool same = std::memcmp(got, page.data(), static_cast<size_t>(f * 2 * row)) == 0;
        if (scale > 0)
          same = same && std::memcmp(got + kv.scales_offset, page.data() + kv.scales_offset,
                                     static_cast<size_t>(f * 2 * scale)) == 0;
        if (!same && a.stale == 0) {
          a.stale_layer = l;
          a.stale_head = h;
          a.stale_block = b;
          a.stale_fill = static_cast<int32_t>(f);
          for (int64_t t = 0; t < f && a.stale_token < 0; ++t)
            if (std::memcmp(got + t * 2 * row, page.data() + t * 2 * row, static_cast<size_t>(2 * row)) != 0)
              a.stale_token = static_cast<int32_t>(t);
        }
        a.stale += !same;
      }
  }
  return a;
}

Status CudaBackend::hot_fetch(int layer, int slot, const SelectArgs& s, int64_t rows, AttnArgs& a) {
  const int64_t n = sel_end_ - sel_first_;  // the selection's tokens (select_sparse)
  const int cap = s.rule.max_selected;
  const int n_kv = kv_geom_.n_kv_heads;
  const size_t ints = static_cast<size_t>(rows) * cap + hot_step_scratch_ints(n, n_kv, cap);
  HS_RETURN_IF_ERROR(grow(hot_scratch_, ints * sizeof(int32_t), "the hot-set step scratch"));
  int32_t* p = static_cast<int32_t*>(hot_scratch_.ptr);
  const int64_t per = static_cast<int64_t>(n_kv) * n * cap;
  HotStepArgs h;
  h.sel_chunks = s.sel_chunks;
  h.sel_pages = s.sel_pages;
  h.sel_len = s.sel_len;
  h.positions = d_positions_ + sel_first_;
  h.n_tokens = n;
  h.cap = cap;
  h.slots_out = p;
  h.miss_entry = p + rows * cap;
  h.miss_block = h.miss_entry + per;
  h.miss_slot = h.miss_block + per;
  h.miss_count = h.miss_slot + per;
  h.counters = hot_.counters;
  h.force_miss = hot_force_miss_;
  if (hot_kv_layer_ == layer && hot_force_miss_ < 1.0f) {  // this layer's K / V of the step: top-ups
    h.k = hot_k_;
    h.v = hot_v_;
    for (CRows* r : {&h.k, &h.v}) {  // the selection's rows
      r->p += sel_first_ * r->stride;
      r->rows = n;
    }
  }
  const HotPoolView pool = hot_pool(slot);
  {
    OpProfile::Scope prof(&profile_, "attention: hot fetch", stream_);
    HS_RETURN_IF_ERROR(launched(launch_hot_fetch(pool, layer_kv_view(layer), h, stream_), "hot_fetch"));
  }
  a.sp_pages = h.slots_out;
  a.sp_base = pool.slots;
  a.sp_head_bytes = static_cast<int64_t>(pool.n_slots) * pool.piece_bytes;
  a.sp_page_bytes = pool.piece_bytes;
  return Status::ok();
}

void CudaBackend::note_hot_kv(int layer, const Tensor& k, const Tensor& v) {
  hot_kv_layer_ = layer;
  hot_k_ = crows_of(k);
  hot_v_ = crows_of(v);
}

void CudaBackend::collect_hot_counters() {
  if (!hot_.counters_host || !sparse_) return;
  // The copy was enqueued by end_step before its synchronisation.
  unsigned long long now[kHotCounters];
  std::memcpy(now, hot_.counters_host, sizeof(now));
  HotChunkStats st;
  st.hits = static_cast<int64_t>(now[kHotHits] - hot_.seen[kHotHits]);
  st.misses = static_cast<int64_t>(now[kHotMisses] - hot_.seen[kHotMisses]);
  st.evictions = static_cast<int64_t>(now[kHotEvictions] - hot_.seen[kHotEvictions]);
  st.refused = static_cast<int64_t>(now[kHotOverflow] - hot_.seen[kHotOverflow]);
  st.bytes_moved = st.misses * hot_.piece_bytes;
  std::memcpy(hot_.seen, now, sizeof(now));
  if (st.hits || st.misses || st.refused) sparse_->count_fetch(st);
}

}  // namespace hs::cuda
