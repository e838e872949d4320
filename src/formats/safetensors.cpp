// formats/safetensors.cpp — header parsing and validation, float conversion, writer.
//
// The JSON header is parsed with nlohmann::ordered_json without exceptions (parse with
// allow_exceptions = false, then every value's type is checked before it is read), so a
// malformed file yields a Status, never a throw. Ranges are validated after all entries are
// read: sorted by begin, each must start where the previous ended (no overlap, no gap) and
// the last must end at the end of the file.
#include "formats/safetensors.h"

#include "formats/mapped_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/fp16.h"

namespace hs::safetensors {
namespace {

using Json = nlohmann::ordered_json;

struct DtypeEntry {
  Dtype dtype;
  const char* name;
  int size;
};
constexpr DtypeEntry kDtypes[] = {
    {Dtype::kF64, "F64", 8},  {Dtype::kF32, "F32", 4},   {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2}, {Dtype::kI64, "I64", 8},  {Dtype::kI32, "I32", 4},
    {Dtype::kI16, "I16", 2},  {Dtype::kI8, "I8", 1},     {Dtype::kU64, "U64", 8},
    {Dtype::kU32, "U32", 4},  {Dtype::kU16, "U16", 2},   {Dtype::kU8, "U8", 1},
    {Dtype::kBool, "BOOL", 1}, {Dtype::kF8E4M3, "F8_E4M3", 1}, {Dtype::kF8E5M2, "F8_E5M2", 1},
};

const char* json_type_name(const Json& j) { return j.type_name(); }

// product(shape) * elem_size, or an error on overflow.
Result<uint64_t> byte_size(const std::string& name, const std::vector<int64_t>& shape, int elem_size) {
  uint64_t n = static_cast<uint64_t>(elem_size);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}': shape overflows 64 bits", name);
  }
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const char* dtype_name(Dtype t) {
  for (const auto& e : kDtypes)
    if (e.dtype == t) return e.name;
  return "?";
}

int dtype_size(Dtype t) {
  for (const auto& e : kDtypes)
    if (e.dtype == t) return e.size;
  return 0;
}

Result<Dtype> parse_dtype(std::string_view name) {
  for (const auto& e : kDtypes)
    if (name == e.name) return e.dtype;
  return make_error(StatusCode::kUnsupported, "safetensors: unknown dtype '{}'", name);
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const { return shape_str(shape); }

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  HS_ASSIGN_OR_RETURN(MappedRegion region, map_file(path, "safetensors"));
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->base_ = region.base;
  f->size_ = region.size;
  f->mapped_ = region.base != nullptr;
  Status s = f->parse();
  if (!s.is_ok()) return Status(s.code(), s.message() + " (file '" + path + "')");
  return f;
}

Result<std::unique_ptr<File>> File::from_bytes(std::span<const uint8_t> bytes) {
  std::unique_ptr<File> f(new File());
  f->path_ = "<memory>";
  f->owned_.assign(bytes.begin(), bytes.end());
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  HS_RETURN_IF_ERROR(f->parse());
  return f;
}

File::~File() {
  if (mapped_) unmap_file(MappedRegion{base_, size_});
}

Status File::parse() {
  if (size_ < 8)
    return make_error(StatusCode::kCorrupt, "safetensors: truncated: {} bytes, the header length alone takes 8",
                      size_);
  uint64_t n_header = 0;
  for (int i = 7; i >= 0; --i) n_header = (n_header << 8) | base_[i];  // little-endian
  if (n_header > kMaxHeaderBytes)
    return make_error(StatusCode::kCorrupt, "safetensors: header length {} exceeds the limit of {} bytes", n_header,
                      kMaxHeaderBytes);
  if (n_header > size_ - 8)
    return make_error(StatusCode::kCorrupt,
                      "safetensors: truncated header: length field says {} bytes, only {} follow it", n_header,
                      size_ - 8);
  const char* hbegin = reinterpret_cast<const char*>(base_ + 8);
  Json header = Json::parse(hbegin, hbegin + n_header, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded())
    return make_error(StatusCode::kCorrupt, "safetensors: header ({} bytes at offset 8) is not valid JSON", n_header);
  if (!header.is_object())
    return make_error(StatusCode::kCorrupt, "safetensors: header is a JSON {}, expected an object",
                      json_type_name(header));
  const uint64_t data_start = 8 + n_header;
  const uint64_t data_size = size_ - data_start;

  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const Json& v = item.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        return make_error(StatusCode::kCorrupt, "safetensors: __metadata__ is a {}, expected an object",
                          json_type_name(v));
      for (const auto& m : v.items()) {
        if (!m.value().is_string())
          return make_error(StatusCode::kCorrupt, "safetensors: __metadata__['{}'] is a {}, expected a string",
                            m.key(), json_type_name(m.value()));
        metadata_[m.key()] = m.value().get_ref<const std::string&>();
      }
      continue;
    }
    if (!v.is_object())
      return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}' is a {}, expected an object", name,
                        json_type_name(v));
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || sh == v.end() || off == v.end())
      return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}' lacks {}", name,
                        dt == v.end() ? "dtype" : sh == v.end() ? "shape" : "data_offsets");
    if (!dt->is_string())
      return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}': dtype is a {}, expected a string", name,
                        json_type_name(*dt));
    TensorInfo t;
    t.name = name;
    auto dtype = parse_dtype(dt->get_ref<const std::string&>());
    if (!dtype.is_ok())
      return Status(dtype.status().code(), dtype.status().message() + " (tensor '" + name + "')");
    t.dtype = *dtype;
    if (!sh->is_array())
      return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}': shape is a {}, expected an array", name,
                        json_type_name(*sh));
    for (const Json& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}': shape entry {} is not a non-negative integer",
                          name, d.dump());
      t.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      return make_error(StatusCode::kCorrupt,
                        "safetensors: tensor '{}': data_offsets {} is not two non-negative integers", name, off->dump());
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (end < begin)
      return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}': data_offsets [{}, {}) end before begin", name,
                        begin, end);
    if (end > data_size)
      return make_error(StatusCode::kCorrupt,
                        "safetensors: tensor '{}': data_offsets [{}, {}) out of range (data section is {} bytes)", name,
                        begin, end, data_size);
    HS_ASSIGN_OR_RETURN(const uint64_t want, byte_size(name, t.shape, dtype_size(t.dtype)));
    if (want != end - begin)
      return make_error(StatusCode::kCorrupt,
                        "safetensors: tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}) hold {}", name,
                        dtype_name(t.dtype), t.shape_string(), want, begin, end, end - begin);
    t.begin = begin;
    t.n_bytes = end - begin;
    t.data = base_ + data_start + begin;
    tensors_.push_back(std::move(t));
  }

  // The ranges must tile the data section: sorted by begin, each starts where the last ended.
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TensorInfo &x = tensors_[a], &y = tensors_[b];
    return x.begin != y.begin ? x.begin < y.begin : x.n_bytes < y.n_bytes;
  });
  uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (size_t i : order) {
    const TensorInfo& t = tensors_[i];
    if (t.begin < cursor)
      return make_error(StatusCode::kCorrupt, "safetensors: tensor '{}' [{}, {}) overlaps tensor '{}' [{}, {})", t.name,
                        t.begin, t.begin + t.n_bytes, prev->name, prev->begin, prev->begin + prev->n_bytes);
    if (t.begin > cursor)
      return make_error(StatusCode::kCorrupt, "safetensors: gap: bytes [{}, {}) of the data section belong to no tensor",
                        cursor, t.begin);
    cursor = t.begin + t.n_bytes;
    prev = &t;
  }
  if (cursor != data_size)
    return make_error(StatusCode::kCorrupt,
                      "safetensors: {} trailing bytes after the last tensor (data section {} bytes, tensors end at {})",
                      data_size - cursor, data_size, cursor);
  return Status::ok();
}

const TensorInfo* File::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

Result<std::string> File::get_metadata(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  if (it == metadata_.end())
    return make_error(StatusCode::kNotFound, "safetensors: no __metadata__ key '{}' in '{}'", key, path_);
  return it->second;
}

Result<std::vector<float>> File::to_f32(const TensorInfo& t) {
  const int64_t n = t.n_elements();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case Dtype::kF32:
      std::memcpy(out.data(), t.data, static_cast<size_t>(n) * 4);
      break;
    case Dtype::kF16:
    case Dtype::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == Dtype::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
      }
      break;
    default:
      return make_error(StatusCode::kUnsupported, "safetensors: tensor '{}' is {}, expected F32, F16 or BF16", t.name,
                        dtype_name(t.dtype));
  }
  return out;
}

Result<std::vector<uint8_t>> serialize(std::span<const TensorWrite> tensors,
                                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const TensorWrite& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name))
      return make_error(StatusCode::kInvalidArgument, "safetensors: duplicate or reserved tensor name '{}'", t.name);
    for (int64_t d : t.shape)
      if (d < 0) return make_error(StatusCode::kInvalidArgument, "safetensors: tensor '{}': negative dimension", t.name);
    HS_ASSIGN_OR_RETURN(const uint64_t want, byte_size(t.name, t.shape, dtype_size(t.dtype)));
    if (want != t.data.size())
      return make_error(StatusCode::kInvalidArgument, "safetensors: tensor '{}': {} {} needs {} bytes, given {}",
                        t.name, dtype_name(t.dtype), shape_str(t.shape), want, t.data.size());
    Json e = Json::object();
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + want};
    header[t.name] = std::move(e);
    offset += want;
  }
  // `replace`: invalid UTF-8 in a name becomes U+FFFD instead of throwing.
  std::string text = header.dump(-1, ' ', false, Json::error_handler_t::replace);
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const TensorWrite& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

Status write(const std::string& path, std::span<const TensorWrite> tensors,
             const std::map<std::string, std::string>& metadata) {
  HS_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, serialize(tensors, metadata));
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return make_error(StatusCode::kIoError, "safetensors: cannot create '{}': {}", tmp, std::strerror(errno));
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !closed) {
    std::remove(tmp.c_str());
    return make_error(StatusCode::kIoError, "safetensors: cannot write '{}'", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return make_error(StatusCode::kIoError, "safetensors: cannot rename '{}' to '{}': {}", tmp, path, std::strerror(e));
  }
  return Status::ok();
}

}  // namespace hs::safetensors
