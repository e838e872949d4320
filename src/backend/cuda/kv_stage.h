// backend/cuda/kv_stage.h — a sequence's KV pages of one layer gathered into a device staging
// copy in the flash-prefill kernel's 16-bit layout (kv_stage.cu), so a prompt run can use the
// tensor-core flash prefill where the pages themselves cannot feed it: pages in mapped pinned
// host memory (the host tier: the flash kernel would read every key over PCIe once per query
// tile, quadratic in traffic) and fp8 / int8 / int4 pages (the flash kernel reads f16 / bf16).
//
// The copy: page i of the list (block ids on the device) becomes page i of the staging view,
// kv head by kv head; f16 / bf16 pages are copied as they are (bf16 stays bf16), fp8 / int8 /
// int4 rows are decoded as the attention kernel decodes them (d q; d e4m3(e); fmaf(u, d, m) in
// fp32) and rounded to f16 (nearest even). One CTA per (page, kv head) with 16-byte loads and
// stores: a host-tier gather runs at the bus's rate (~2K CTAs keep MBs in flight).
// Range: f16 holds |x| <= 65504; an int8 / fp8 value past that (a scale near f16's top) becomes
// inf in the copy, where the exact kernel keeps it in fp32 (K / V that large are not real data).
// Cost: reads the pages once (e.g. 256K tokens of the 8B shape at int4: 285 MB a layer over
// PCIe, ~10 ms at 25 GB/s), writes n_pages * kv_stage_page_bytes (1.07 GB a layer at f16).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace hs::cuda {

// f16 / bf16 plain pages, or fp8 / int8 / int4 scaled pages in kv_scaled_layout_ok's layout
// with rows a multiple of 16 bytes; 16-token pages or more.
bool kv_stage_supported(const KvLayerView& src);
// The staging copy's view of `src` at base: plain pages, bf16 for bf16 sources, f16 otherwise.
KvLayerView kv_stage_view(const KvLayerView& src, void* base);
// Bytes of one staged page (n_kv_heads * P * 2 * head_dim * 2).
size_t kv_stage_page_bytes(const KvLayerView& src);

// dst page i = src page blocks[i] (blocks: device [n_pages] block ids, valid for src), for
// i < n_pages; dst = kv_stage_view(src, base) with room for n_pages pages. cudaErrorInvalidValue
// (nothing launched) for a view kv_stage_supported refuses or a mismatched dst.
cudaError_t launch_kv_stage(const KvLayerView& src, const int32_t* blocks, int n_pages, const KvLayerView& dst,
                            cudaStream_t s);

}  // namespace hs::cuda
