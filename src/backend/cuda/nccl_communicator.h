// backend/cuda/nccl_communicator.h — the CUDA ranks' collectives through NCCL (backend/communicator.h).
//
// One process, one host thread, one NCCL communicator per GPU (ncclCommInitAll); every collective
// is a group of per-rank calls on the ranks' own streams, so it is ordered after each rank's
// queued ops without a host sync. libnccl.so.2 is loaded with dlopen when the first tensor-parallel
// model is built (HS_NCCL_LIB names the file; else the loader's search path, then the copy that
// PyTorch's nvidia-nccl wheel installs): the library is ~200 MB, so binaries and bundles that never
// run TP > 1 do not carry or need it. NVLink SHARP / multicast (NVLS) is turned off
// (NCCL_NVLS_ENABLE=0 unless the environment sets it): on the lent machines a program using it can
// take the host's GPUs out of service.
#pragma once

#include <memory>
#include <span>

#include "backend/communicator.h"

namespace hs::cuda {

Result<std::unique_ptr<Communicator>> make_nccl_communicator(std::span<Backend* const> ranks);

}  // namespace hs::cuda
