// model/workspace.h — the buffers a decoder's forward pass runs on, sized once for the largest
// step (ARCHITECTURE.md, "Backends": a per-model Workspace): the activations as f32 tensors
// carved from one backend allocation, and the logit rows (the final norm's rows, the logits,
// and on a device backend their page-locked host copy). Shared by every decoder (Decoder,
// HybridDecoder). Cost: one allocation per growth; nothing per step.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hs {

// slots[i] = [rows][widths[i]] f32 views of one allocation of `b` (64-byte aligned each), held
// in `mem` (its previous allocation is released first). `what` names it in errors.
Status carve_activations(Backend& b, int64_t rows, std::span<const int64_t> widths, std::span<Tensor* const> slots,
                         std::string_view what, Buffer& mem);

// The rows that want logits: grown by reserve (never shrunk).
struct LogitRows {
  Buffer mem;
  int64_t capacity = 0;  // rows
  Tensor hsel, logits;   // [n_out][n_embd], [n_out][n_vocab] f32 on the backend
  Buffer host;           // [capacity][n_vocab] f32, page-locked (device backends only)
  Status reserve(Backend& b, int64_t n_embd, int64_t n_vocab, int64_t rows);
};

}  // namespace hs
