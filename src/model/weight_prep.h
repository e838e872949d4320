// model/weight_prep.h — handing a model's GGUF weights (model/weights.h views) to its backend:
// one matrix, or a group that shares an input (q / k / v, gate / up: a device may place them
// back to back for one matmul_multi). Shared by every decoder. Cost: the backend's
// prepare_weight (a view on the CPU, an upload on CUDA), once at load.
#pragma once

#include <initializer_list>
#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/weights.h"

namespace hs {

// The host tensor of a weight view: [n_out][n_in] of its GGUF type.
Tensor host_matrix(const WeightView& w);
// out = the backend's form of w.
Status prepare_matrix(Backend& b, const WeightView& w, const std::string& name, Tensor& out);
// out[i] = the backend's form of w[i], prepared together (Backend::prepare_weight_group).
Status prepare_group(Backend& b, std::initializer_list<const WeightView*> w, std::initializer_list<std::string> names,
                     std::initializer_list<Tensor*> out);

}  // namespace hs
