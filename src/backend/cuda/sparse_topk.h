// backend/cuda/sparse_topk.h — the sparse selection's top-k launchers (sparse_topk.cu), called by
// launch_sparse_select (sparse_select.cu) after the scores of a step's rows are in SelectArgs.
//   launch_shortlist: the best a.shortlist of every candidate's score into a.list, ascending
//     (shortlist_kernel: a cluster of up to 8 CTAs a row; docs/gpu-sparse.md);
//   launch_topk: one CTA of 1024 threads a row (topk_kernel), by mode: the selection from every
//     candidate's score (flat), from the list's scores (from list), the list's best a.shortlist2
//     into a.list2 (list to list), or the list ranked by group mass first (rank from list).
// Graph-safe: fixed grids; what a row selects is read from the step tables on the device.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/sparse_kernels.h"

namespace hs::cuda {

enum TopkMode : int { kTopkFlat = 0, kTopkFromList = 2, kTopkListToList = 3, kTopkRankFromList = 4 };

// max_candidates: an upper bound on any row's candidate chunks (the top-k's key count).
void launch_shortlist(int64_t rows, int32_t max_candidates, cudaStream_t s, const StepTables& t, const SelectArgs& a);
void launch_topk(TopkMode mode, int64_t rows, int32_t n_keys, cudaStream_t s, const StepTables& t,
                 const SelectArgs& a);

}  // namespace hs::cuda
