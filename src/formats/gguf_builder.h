// formats/gguf_builder.h — writes GGUF headers byte by byte.
//
// Tests make valid files with every value type and hand-broken ones (bad magic, lengths past
// the end, misaligned offsets) without any model on disk; model/dummy_model builds the header
// of a random-weight model with it (the data section is then filled in place, so the builder
// holds only metadata and tensor infos). Cost: one growing byte vector.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace hs::gguf {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, uint32_t alignment = 32) : alignment_(alignment) {
    u32(0x46554747);
    u32(version);
    n_tensors_at_ = bytes_.size();
    u64(0);
    n_kv_at_ = bytes_.size();
    u64(0);
  }

  // --- raw writers ---
  void u8(uint8_t v) { bytes_.push_back(v); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void str(const std::string& s) { u64(s.size()); raw(s.data(), s.size()); }
  void raw(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }

  // --- key/values (type ids as in the GGUF spec) ---
  void kv_u32(const std::string& k, uint32_t v) { key(k, 4); u32(v); }
  void kv_i32(const std::string& k, int32_t v) { key(k, 5); raw(&v, 4); }
  void kv_f32(const std::string& k, float v) { key(k, 6); f32(v); }
  void kv_bool(const std::string& k, bool v) { key(k, 7); u8(v ? 1 : 0); }
  void kv_str(const std::string& k, const std::string& v) { key(k, 8); str(v); }
  void kv_u64(const std::string& k, uint64_t v) { key(k, 10); u64(v); }
  void kv_i64(const std::string& k, int64_t v) { key(k, 11); raw(&v, 8); }
  void kv_f64(const std::string& k, double v) { key(k, 12); raw(&v, 8); }
  void kv_u8(const std::string& k, uint8_t v) { key(k, 0); u8(v); }
  void kv_i8(const std::string& k, int8_t v) { key(k, 1); raw(&v, 1); }
  void kv_u16(const std::string& k, uint16_t v) { key(k, 2); raw(&v, 2); }
  void kv_i16(const std::string& k, int16_t v) { key(k, 3); raw(&v, 2); }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9); u32(8); u64(v.size());
    for (auto& s : v) str(s);
  }
  void kv_f32_array(const std::string& k, const std::vector<float>& v) {
    key(k, 9); u32(6); u64(v.size());
    for (float x : v) f32(x);
  }
  void kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9); u32(5); u64(v.size());
    for (int32_t x : v) raw(&x, 4);
  }

  // Any parsed value (gguf::Value) re-encoded under key `k`: copies metadata between files.
  void kv_value(const std::string& k, const Value& v) {
    key(k, static_cast<uint32_t>(v.type));
    value_body(v);
  }

  // Tensor infos: call after all key/values. `offset` is relative to the data section.
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    ++n_tensors_;
    patch_u64(n_tensors_at_, n_tensors_);
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (auto d : ne) u64(d);
    u32(type);
    u64(offset);
  }
  // Pad to alignment and append the data section.
  void data(const std::vector<uint8_t>& d) {
    while (bytes_.size() % alignment_) u8(0);
    bytes_.insert(bytes_.end(), d.begin(), d.end());
  }

  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  void key(const std::string& k, uint32_t type) {
    ++n_kv_;
    patch_u64(n_kv_at_, n_kv_);
    str(k);
    u32(type);
  }
  void scalar(ValueType t, const Value& v) {
    switch (t) {
      case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: u8(static_cast<uint8_t>(t == ValueType::INT8 ? v.i : v.u)); break;
      case ValueType::UINT16: { uint16_t x = static_cast<uint16_t>(v.u); raw(&x, 2); break; }
      case ValueType::INT16: { int16_t x = static_cast<int16_t>(v.i); raw(&x, 2); break; }
      case ValueType::UINT32: u32(static_cast<uint32_t>(v.u)); break;
      case ValueType::INT32: { int32_t x = static_cast<int32_t>(v.i); raw(&x, 4); break; }
      case ValueType::UINT64: u64(v.u); break;
      case ValueType::INT64: raw(&v.i, 8); break;
      case ValueType::FLOAT32: f32(static_cast<float>(v.f)); break;
      case ValueType::FLOAT64: raw(&v.f, 8); break;
      case ValueType::STRING: str(std::string(v.s)); break;
      case ValueType::ARRAY: break;
    }
  }
  void value_body(const Value& v) {
    if (v.type != ValueType::ARRAY) return scalar(v.type, v);
    u32(static_cast<uint32_t>(v.elem_type));
    u64(v.count);
    if (v.elem_type == ValueType::STRING) {
      for (std::string_view s : v.strings) str(std::string(s));
    } else if (v.elem_type == ValueType::ARRAY) {
      for (const Value& c : v.children) value_body(c);
    } else {
      raw(v.raw, static_cast<size_t>(v.count) * value_type_size(v.elem_type));
    }
  }
  void patch_u64(size_t at, uint64_t v) { std::memcpy(bytes_.data() + at, &v, 8); }

  std::vector<uint8_t> bytes_;
  uint32_t alignment_;
  size_t n_tensors_at_ = 0, n_kv_at_ = 0;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
};

}  // namespace hs::gguf

namespace hs::test {
using gguf::GgufBuilder;
}  // namespace hs::test
