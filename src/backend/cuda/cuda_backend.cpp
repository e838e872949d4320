// backend/cuda/cuda_backend.cpp — CudaBackend (cuda_backend.h) minus its ops: device set-up,
// memory, weight upload, host<->device copies, the step's device tables and the device KV
// copy. The ops are in cuda_ops.cpp.
//
// Host C++20 (backend.h needs it; the kernels are nvcc C++17 behind kernels.h). Every CUDA
// and cuBLAS call is checked (cuda_check.h): a failure becomes a Status naming the call,
// file:line and the runtime's message; every allocation failure names the bytes, what they
// were for and the device's free / total memory. Nothing is allocated per step once the
// scratch buffers have reached the largest step's size.
// Cost: prepare_weight is host dequantization (all cores) + one 16 MiB copy per chunk,
// overlapped; begin_step is O(tokens + pages) host checks and one copy of the tables.
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_quant_warp.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#include "core/fp16.h"
#include "core/numa_policy.h"
#include "core/quant.h"

namespace hs::cuda {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr size_t kLoadChunkBytes = size_t{16} << 20;  // bf16 bytes per weight upload chunk

bool same_geometry(const KvGeometry& a, const KvGeometry& b) {
  return a.n_layer == b.n_layer && a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim &&
         a.page_tokens == b.page_tokens && a.dtype == b.dtype;
}

}  // namespace

std::optional<QuantKind> quant_kind_of(DType t) {
  switch (t) {
    case DType::Q4_0: return QuantKind::kQ4_0;
    case DType::Q8_0: return QuantKind::kQ8_0;
    case DType::Q4_K: return QuantKind::kQ4_K;
    default: return std::nullopt;
  }
}

// ---- life cycle -----------------------------------------------------------------------------

Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error(StatusCode::kNotFound, "no CUDA device: {}", cudaGetErrorString(e));
  }
  if (count == 0) return make_error(StatusCode::kNotFound, "no CUDA device: the CUDA runtime sees none");
  if (device_index < 0 || device_index >= count)
    return make_error(StatusCode::kInvalidArgument, "CUDA device {} is out of range: this machine has {} (0..{})",
                      device_index, count, count - 1);
  HS_ASSIGN_OR_RETURN(auto backend, CudaBackend::create(device_index));
  return std::unique_ptr<Backend>(std::move(backend));
}

Status CudaBackend::make_current() {
  HS_CUDA(cudaSetDevice(device_));
  return Status::ok();
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(int device_index) {
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  HS_RETURN_IF_ERROR(b->init(device_index));
  return b;
}

Status CudaBackend::init(int device_index) {
  if (const char* e = std::getenv("HS_CUDA_GRAPHS")) graphs_on_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_QUANT")) keep_quantized_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_GEMV")) gemv16_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_EARLY16")) early16_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_EARLYQ")) earlyq_ = std::string(e) == "1";
  if (const char* e = std::getenv("HS_CUDA_ROPE_KV")) rope_kv_fused_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_FLASH")) flash_on_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_QUANT_WARP")) quant_warp_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_PDL")) pdl_on_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_MMA16")) mma16_ = std::atoi(e);
  if (const char* e = std::getenv("HS_CUDA_DELTA_FUSED_MAX")) delta_fused_max_ = std::atoi(e);
  if (const char* e = std::getenv("HS_CUDA_QW_ROWS")) quant_warp_rows_ = std::clamp(std::atoi(e), 0, kMaxQuantWarpRows);
  if (const char* e = std::getenv("HS_CUDA_MMA16_VARIANT")) mma16_variant_ = std::atoi(e);
  if (const char* e = std::getenv("HS_CUDA_GEMMQ")) gemm_quant_ = std::string(e) != "0";
  if (const char* e = std::getenv("HS_CUDA_PREFILL_STAGE")) stage_max_bytes_ = std::strtoull(e, nullptr, 10);
  if (const char* e = std::getenv("HS_CUDA_GEMMQ_MIN")) gemm_quant_min_rows_ = std::max(1, std::atoi(e));
  if (const char* e = std::getenv("HS_CUDA_GEMMQ_WARP")) gemm_quant_warp_ = std::string(e) != "0";
  device_ = device_index;
  // The first call on a device creates its context (~0.5 GiB): on a card another process has
  // filled, this is where the error comes.
  if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error(StatusCode::kIoError, "cuda:{}: cannot start a CUDA context: {} ({}){}", device_,
                      cudaGetErrorString(e), cudaGetErrorName(e),
                      e == cudaErrorMemoryAllocation
                          ? "; the card is full (another process holds its memory: nvidia-smi shows which)"
                          : "");
  }
  cudaDeviceProp prop{};
  HS_CUDA(cudaGetDeviceProperties(&prop, device_));
  n_sm_ = std::max(1, prop.multiProcessorCount);
  name_ = fmt::format("cuda:{} {} (cc {}.{}, {:.0f} GiB)", device_, prop.name, prop.major, prop.minor,
                      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  HS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  HS_CUDA(cudaEventCreateWithFlags(&tables_copied_, cudaEventDisableTiming));
  for (auto& ev : load_copied_) HS_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  HS_CUBLAS(cublasCreate(&cublas_));
  // cublasSetStream resets the workspace to the default pool: set the stream first.
  HS_CUBLAS(cublasSetStream(cublas_, stream_));
  HS_RETURN_IF_ERROR(device_malloc(&cublas_workspace_, kCublasWorkspaceBytes, "the cuBLAS workspace"));
  HS_CUBLAS(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
  return Status::ok();
}

CudaBackend::~CudaBackend() {
  (void)cudaSetDevice(device_);
  if (stream_) (void)cudaStreamSynchronize(stream_);
  for (auto& [key, g] : graphs_)
    if (g.exec) (void)cudaGraphExecDestroy(g.exec);
  for (void* p : owned_) (void)cudaFree(p);
  for (Scratch* s : {&tables_dev_, &xb_, &yall_, &attn_, &wdq_, &qx_, &sel_, &scores_, &moe_h_, &xsplit_, &stage_})
    (void)cudaFree(s->ptr);
  free_hot_set();
  (void)cudaFree(hot_scratch_.ptr);
  if (kv_base_host_)
    (void)cudaFreeHost(kv_base_);
  else
    (void)cudaFree(kv_base_);
  (void)cudaFree(sketch_base_);
  (void)cudaFree(basis_dev_);
  if (cublas_) (void)cublasDestroy(cublas_);
  (void)cudaFree(cublas_workspace_);
  (void)cudaFreeHost(tables_host_);
  for (void* p : load_staging_) (void)cudaFreeHost(p);
  if (tables_copied_) (void)cudaEventDestroy(tables_copied_);
  for (auto* ev : load_copied_)
    if (ev) (void)cudaEventDestroy(ev);
  if (stream_) (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

// ---- memory ---------------------------------------------------------------------------------

Status CudaBackend::device_malloc(void** ptr, size_t bytes, std::string_view what) {
  *ptr = nullptr;
  ++alloc_generation_;
  const cudaError_t e = cudaMalloc(ptr, std::max<size_t>(bytes, 1));
  if (e == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();  // out-of-memory is not sticky; clear it
  *ptr = nullptr;
  size_t free_b = 0, total_b = 0;
  const bool known = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
  (void)cudaGetLastError();
  return make_error(StatusCode::kIoError, "cuda:{}: cannot allocate {} bytes ({}) for {}: {}; the device has {}", device_,
                    bytes, gib(bytes), what, cudaGetErrorString(e),
                    known ? fmt::format("{} free of {}", gib(free_b), gib(total_b)) : std::string("unknown free memory"));
}

Status CudaBackend::grow(Scratch& s, size_t bytes, std::string_view what) {
  if (bytes <= s.bytes) return Status::ok();
  size_t want = std::max(bytes, s.bytes + s.bytes / 2);
  want = (want + 255) / 256 * 256;
  if (s.ptr) {
    HS_CUDA(cudaStreamSynchronize(stream_));  // queued kernels may still read the old buffer
    HS_CUDA(cudaFree(s.ptr));
    s.ptr = nullptr;
    s.bytes = 0;
  }
  HS_RETURN_IF_ERROR(device_malloc(&s.ptr, want, what));
  s.bytes = want;
  return Status::ok();
}

Result<Buffer> CudaBackend::alloc(size_t bytes, std::string_view what) {
  HS_CUDA(cudaSetDevice(device_));
  if (bytes == 0) return Buffer(this, nullptr, 0);
  void* p = nullptr;
  HS_RETURN_IF_ERROR(device_malloc(&p, bytes, what));
  cudaError_t e = cudaMemsetAsync(p, 0, bytes, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    (void)cudaFree(p);
    return cuda_failure(e, "zeroing a new allocation", __FILE__, __LINE__);
  }
  return Buffer(this, p, bytes);
}

void CudaBackend::free_memory(void* ptr) {
  if (!ptr) return;
  ++alloc_generation_;
  (void)cudaSetDevice(device_);
  const cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) spdlog::warn("cuda:{}: cudaFree failed: {}", device_, cudaGetErrorString(e));
}

Result<Buffer> CudaBackend::alloc_host(size_t bytes, std::string_view what) {
  HS_CUDA(cudaSetDevice(device_));
  if (bytes == 0) return Buffer(this, nullptr, 0, /*host=*/true);
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error(StatusCode::kIoError, "cuda: cannot allocate {} bytes ({}) of pinned host memory for {}: {}", bytes,
                      gib(bytes), what, cudaGetErrorString(e));
  }
  std::memset(p, 0, bytes);
  return Buffer(this, p, bytes, /*host=*/true);
}

void CudaBackend::free_host_memory(void* ptr) {
  if (!ptr) return;
  const cudaError_t e = cudaFreeHost(ptr);
  if (e != cudaSuccess) spdlog::warn("cuda:{}: cudaFreeHost failed: {}", device_, cudaGetErrorString(e));
}

Status CudaBackend::ensure_load_staging(size_t bytes) {
  if (bytes <= load_staging_bytes_) return Status::ok();
  for (int b = 0; b < 2; ++b) {
    HS_CUDA(cudaEventSynchronize(load_copied_[b]));
    HS_CUDA(cudaFreeHost(load_staging_[b]));
    load_staging_[b] = nullptr;
  }
  load_staging_bytes_ = 0;
  for (int b = 0; b < 2; ++b) {
    const cudaError_t e = cudaMallocHost(&load_staging_[b], bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      load_staging_[b] = nullptr;
      return make_error(StatusCode::kIoError, "cuda: cannot allocate {} bytes of pinned host memory for weight upload: {}",
                        bytes, cudaGetErrorString(e));
    }
  }
  load_staging_bytes_ = bytes;
  return Status::ok();
}

Result<CudaBackend::WeightForm> CudaBackend::weight_form(const Tensor& host, std::string_view name) const {
  if (host.device != Device::kCpu)
    return make_error(StatusCode::kInvalidArgument, "cuda: weight {}: the source must be in host memory", name);
  if (!dequantize_supported(host.dtype))
    return make_error(StatusCode::kUnsupported,
                      "cuda: weight {}: type {} cannot be uploaded (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
                      "Q8_0, Q4_K, Q5_K, Q6_K)",
                      name, dtype_name(host.dtype));
  const auto info = dtype_info(host.dtype);
  if (!info || host.rows <= 0 || host.cols <= 0 || host.cols % info->block_elems != 0 || host.data == nullptr)
    return make_error(StatusCode::kInvalidArgument, "cuda: weight {}: bad shape {} (cols must be whole blocks)", name,
                      shape(host));
  if (host.row_stride < host.row_bytes())
    return make_error(StatusCode::kInvalidArgument, "cuda: weight {}: row stride {} B < row size {} B", name,
                      host.row_stride, host.row_bytes());
  // The device form: Q4_0, Q8_0 and Q4_K stay quantized (quant_layout.h's repacked rows,
  // dequantized in registers by the GEMV kernels; HS_CUDA_QUANT=0 turns this off); other
  // GGUF block types and F16 become f16 (their values are f16-scaled: a 10-bit mantissa keeps
  // them 8x closer than bf16's 7 bits; the matmul input is then f16 too), F32 / BF16 sources
  // bf16 (their range may exceed f16's).
  WeightForm f;
  f.quant = keep_quantized_ ? quant_kind_of(host.dtype) : std::nullopt;
  f.as_bf16 = host.dtype == DType::BF16 || host.dtype == DType::F32;
  f.dev_type = f.quant ? host.dtype : f.as_bf16 ? DType::BF16 : DType::F16;
  f.row_b = f.quant ? static_cast<size_t>(quant_device_row_bytes(*f.quant, host.cols))
                    : static_cast<size_t>(host.cols) * 2;  // one device row
  return f;
}

std::string CudaBackend::weight_what(const Tensor& host, std::string_view name, const WeightForm& f) {
  return fmt::format("weight {} ({} x {} {}, from {})", name, host.rows, host.cols,
                     f.quant ? std::string(dtype_name(host.dtype)) + " (kept quantized)" : f.as_bf16 ? "bf16" : "f16",
                     dtype_name(host.dtype));
}

Status CudaBackend::upload_weight(const Tensor& host, std::string_view name, const WeightForm& form, void* dev) {
  const int64_t rows = host.rows, cols = host.cols;
  const size_t row_b = form.row_b;
  const int64_t src_row = host.row_bytes();
  const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(kLoadChunkBytes / row_b));
  HS_RETURN_IF_ERROR(ensure_load_staging(static_cast<size_t>(std::min(chunk_rows, rows)) * row_b));
  if (!load_pool_) load_pool_ = std::make_unique<ThreadPool>(0);
  const int n_threads = load_pool_->n_threads();
  std::vector<float> rowbuf(static_cast<size_t>(n_threads) * static_cast<size_t>(cols));  // [threads][cols] f32
  std::vector<Status> errors(static_cast<size_t>(n_threads));                            // [threads]

  for (int64_t r0 = 0, chunk = 0; r0 < rows; r0 += chunk_rows, ++chunk) {
    const int b = static_cast<int>(chunk & 1);
    const int64_t r1 = std::min(rows, r0 + chunk_rows);
    HS_CUDA(cudaEventSynchronize(load_copied_[b]));  // this half's previous upload has finished
    uint8_t* stage = static_cast<uint8_t*>(load_staging_[b]);  // [r1 - r0][row_b bytes]
    load_pool_->parallel_for(r1 - r0, 0, [&](int64_t begin, int64_t end, int t) {
      float* f = rowbuf.data() + static_cast<size_t>(t) * static_cast<size_t>(cols);
      for (int64_t r = begin; r < end; ++r) {
        const uint8_t* src = static_cast<const uint8_t*>(host.data) + (r0 + r) * host.row_stride;
        if (form.quant) {
          quant_repack_row(*form.quant, src, cols, stage + static_cast<size_t>(r) * row_b);
          continue;
        }
        Status st = dequantize_row(host.dtype, src, static_cast<size_t>(src_row), f, cols);
        if (!st.is_ok()) {
          if (errors[static_cast<size_t>(t)].is_ok()) errors[static_cast<size_t>(t)] = std::move(st);
          continue;
        }
        uint16_t* dst = reinterpret_cast<uint16_t*>(stage + static_cast<size_t>(r) * row_b);
        if (form.as_bf16)
          for (int64_t c = 0; c < cols; ++c) dst[c] = fp32_to_bf16(f[c]);
        else  // saturating: a block value past +-65504 (never seen in real files) stays finite
          for (int64_t c = 0; c < cols; ++c) dst[c] = fp32_to_fp16(std::clamp(f[c], -65504.0f, 65504.0f));
      }
    });
    for (const Status& st : errors)
      if (!st.is_ok()) return make_error(st.code(), "cuda: weight {}: {}", name, st.message());
    HS_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(dev) + static_cast<size_t>(r0) * row_b, stage,
                            static_cast<size_t>(r1 - r0) * row_b, cudaMemcpyHostToDevice, stream_));
    HS_CUDA(cudaEventRecord(load_copied_[b], stream_));
  }
  HS_CUDA(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Tensor CudaBackend::register_weight(const Tensor& host, const WeightForm& form, void* dev) {
  const DType gemm_in = form.quant ? DType::F16 : form.dev_type;  // quantized: dequantized to f16 for cuBLAS
  if (!gemm_in_) gemm_in_ = gemm_in;
  else if (*gemm_in_ != gemm_in) gemm_in_mixed_ = true;
  if (form.quant) {
    if (!quant_in_) quant_in_ = form.dev_type;
    else if (*quant_in_ != form.dev_type) quant_in_mixed_ = true;
  }
  Tensor t = Tensor::matrix(dev, form.dev_type, host.rows, host.cols, Device::kCuda);
  t.row_stride = static_cast<int64_t>(form.row_b);
  weight_cache_[host.data] = CachedWeight{t, host.dtype, host.rows, host.cols};
  return t;
}

// Frees a fresh weight allocation unless released (an upload failed half way).
struct CudaBackend::FreeOnError {
  CudaBackend* b;
  void* p;
  ~FreeOnError() {
    if (!p) return;
    (void)cudaStreamSynchronize(b->stream_);  // copies into p may be in flight
    (void)cudaFree(p);
  }
};

Result<Tensor> CudaBackend::prepare_weight(const Tensor& host, std::string_view name) {
  if (auto it = weight_cache_.find(host.data); it != weight_cache_.end() && it->second.src == host.dtype &&
                                                it->second.rows == host.rows && it->second.cols == host.cols)
    return it->second.dev;  // tied embeddings: the same host tensor uploaded once
  HS_ASSIGN_OR_RETURN(const WeightForm form, weight_form(host, name));
  HS_CUDA(cudaSetDevice(device_));
  const size_t total = static_cast<size_t>(host.rows) * form.row_b;
  void* dev = nullptr;  // [rows][row_b bytes]: repacked quants, or f16 / bf16 elements
  HS_RETURN_IF_ERROR(device_malloc(&dev, total, weight_what(host, name, form)));
  FreeOnError guard{this, dev};
  HS_RETURN_IF_ERROR(upload_weight(host, name, form, dev));
  guard.p = nullptr;
  owned_.push_back(dev);
  weight_bytes_ += total;
  return register_weight(host, form, dev);
}

Result<std::vector<Tensor>> CudaBackend::prepare_weight_group(std::span<const Tensor> hosts,
                                                              std::span<const std::string> names) {
  std::vector<WeightForm> forms;
  bool together = hosts.size() >= 2 && names.size() == hosts.size();
  for (size_t i = 0; together && i < hosts.size(); ++i) {
    HS_ASSIGN_OR_RETURN(WeightForm f, weight_form(hosts[i], names[i]));
    together = weight_cache_.find(hosts[i].data) == weight_cache_.end() && hosts[i].cols == hosts[0].cols &&
               (forms.empty() || (f.dev_type == forms[0].dev_type && f.row_b == forms[0].row_b));
    forms.push_back(f);
  }
  if (!together) return Backend::prepare_weight_group(hosts, names);
  HS_CUDA(cudaSetDevice(device_));
  size_t total = 0;
  for (const Tensor& h : hosts) total += static_cast<size_t>(h.rows) * forms[0].row_b;
  void* dev = nullptr;  // the weights' rows back to back: [sum of rows][row_b bytes]
  HS_RETURN_IF_ERROR(device_malloc(&dev, total, weight_what(hosts[0], names[0], forms[0]) + fmt::format(
                                                    " and {} more weights of its shape, in one allocation",
                                                    hosts.size() - 1)));
  FreeOnError guard{this, dev};
  std::vector<Tensor> out;
  uint8_t* p = static_cast<uint8_t*>(dev);
  for (size_t i = 0; i < hosts.size(); ++i) {
    HS_RETURN_IF_ERROR(upload_weight(hosts[i], names[i], forms[i], p));
    p += static_cast<size_t>(hosts[i].rows) * forms[i].row_b;
  }
  guard.p = nullptr;
  owned_.push_back(dev);
  weight_bytes_ += total;
  p = static_cast<uint8_t*>(dev);
  for (size_t i = 0; i < hosts.size(); ++i) {
    out.push_back(register_weight(hosts[i], forms[i], p));
    p += static_cast<size_t>(hosts[i].rows) * forms[i].row_b;
  }
  return out;
}

Result<Tensor> CudaBackend::prepare_vector(std::span<const float> host, std::string_view name) {
  if (host.empty()) return Tensor{nullptr, DType::F32, 0, 0, 0, Device::kCuda};
  HS_CUDA(cudaSetDevice(device_));
  const size_t bytes = host.size() * sizeof(float);
  void* dev = nullptr;  // [n] f32
  HS_RETURN_IF_ERROR(device_malloc(&dev, bytes, fmt::format("vector {} ({} f32)", name, host.size())));
  cudaError_t e = cudaMemcpyAsync(dev, host.data(), bytes, cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    (void)cudaFree(dev);
    return cuda_failure(e, "uploading a vector", __FILE__, __LINE__);
  }
  owned_.push_back(dev);
  weight_bytes_ += bytes;
  return Tensor::matrix(dev, DType::F32, 1, static_cast<int64_t>(host.size()), Device::kCuda);
}

Status CudaBackend::to_host(const Tensor& src, void* dst) {
  HS_RETURN_IF_ERROR(check_on_device(src, "to_host", "the source"));
  if (src.rows == 0 || src.cols == 0) return Status::ok();
  const int64_t row_b = src.row_bytes();
  if (row_b <= 0 || dst == nullptr)
    return make_error(StatusCode::kInvalidArgument, "cuda to_host: bad source {} or null destination", shape(src));
  HS_CUDA(cudaSetDevice(device_));
  OpProfile::Scope prof(&profile_, "to_host", stream_);
  HS_CUDA(cudaMemcpy2DAsync(dst, static_cast<size_t>(row_b), src.data, static_cast<size_t>(src.row_stride),
                            static_cast<size_t>(row_b), static_cast<size_t>(src.rows), cudaMemcpyDeviceToHost, stream_));
  HS_CUDA(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaBackend::from_host(const void* src, Tensor dst) {
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_on_device(dst, "from_host", "the destination"));
  if (dst.rows == 0 || dst.cols == 0) return Status::ok();
  const int64_t row_b = dst.row_bytes();
  if (row_b <= 0 || src == nullptr)
    return make_error(StatusCode::kInvalidArgument, "cuda from_host: bad destination {} or null source", shape(dst));
  HS_CUDA(cudaSetDevice(device_));
  HS_CUDA(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.row_stride), src, static_cast<size_t>(row_b),
                            static_cast<size_t>(row_b), static_cast<size_t>(dst.rows), cudaMemcpyHostToDevice, stream_));
  HS_CUDA(cudaStreamSynchronize(stream_));
  return Status::ok();
}

// ---- step -----------------------------------------------------------------------------------

Status CudaBackend::bind_kv(const KvCache& kv) {
  const KvGeometry& g = kv.geometry();
  const int32_t n_blocks = kv.pool().n_blocks();
  if (&kv == kv_bound_ && same_geometry(g, kv_geom_) && n_blocks == kv_blocks_) return Status::ok();
  // Every kv/kv_quant.h store dtype: plain f32 / f16 / bf16, scaled fp8 / int8 / int4.
  const bool scaled = g.dtype == KvDtype::kFp8 || g.dtype == KvDtype::kInt8 || g.dtype == KvDtype::kInt4;
  if (g.n_layer <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0 || g.page_tokens <= 0 || n_blocks <= 0)
    return make_error(StatusCode::kInvalidArgument,
                      "cuda: bad KV geometry ({} layers, {} kv heads, head_dim {}, {} tokens per page, {} pages)",
                      g.n_layer, g.n_kv_heads, g.head_dim, g.page_tokens, n_blocks);
  // Plain dtypes: [n_kv_heads][P][K|V][head_dim] elements. Scaled: the host's page
  // (KvGeometry::page_bytes(): n_kv_heads pieces of P tokens, rows then scales, each padded
  // to 16 bytes), counted in 1-byte elements.
  const int64_t elem = scaled ? 1 : g.dtype == KvDtype::kF32 ? 4 : 2;
  const int64_t page_elems =
      scaled ? g.page_bytes() : static_cast<int64_t>(g.n_kv_heads) * g.page_tokens * 2 * g.head_dim;
  const int64_t layer_bytes = static_cast<int64_t>(n_blocks) * page_elems * elem;
  const size_t total = static_cast<size_t>(g.n_layer) * static_cast<size_t>(layer_bytes);
  if (kv_base_) {
    HS_CUDA(cudaStreamSynchronize(stream_));
    HS_CUDA(kv_base_host_ ? cudaFreeHost(kv_base_) : cudaFree(kv_base_));
    kv_base_ = nullptr;
    ++alloc_generation_;
  }
  kv_bound_ = nullptr;
  free_hot_set();  // its slots hold pieces of the old pages (bind_sparse_pages makes a new one)
  const std::string what = fmt::format("the KV cache ({} layers x {} pages x {} B, {})", g.n_layer, n_blocks,
                                       page_elems * elem, kv_dtype_name(g.dtype));
  kv_base_host_ = kv_tier_.host;
  if (kv_tier_.host) {
    // Host tier: mapped pinned host memory, addressed by the kernels through its device alias
    // (the same pointer under unified addressing, checked), on the NUMA node nearest this GPU where
    // the machine has several (a tensor-parallel rank's reads then stay off the socket link).
    int numa = -1;
    if (cudaDeviceGetAttribute(&numa, cudaDevAttrHostNumaId, device_) != cudaSuccess) {
      (void)cudaGetLastError();
      numa = -1;
    }
    const ScopedNumaPreference place(numa_nodes() > 1 ? numa : -1);
    if (place.active()) spdlog::info("cuda host tier: GPU {}'s KV pages pinned on NUMA node {}", device_, numa);
    void* host = nullptr;
    if (cudaHostAlloc(&host, total, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      return make_error(StatusCode::kIoError, "cuda host tier: cannot pin {:.1f} GiB of host memory for {}",
                        total / 1073741824.0, what);
    }
    void* dev = nullptr;
    if (cudaHostGetDevicePointer(&dev, host, 0) != cudaSuccess || dev != host) {
      (void)cudaGetLastError();
      (void)cudaFreeHost(host);
      return make_error(StatusCode::kUnsupported, "cuda host tier: the pinned KV pages have no unified device address");
    }
    kv_base_ = host;
    ++alloc_generation_;
  } else {
    HS_RETURN_IF_ERROR(device_malloc(&kv_base_, total, what));
  }
  HS_CUDA(cudaMemsetAsync(kv_base_, 0, total, stream_));
  kv_bound_ = &kv;
  kv_geom_ = g;
  kv_blocks_ = n_blocks;
  kv_page_elems_ = page_elems;
  kv_layer_bytes_ = layer_bytes;
  return Status::ok();
}

Status CudaBackend::read_kv_pages(int layer, void* host) {
  if (kv_base_ == nullptr || layer < 0 || layer >= kv_geom_.n_layer || host == nullptr)
    return make_error(StatusCode::kInvalidArgument, "cuda read_kv_pages: layer {} of {} bound layers", layer,
                      kv_base_ ? kv_geom_.n_layer : 0);
  HS_CUDA(cudaSetDevice(device_));
  HS_CUDA(cudaMemcpyAsync(host, static_cast<const uint8_t*>(kv_base_) + layer * kv_layer_bytes_,
                          static_cast<size_t>(kv_layer_bytes_), cudaMemcpyDefault, stream_));
  HS_CUDA(cudaStreamSynchronize(stream_));
  return Status::ok();
}

void CudaBackend::fill_seq_tables(const ForwardPlan& plan, int32_t* rows, int32_t* slot, int32_t* fresh,
                                  int32_t* indptr) {
  const int64_t n = plan.n_tokens();
  const size_t n_seqs = plan.seqs.size();
  const bool indexed = n_seqs > 0 && static_cast<int64_t>(plan.seq_index.size()) == n;
  const bool slotted = plan.state_slots.size() == n_seqs;
  int32_t n_active = 0;
  indptr[0] = 0;
  if (indexed) {
    // Counting sort of the rows by sequence (stable: batch order within a sequence).
    std::vector<int32_t>& count = seq_count_;
    count.assign(n_seqs + 1, 0);
    for (int64_t i = 0; i < n; ++i) ++count[plan.seq_index[i] + 1];
    std::vector<int32_t>& first = seq_first_;
    first.assign(n_seqs, -1);
    for (size_t s = 0; s < n_seqs; ++s) {
      if (count[s + 1] == 0) continue;
      slot[n_active] = slotted ? plan.state_slots[s] : 0;
      indptr[n_active + 1] = indptr[n_active] + count[s + 1];
      first[s] = indptr[n_active];
      ++n_active;
    }
    std::vector<int32_t> fill(first);
    for (int64_t i = 0; i < n; ++i) rows[fill[plan.seq_index[i]]++] = static_cast<int32_t>(i);
    for (int32_t j = 0; j < n_active; ++j) fresh[j] = plan.positions[rows[indptr[j]]] == 0 ? 1 : 0;
  }
  for (int64_t j = n_active + 1; j <= n; ++j) indptr[j] = indptr[n_active];  // padding: empty sequences
}

Status CudaBackend::begin_step(const ForwardPlan& plan) {
  clear_input_tag();
  HS_CUDA(cudaSetDevice(device_));
  in_step_ = false;
  kv_ready_ = false;
  plan_ = nullptr;
  const int64_t n = plan.n_tokens();
  if (n > INT32_MAX) return make_error(StatusCode::kInvalidArgument, "cuda begin_step: {} tokens is too many", n);
  if (static_cast<int64_t>(plan.positions.size()) != n)
    return make_error(StatusCode::kInvalidArgument, "cuda begin_step: {} positions for {} tokens", plan.positions.size(), n);
  const bool has_seqs = !plan.seqs.empty();
  if ((has_seqs || !plan.seq_index.empty()) && static_cast<int64_t>(plan.seq_index.size()) != n)
    return make_error(StatusCode::kInvalidArgument, "cuda begin_step: {} sequence indices for {} tokens",
                      plan.seq_index.size(), n);
  int32_t max_pos1 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t pos = plan.positions[i];
    if (pos < 0 || pos == INT32_MAX)
      return make_error(StatusCode::kInvalidArgument, "cuda begin_step: token {} has position {}", i, pos);
    max_pos1 = std::max(max_pos1, pos + 1);
  }
  for (size_t j = 0; j < plan.logit_rows.size(); ++j)
    if (plan.logit_rows[j] < 0 || plan.logit_rows[j] >= n)
      return make_error(StatusCode::kInvalidArgument, "cuda begin_step: logit row {} is {}, the step has {} tokens", j,
                        plan.logit_rows[j], n);

  // The hybrid ops check the slots against their state tensors, but a replayed graph runs no op:
  // every plan is held to the fewest slots a state tensor had.
  for (size_t s = 0; s < plan.state_slots.size(); ++s)
    if (plan.state_slots[s] < 0 || plan.state_slots[s] >= state_rows_seen_)
      return make_error(StatusCode::kInvalidArgument, "cuda begin_step: sequence {} has state slot {} of {}", s,
                        plan.state_slots[s], state_rows_seen_);
  if (plan.kv) HS_RETURN_IF_ERROR(bind_kv(*plan.kv));
  if (plan.kv && sparse_) HS_RETURN_IF_ERROR(bind_sparse_pages());
  bool kv_ready = false;
  if (plan.kv && has_seqs) {
    // The kernels index pages through these tables without bounds checks: check them here.
    const size_t n_seqs = plan.seqs.size();
    const auto& indptr = plan.page_indptr;
    if (indptr.size() != n_seqs + 1 || indptr[0] != 0 ||
        indptr.back() != static_cast<int32_t>(plan.page_indices.size()))
      return make_error(StatusCode::kInvalidArgument,
                        "cuda begin_step: page_indptr has {} entries for {} sequences and {} page indices",
                        indptr.size(), n_seqs, plan.page_indices.size());
    for (size_t s = 0; s < n_seqs; ++s)
      if (indptr[s + 1] < indptr[s])
        return make_error(StatusCode::kInvalidArgument, "cuda begin_step: page_indptr decreases at sequence {}", s);
    for (size_t j = 0; j < plan.page_indices.size(); ++j)
      if (plan.page_indices[j] < 0 || plan.page_indices[j] >= kv_blocks_)
        return make_error(StatusCode::kInvalidArgument, "cuda begin_step: page index {} is {}, the cache has {} pages", j,
                          plan.page_indices[j], kv_blocks_);
    const int P = kv_geom_.page_tokens;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = plan.seq_index[i];
      if (s < 0 || static_cast<size_t>(s) >= n_seqs)
        return make_error(StatusCode::kInvalidArgument, "cuda begin_step: token {} names sequence {} of {}", i, s, n_seqs);
      const int32_t pages = indptr[s + 1] - indptr[s];
      if (plan.positions[i] / P >= pages)
        return make_error(StatusCode::kInvalidArgument,
                          "cuda begin_step: token {} at position {} of sequence {} needs page {}, its table has {}", i,
                          plan.positions[i], s, plan.positions[i] / P, pages);
    }
    kv_ready = true;
  }

  // Attention ranges: each sequence's run of >= kFlashMinRun consecutive tokens (a prompt or
  // prompt chunk) is one flash-prefill launch, the tokens between such runs (decode tokens,
  // short prompts) one exact-kernel launch per gap. A flash launch never spans two sequences
  // (tests/ops and the golden batched = alone check; flash_prefill.h's own multi-sequence tiles
  // are not used). Steps with a flash range run eagerly (run_step: their launch structure is
  // not part of the graph key).
  attn_ranges_.clear();
  has_flash_range_ = false;
  const bool indexed = static_cast<int64_t>(plan.seq_index.size()) == n;  // steps without a KV cache may have none
  for (int64_t i = 0; indexed && i < n;) {
    int64_t j = i + 1;
    while (j < n && plan.seq_index[j] == plan.seq_index[i]) ++j;
    const bool flash = j - i >= kFlashMinRun;
    if (flash || attn_ranges_.empty() || attn_ranges_.back().flash) {
      AttnRange r{i, j, flash};
      if (flash && kv_ready) {
        const int32_t sq = plan.seq_index[i];
        r.page_begin = plan.page_indptr[sq];
        r.n_pages = plan.page_indptr[sq + 1] - plan.page_indptr[sq];
      }
      attn_ranges_.push_back(r);
    } else {
      attn_ranges_.back().end = j;
    }
    has_flash_range_ = has_flash_range_ || flash;
    i = j;
  }
  // Prompt runs whose pages cannot feed the flash kernel directly (host tier, scaled pages) are
  // staged per layer (attention()); their page table then numbers each sequence's pages 0..n-1.
  stage_tables_ = has_flash_range_ && kv_ready && flash_on_ && stage_max_bytes_ > 0 &&
                  (kv_tier_.host || kv_elem_scaled(layer_kv_view(0).elem));

  // One int32 buffer at fixed offsets (capacities grow by doubling, so a graph's pointers
  // stay valid from step to step): [tokens][positions][seq_index][logit rows][sparse flags] of cap_tokens_
  // each, [page_indptr] of cap_indptr_, [page_indices] of cap_pages_ (last: only the used
  // prefix is copied).
  const size_t n_indptr = plan.page_indptr.size(), n_indices = plan.page_indices.size(),
               n_logits = plan.logit_rows.size();
  auto pow2 = [](size_t x) {
    size_t c = 64;
    while (c < x) c *= 2;
    return c;
  };
  cap_tokens_ = std::max(cap_tokens_, pow2(std::max<size_t>(static_cast<size_t>(n), n_logits)));
  cap_indptr_ = std::max(cap_indptr_, pow2(n_indptr));
  cap_pages_ = std::max(cap_pages_, pow2(n_indices));
  // Then the hybrid ops' active-sequence tables (hybrid_kernels.h): [rows][slot][fresh] of
  // cap_tokens_ each and [indptr] of 2 * cap_tokens_ (n + 1 entries).
  constexpr size_t kTokenRegions = 10;
  // Then [stage indices] of cap_pages_ (prefill staging: each sequence's pages as 0..n-1), copied
  // only on steps that stage.
  const size_t total_ints = kTokenRegions * cap_tokens_ + cap_indptr_ + 2 * cap_pages_;
  const size_t bytes = (kTokenRegions * cap_tokens_ + cap_indptr_ + (stage_tables_ ? cap_pages_ : 0) + n_indices) *
                       sizeof(int32_t);  // what is copied
  // Which tokens select this step (GPU sparse attention; all zero without it).
  std::vector<int32_t>& sparse_flags = sparse_flags_;
  plan_sparse_step(plan, sparse_flags);
  {
    HS_CUDA(cudaEventSynchronize(tables_copied_));  // the last copy out of the staging is done
    if (tables_host_bytes_ < total_ints * sizeof(int32_t)) {
      HS_CUDA(cudaFreeHost(tables_host_));
      tables_host_ = nullptr;
      tables_host_bytes_ = 0;
      const size_t want = std::max(total_ints * sizeof(int32_t), size_t{64} << 10);
      const cudaError_t e = cudaMallocHost(&tables_host_, want);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        tables_host_ = nullptr;
        return make_error(StatusCode::kIoError, "cuda: cannot allocate {} bytes of pinned host memory for step tables: {}",
                          want, cudaGetErrorString(e));
      }
      tables_host_bytes_ = want;
    }
    HS_RETURN_IF_ERROR(grow(tables_dev_, total_ints * sizeof(int32_t), "the step tables"));
    int32_t* h = static_cast<int32_t*>(tables_host_);
    auto put = [&](size_t region, const int32_t* src, size_t count) {
      if (count) std::memcpy(h + region, src, count * sizeof(int32_t));
    };
    put(0, plan.tokens.data(), static_cast<size_t>(n));
    put(cap_tokens_, plan.positions.data(), static_cast<size_t>(n));
    if (static_cast<int64_t>(plan.seq_index.size()) == n)
      put(2 * cap_tokens_, plan.seq_index.data(), static_cast<size_t>(n));
    else
      std::memset(h + 2 * cap_tokens_, 0, static_cast<size_t>(n) * sizeof(int32_t));
    put(3 * cap_tokens_, plan.logit_rows.data(), n_logits);
    put(4 * cap_tokens_, sparse_flags.data(), static_cast<size_t>(n));
    fill_seq_tables(plan, h + 5 * cap_tokens_, h + 6 * cap_tokens_, h + 7 * cap_tokens_, h + 8 * cap_tokens_);
    put(kTokenRegions * cap_tokens_, plan.page_indptr.data(), n_indptr);
    put(kTokenRegions * cap_tokens_ + cap_indptr_, plan.page_indices.data(), n_indices);
    if (stage_tables_) {
      int32_t* st = h + kTokenRegions * cap_tokens_ + cap_indptr_ + cap_pages_;
      for (size_t sq = 0; sq + 1 < n_indptr; ++sq)
        for (int32_t j = plan.page_indptr[sq]; j < plan.page_indptr[sq + 1]; ++j) st[j] = j - plan.page_indptr[sq];
    }
    HS_CUDA(cudaMemcpyAsync(tables_dev_.ptr, tables_host_, bytes, cudaMemcpyHostToDevice, stream_));
    HS_CUDA(cudaEventRecord(tables_copied_, stream_));
  }
  const int32_t* d = static_cast<const int32_t*>(tables_dev_.ptr);
  d_tokens_ = d;
  d_positions_ = d + cap_tokens_;
  d_seq_index_ = d + 2 * cap_tokens_;
  d_logit_rows_ = d + 3 * cap_tokens_;
  d_sparse_tok_ = d + 4 * cap_tokens_;
  d_act_rows_ = d + 5 * cap_tokens_;
  d_act_slot_ = d + 6 * cap_tokens_;
  d_act_fresh_ = d + 7 * cap_tokens_;
  d_act_indptr_ = d + 8 * cap_tokens_;
  d_page_indptr_ = d + kTokenRegions * cap_tokens_;
  d_page_indices_ = d_page_indptr_ + cap_indptr_;
  d_stage_indices_ = d_page_indices_ + cap_pages_;

  // Loading is over once steps run: give back the upload staging and threads.
  if (load_pool_ || load_staging_bytes_) {
    for (int b = 0; b < 2; ++b) {
      HS_CUDA(cudaEventSynchronize(load_copied_[b]));
      HS_CUDA(cudaFreeHost(load_staging_[b]));
      load_staging_[b] = nullptr;
    }
    load_staging_bytes_ = 0;
    load_pool_.reset();
  }

  plan_ = &plan;
  // The attention split is planned from this bucket, not the exact length, so a graph
  // captured at one length serves every length of its bucket (kernels read the positions).
  max_pos1_ = range_bucket(max_pos1);
  kv_ready_ = kv_ready;
  in_step_ = true;
  hot_kv_layer_ = -1;
  return Status::ok();
}

int32_t CudaBackend::range_bucket(int32_t max_pos1) {
  if (max_pos1 <= 256) return 256;
  if (max_pos1 <= 8192) {
    int32_t c = 64;
    while (c < max_pos1) c *= 2;
    return c;
  }
  return (max_pos1 + 8191) / 8192 * 8192;
}

Status CudaBackend::run_step(const std::function<Status()>& body) {
  HS_RETURN_IF_ERROR(need_step("run_step"));
  const int64_t n = plan_->n_tokens();
  if (!graphs_on_ || profile_.on() || (flash_on_ && has_flash_range_) || n == 0 || n > kMaxGraphTokens) return body();
  // Which tokens select is read from the step tables on the device: the launches depend only on
  // whether any does (and then on the other tokens' range bucket).
  const GraphKey key{n, static_cast<int64_t>(plan_->logit_rows.size()), max_pos1_, n_sparse_tokens_ > 0 ? 1 : 0,
                     n_sparse_tokens_ > 0 ? dense_max_pos1_ : 0};
  Graph& g = graphs_[key];
  if (g.failed) return body();
  if (g.exec && g.generation == alloc_generation_) {
    ++graph_replays_;
    HS_CUDA(cudaGraphLaunch(g.exec, stream_));
    return Status::ok();
  }
  if (g.exec) {  // a buffer moved since the capture
    HS_CUDA(cudaGraphExecDestroy(g.exec));
    g.exec = nullptr;
  }
  if (g.generation != alloc_generation_) {  // first sight (or buffers moved): eager, scratch grows
    HS_RETURN_IF_ERROR(body());
    g.generation = alloc_generation_;
    return Status::ok();
  }
  // Second sight with nothing reallocated: capture, then launch the captured step.
  HS_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  Status st = body();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  cudaError_t inst = cudaErrorUnknown;
  if (st.is_ok() && end == cudaSuccess && g.generation == alloc_generation_)
    inst = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) (void)cudaGraphDestroy(graph);
  if (st.is_ok() && end == cudaSuccess && g.generation != alloc_generation_) {
    (void)cudaGetLastError();  // a buffer grew inside the step: run it eagerly, capture next time
    g.generation = alloc_generation_;
    return body();
  }
  if (!st.is_ok() || end != cudaSuccess || inst != cudaSuccess) {
    (void)cudaGetLastError();
    spdlog::warn("cuda:{}: decode step of {} tokens not captured as a graph ({}); it runs eagerly", device_, n,
                 !st.is_ok() ? st.message() : cudaGetErrorString(end != cudaSuccess ? end : inst));
    g.failed = true;
    return body();
  }
  g.exec = exec;
  ++graph_captures_;
  HS_CUDA(cudaGraphLaunch(g.exec, stream_));
  return Status::ok();
}

Status CudaBackend::end_step() {
  in_step_ = false;
  kv_ready_ = false;
  if (hot_.counters_host)
    HS_CUDA(cudaMemcpyAsync(hot_.counters_host, hot_.counters, kHotCounters * sizeof(unsigned long long),
                            cudaMemcpyDeviceToHost, stream_));
  HS_CUDA(cudaStreamSynchronize(stream_));
  HS_CUDA(cudaGetLastError());
  collect_hot_counters();
  profile_.collect();
  return Status::ok();
}

Status CudaBackend::need_step(const char* op) const {
  if (in_step_ && plan_) return Status::ok();
  return make_error(StatusCode::kInvalidArgument, "cuda {}: called outside begin_step / end_step", op);
}
}  // namespace hs::cuda
