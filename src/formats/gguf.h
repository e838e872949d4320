// formats/gguf.h — GGUF v2/v3 reader over a read-only mmap.
//
// Owns the mapping; metadata values and tensor infos are parsed once at open and point
// into the mapping (strings are string_views, numeric arrays are raw pointers), so opening a
// 250 MB model touches only its header. Every length, count, offset and size is checked
// against the bytes that remain: a truncated or corrupted file gives a Status naming the
// field and the byte offset, never a crash, hang or over-read.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace hs::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);
// Size in bytes of a fixed-size scalar type; 0 for STRING and ARRAY.
uint32_t value_type_size(ValueType t);

// One metadata value. Scalars are decoded; arrays keep a pointer into the mapping
// (numeric) or a list of string_views (strings); nested arrays keep their children.
struct Value {
  ValueType type = ValueType::UINT8;
  // scalar payloads
  uint64_t u = 0;      // UINT*, BOOL
  int64_t i = 0;       // INT*
  double f = 0.0;      // FLOAT*
  std::string_view s;  // STRING
  // ARRAY
  ValueType elem_type = ValueType::UINT8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;          // numeric elements, little-endian, `count` of them
  std::vector<std::string_view> strings;  // STRING elements
  std::vector<Value> children;           // ARRAY elements (nested arrays)

  bool is_integer() const;
  bool is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }
  // Short text for display (arrays print type and length, strings are truncated).
  std::string to_display_string(size_t max_chars = 80) const;
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  int n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ggml order: ne[0] is the contiguous dimension
  uint64_t offset = 0;                   // from the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;         // into the mapping

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // e.g. "[576, 49152]"
};

class File {
 public:
  // Map and parse a GGUF file.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Parse an in-memory copy (tests, fuzzing). The bytes are copied.
  static Result<std::unique_ptr<File>> from_bytes(std::span<const uint8_t> bytes);
  // Parse a buffer the File takes over, not copied (a model built in memory:
  // model/dummy_model.h); `label` stands for the path in messages.
  static Result<std::unique_ptr<File>> from_buffer(std::unique_ptr<uint8_t[]> bytes, uint64_t size,
                                                   std::string label);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return path_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: NotFound if absent, InvalidArgument (naming the key and both types) on a
  // type mismatch. Integer getters accept any integer type that fits.
  Result<std::string_view> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;  // FLOAT32/64 or any integer
  Result<bool> get_bool(std::string_view key) const;
  Result<std::span<const std::string_view>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  // Convenience with a default when the key is absent (type errors still propagate).
  Result<int64_t> get_int_or(std::string_view key, int64_t dflt) const;
  Result<double> get_float_or(std::string_view key, double dflt) const;
  Result<bool> get_bool_or(std::string_view key, bool dflt) const;

  // Tensors, in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  Status parse();

  std::string path_;
  const uint8_t* base_ = nullptr;  // [size_] bytes: the whole file
  uint64_t size_ = 0;
  bool mapped_ = false;            // true: munmap on destruction; false: owned_ holds the bytes
  std::vector<uint8_t> owned_;
  std::unique_ptr<uint8_t[]> buffer_;  // from_buffer's bytes

  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace hs::gguf
