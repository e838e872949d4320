// backend/cuda/flash_prefill.h — tensor-core flash attention for prefill over the paged KV copy.
//
// The same attention as launch_attention (kernels.h): token i of the step, at position
// t.positions[i] of sequence t.seq_index[i], attends to keys [first, pos] of its sequence
// (first = max(0, pos - window + 1) with a window, else 0) read through the CSR page table;
// the K/V of the step's own tokens must already be written. Several sequences may share a
// step (each one's tokens contiguous, in increasing position order; a sequence may start past
// position 0 and then also sees its cached prefix). GQA: q head h reads kv head h / group.
// Output normalised, f32, into out's rows (q, out: [n][n_head * head_dim] f32).
//
// Algorithm (FlashAttention-2): one CTA of 4 warps takes a tile of M query rows — M / group
// consecutive tokens times the group's q heads, so every K/V tile is read once per GQA group —
// and one kv head; K/V tiles of N keys stream through shared memory with cp.async (double
// buffered, one page lookup per 16 keys); S = Q K^T and O += P V run on
// mma.sync.m16n8k16 (f16 or bf16 inputs, the cache's type; fp32 accumulation), the softmax is
// online in fp32 registers (exp2 of log2e-prescaled scores). Masks only on the tiles that need
// them (the causal diagonal, a window's edge, a tile shared by two sequences). No tables, no
// preparation kernel, no scratch: the launch is one kernel and CUDA-graph capturable.
//
// Precision (what the tensor cores cost against the exact fp32 kernel): Q is multiplied by
// scale * log2(e) and rounded to the cache's type (unit roundoff u = 2^-11 for f16, 2^-8 for
// bf16), so a score carries an error of at most u * scale * sum_d |q_d k_d| (typically
// ~u * |score| / sqrt(3), random signs); the softmax weights are rounded to the same type before
// P V (relative u each; the row sum is kept in fp32 from the unrounded weights). Both move the
// output by about u * max|V| at worst, far less on average (tests/ops/test_flash_prefill.cpp
// bounds max |err| by 4e-3 * max|V| for f16 and 2.5e-2 * max|V| for bf16). f16 Q saturates at
// +-65504 after the prescale. K/V are used as stored (no extra rounding).
//
// Cost: reads each K/V row of a sequence once per (tile of M / group tokens, kv head) from L2;
// ~4 * head_dim FLOPs per (q head, visible key) on tensor cores, plus up to one tile of masked
// keys per tile row. Shared memory per CTA: head_dim 64: 48 KiB, 128: 96 KiB, 256: 96 KiB.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace hs::cuda {

// f16 / bf16 pages of 16 * 2^k tokens, head_dim in {64, 128, 256}, 1 <= group <= 8.
bool flash_prefill_supported(const KvLayerView& kv, int head_dim, int group);

// Device scratch a launch needs: none (0); kept so a later version may add some.
size_t flash_prefill_scratch_bytes(int64_t n_tokens, int n_head, int head_dim);

// q, out: [n][n_head * head_dim] f32 rows (n = q.rows, any stride); a.split / a.scratch are
// ignored; scratch: [flash_prefill_scratch_bytes] (may be null when that is 0). Returns
// cudaErrorInvalidValue for a shape flash_prefill_supported refuses, else cudaGetLastError().
cudaError_t launch_flash_prefill(KvLayerView kv, StepTables t, CRows q, Rows out, const AttnArgs& a, void* scratch,
                                 cudaStream_t s);

}  // namespace hs::cuda
