// backend/communicator.h — the collectives tensor parallelism needs between the ranks of one
// model (model/tensor_parallel.h): an all-reduce after the attention and FFN row-parallel
// matmuls, and a gather of the vocabulary-parallel logits. One host thread drives every rank
// (the Decoder runs the ranks' ops in lockstep), so a collective takes all ranks' tensors in one
// call, as NCCL's grouped calls do in one process.
//
// Implementations: HostCommunicator (the CPU backend: every rank's tensors are host memory; it
// sums in rank order, so every rank gets the same bits), and on a CUDA build the NCCL one
// (backend/cuda/nccl_communicator.cpp; libnccl is loaded at run time, so a binary without TP
// never needs it). Cost of the host one: reads N and writes N copies of the tensor.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hs {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // x[r] ([rows][cols] f32 in rank r's memory, the same shape on every rank) becomes Σ_r x[r] on
  // every rank, summed in rank order. Ordered after the work queued on each rank before it.
  virtual Status all_reduce_sum(std::span<const Tensor> x) = 0;
  // out ([rows][Σ cols_r] f32, rank 0's memory) = the parts side by side in rank order:
  // out[:, off_r : off_r + parts[r].cols] = parts[r] ([rows][cols_r] f32 in rank r's memory).
  virtual Status gather_columns(std::span<const Tensor> parts, Tensor out) = 0;
};

// The CPU's communicator over `size` ranks (host memory).
class HostCommunicator final : public Communicator {
 public:
  explicit HostCommunicator(int size) : size_(size) {}
  int size() const override { return size_; }
  std::string name() const override { return "host"; }
  Status all_reduce_sum(std::span<const Tensor> x) override;
  Status gather_columns(std::span<const Tensor> parts, Tensor out) override;

 private:
  int size_;
};

// A communicator between the backends of `ranks` (one per rank, all of one device kind): the host
// one for the CPU, NCCL for CUDA (a clear error where libnccl.so.2 cannot be loaded).
Result<std::unique_ptr<Communicator>> make_communicator(std::span<Backend* const> ranks);

}  // namespace hs
