// formats/safetensors.h — safetensors reader (mmap, bounds-checked) and writer.
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data section.
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string -> string map.
// The reader checks everything the Rust reference implementation checks: N against the file
// size, the JSON, each entry's fields and types, shape × dtype size == end - begin, every
// range inside the data section, and the ranges neither overlapping nor leaving gaps (the
// tensors tile the data section exactly). Errors name the tensor and the offending value.
// Cost: opening parses only the header; tensor bytes stay in the mapping until read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hs::safetensors {

// Dtypes of the format. F32/F16/BF16 convert to float; the others are checked for size only.
enum class Dtype : uint8_t { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8, kBool, kF8E4M3, kF8E5M2 };
const char* dtype_name(Dtype t);  // "F32", "BF16", ...
int dtype_size(Dtype t);          // bytes per element
Result<Dtype> parse_dtype(std::string_view name);

inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // as the reference implementation

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;             // data_offsets, relative to the data section
  uint64_t n_bytes = 0;           // end - begin
  const uint8_t* data = nullptr;  // into the mapping (unaligned in general: use memcpy)

  int64_t n_elements() const;
  std::string shape_string() const;  // e.g. "[2, 64, 16]"
};

class File {
 public:
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Parse an in-memory copy (tests, fuzzing). The bytes are copied.
  static Result<std::unique_ptr<File>> from_bytes(std::span<const uint8_t> bytes);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  // Tensors in header order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // NotFound when absent.
  Result<std::string> get_metadata(std::string_view key) const;

  // The tensor as float32 (F32, F16, BF16; other dtypes: Unsupported).
  static Result<std::vector<float>> to_f32(const TensorInfo& t);

 private:
  File() = default;
  Status parse();

  std::string path_;
  const uint8_t* base_ = nullptr;  // [size_] bytes: the whole file
  uint64_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `data` holds exactly product(shape) * dtype_size(dtype) bytes.
struct TensorWrite {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
};

// The whole file in memory: header (tensors in the given order, "__metadata__" first, padded
// with spaces to a multiple of 8 bytes) followed by the tensors back to back.
Result<std::vector<uint8_t>> serialize(std::span<const TensorWrite> tensors,
                                       const std::map<std::string, std::string>& metadata);
// serialize() written to `path` through a temporary file and a rename (never half-written).
Status write(const std::string& path, std::span<const TensorWrite> tensors,
             const std::map<std::string, std::string>& metadata);

}  // namespace hs::safetensors
