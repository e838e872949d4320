// backend/cuda/nccl_communicator.cpp — NcclCommunicator (nccl_communicator.h): libnccl loaded at
// run time, one communicator per rank, grouped collectives on the ranks' streams.
#include "backend/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace hs::cuda {

namespace {

// The few entry points used, resolved from the library once per process.
struct NcclApi {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

// Where to look for the library, in order.
std::vector<std::string> nccl_candidates() {
  std::vector<std::string> c;
  if (const char* p = std::getenv("HS_NCCL_LIB"); p && *p) c.emplace_back(p);
  c.emplace_back("libnccl.so.2");
  c.emplace_back("libnccl.so");
  for (const char* py : {"python3.12", "python3.11", "python3.10"}) {
    for (const char* root : {"/usr/local/lib/", "/usr/lib/"})
      c.push_back(std::string(root) + py + "/dist-packages/nvidia/nccl/lib/libnccl.so.2");
    c.push_back(std::string("/usr/local/lib/") + py + "/site-packages/nvidia/nccl/lib/libnccl.so.2");
  }
  return c;
}

Result<const NcclApi*> load_nccl() {
  static NcclApi api;
  static std::string error;
  static bool tried = false;
  if (tried) {
    if (!error.empty()) return make_error(StatusCode::kUnsupported, "{}", error);
    return &api;
  }
  tried = true;
  void* lib = nullptr;
  std::string looked;
  for (const std::string& path : nccl_candidates()) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    looked += (looked.empty() ? "" : ", ") + path;
  }
  if (!lib) {
    error = "tensor parallelism on CUDA needs NCCL: libnccl.so.2 was not found (tried " + looked +
            "; set HS_NCCL_LIB to its path)";
    return make_error(StatusCode::kUnsupported, "{}", error);
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn && error.empty()) error = std::string("libnccl has no ") + name;
  };
  sym(api.comm_init_all, "ncclCommInitAll");
  sym(api.comm_destroy, "ncclCommDestroy");
  sym(api.group_start, "ncclGroupStart");
  sym(api.group_end, "ncclGroupEnd");
  sym(api.all_reduce, "ncclAllReduce");
  sym(api.send, "ncclSend");
  sym(api.recv, "ncclRecv");
  sym(api.error_string, "ncclGetErrorString");
  if (!error.empty()) return make_error(StatusCode::kUnsupported, "{}", error);
  return &api;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclApi* api, std::vector<Backend*> ranks, std::vector<ncclComm_t> comms)
      : api_(api), ranks_(std::move(ranks)), comms_(std::move(comms)) {}
  ~NcclCommunicator() override {
    if (staging_) {
      (void)cudaSetDevice(ranks_[0]->device_index());
      (void)cudaFree(staging_);
    }
    for (ncclComm_t c : comms_) (void)api_->comm_destroy(c);
  }

  int size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override { return "nccl"; }

  Status all_reduce_sum(std::span<const Tensor> x) override {
    HS_RETURN_IF_ERROR(check(x, "all_reduce_sum"));
    HS_RETURN_IF_ERROR(nccl(api_->group_start(), "ncclGroupStart"));
    Status st;
    for (int r = 0; r < size() && st.is_ok(); ++r) {
      const size_t count = static_cast<size_t>(x[r].rows * x[r].cols);
      st = nccl(api_->all_reduce(x[r].data, x[r].data, count, ncclFloat32, ncclSum, comms_[r], stream(r)),
                "ncclAllReduce");
    }
    const Status end = nccl(api_->group_end(), "ncclGroupEnd");
    return st.is_ok() ? end : st;
  }

  Status gather_columns(std::span<const Tensor> parts, Tensor out) override {
    HS_RETURN_IF_ERROR(check(parts, "gather_columns"));
    int64_t total = 0, staged = 0;
    for (const Tensor& t : parts) total += t.cols;
    for (int r = 1; r < size(); ++r) staged += parts[r].rows * parts[r].cols;
    if (out.rows != parts[0].rows || out.cols != total || out.device != Device::kCuda)
      return make_error(StatusCode::kInvalidArgument, "gather_columns: out is [{}][{}], the parts make [{}][{}]",
                        out.rows, out.cols, parts[0].rows, total);
    HS_RETURN_IF_ERROR(ranks_[0]->make_current());
    if (staged > staging_floats_) {
      if (staging_) HS_CUDA(cudaFree(staging_));
      staging_ = nullptr;
      HS_CUDA(cudaMalloc(&staging_, static_cast<size_t>(staged) * sizeof(float)));
      staging_floats_ = staged;
    }
    // Every other rank's part lands contiguous in rank 0's staging, then one strided copy each.
    HS_RETURN_IF_ERROR(nccl(api_->group_start(), "ncclGroupStart"));
    Status st;
    int64_t off = 0;
    for (int r = 1; r < size() && st.is_ok(); ++r) {
      const size_t count = static_cast<size_t>(parts[r].rows * parts[r].cols);
      st = nccl(api_->send(parts[r].data, count, ncclFloat32, 0, comms_[r], stream(r)), "ncclSend");
      if (st.is_ok())
        st = nccl(api_->recv(staging_ + off, count, ncclFloat32, r, comms_[0], stream(0)), "ncclRecv");
      off += static_cast<int64_t>(count);
    }
    const Status end = nccl(api_->group_end(), "ncclGroupEnd");
    HS_RETURN_IF_ERROR(st);
    HS_RETURN_IF_ERROR(end);
    HS_RETURN_IF_ERROR(ranks_[0]->make_current());
    int64_t col = 0;
    off = 0;
    for (int r = 0; r < size(); ++r) {
      const Tensor& p = parts[r];
      const void* src = r == 0 ? p.data : static_cast<const void*>(staging_ + off);
      const size_t spitch = r == 0 ? static_cast<size_t>(p.row_stride) : static_cast<size_t>(p.cols) * 4;
      HS_CUDA(cudaMemcpy2DAsync(out.f32() + col, static_cast<size_t>(out.row_stride), src, spitch,
                                static_cast<size_t>(p.cols) * 4, static_cast<size_t>(p.rows),
                                cudaMemcpyDeviceToDevice, stream(0)));
      if (r > 0) off += p.rows * p.cols;
      col += p.cols;
    }
    return Status::ok();
  }

 private:
  cudaStream_t stream(int r) const { return static_cast<cudaStream_t>(ranks_[r]->native_stream()); }
  Status nccl(ncclResult_t rc, const char* what) const {
    if (rc == ncclSuccess) return Status::ok();
    return make_error(StatusCode::kInternal, "nccl: {} failed: {}", what, api_->error_string(rc));
  }
  Status check(std::span<const Tensor> x, const char* what) const {
    if (static_cast<int>(x.size()) != size())
      return make_error(StatusCode::kInvalidArgument, "{}: {} tensors for {} ranks", what, x.size(), size());
    for (const Tensor& t : x)
      if (t.dtype != DType::F32 || t.device != Device::kCuda || !t.contiguous())
        return make_error(StatusCode::kInvalidArgument, "{}: NCCL takes contiguous f32 device tensors", what);
    return Status::ok();
  }

  const NcclApi* api_;
  std::vector<Backend*> ranks_;
  std::vector<ncclComm_t> comms_;
  float* staging_ = nullptr;  // [Σ_{r>0} rows · cols_r] on rank 0: gathered parts before their strided copy
  int64_t staging_floats_ = 0;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_nccl_communicator(std::span<Backend* const> ranks) {
  HS_ASSIGN_OR_RETURN(const NcclApi* api, load_nccl());
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::vector<int> devices;
  for (Backend* b : ranks) {
    if (b->device() != Device::kCuda) return make_error(StatusCode::kInvalidArgument, "NCCL ranks must be CUDA backends");
    devices.push_back(b->device_index());
  }
  std::vector<ncclComm_t> comms(ranks.size());
  const ncclResult_t rc = api->comm_init_all(comms.data(), static_cast<int>(ranks.size()), devices.data());
  if (rc != ncclSuccess)
    return make_error(StatusCode::kInternal, "nccl: ncclCommInitAll over {} GPUs failed: {}", ranks.size(),
                      api->error_string(rc));
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(api, std::vector<Backend*>(ranks.begin(), ranks.end()), std::move(comms)));
}

}  // namespace hs::cuda
