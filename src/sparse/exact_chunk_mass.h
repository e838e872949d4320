// sparse/exact_chunk_mass.h — exact per-head log softmax mass of chunks, from the KV pages.
//
// For query heads g of one kv head and chunk c of C tokens, L_gc = log Σ_{t∈c} exp(α q_g·k_t)
// (SparseKernels::chunk_log_mass: K rows only). The oracle selector ranks every
// candidate chunk by it, and the exact reranker (exact_rerank.h) a selector's shortlist.
// Reads the chunks' K rows: needs a plain KV dtype (f32 / f16).
#pragma once

#include <cstdint>
#include <span>

#include "kv/kv_cache.h"
#include "sparse/selector.h"
#include "sparse/sparse_kernels.h"

namespace hs {

// out [chunks.size()][in.n_q]: exact per-head log masses of the listed chunks (a chunk past
// the stored keys gets -inf).
void exact_chunk_log_masses(const SparseKernels& k, const KvCache& kv, float scale, int chunk_tokens,
                            const SelectInput& in, std::span<const int32_t> chunks, float* out);
// The same for the consecutive chunks [chunk_begin, chunk_end).
void exact_chunk_log_masses(const SparseKernels& k, const KvCache& kv, float scale, int chunk_tokens,
                            const SelectInput& in, int32_t chunk_begin, int32_t chunk_end, float* out);

}  // namespace hs
