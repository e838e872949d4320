// model/forward_plan.h — turns a Batch into the backend's ForwardPlan (the host half of plan/run).
//
// Validates the batch (sequence indices, token ids, positions continuing each sequence's
// KV), reserves the pages the step writes, and lays out what the backend copies into its
// fixed buffers: tokens per sequence, the rows that want logits, the CSR page table.
// Nothing here touches device memory. Cost: O(n_tokens + pages of the step's sequences).
#pragma once

#include <span>

#include "backend/backend.h"
#include "model/batch.h"

namespace hs {

// Fills `plan` for `batch` (the spans point into batch and seqs, which must outlive the
// step). next_pos[s] gets each sequence's token count after the step. Errors leave every
// sequence as it was (pages may have been reserved, as KvCache::reserve does).
Status build_forward_plan(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, ThreadPool& pool, int n_vocab,
                       ForwardPlan& plan, std::vector<int32_t>& next_pos);

}  // namespace hs
