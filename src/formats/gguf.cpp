// formats/gguf.cpp — GGUF parsing with a bounds-checked cursor.
//
// Layout (v2/v3): magic u32, version u32, n_tensors u64, n_kv u64, then n_kv key/value
// pairs, then n_tensors tensor infos (name, n_dims u32, ne[n_dims] u64, type u32,
// offset u64), padding to `general.alignment`, then the data section. Every read goes
// through Cursor, which fails with the field name and byte offset instead of reading past
// the end. Counts are checked against the bytes left before anything is allocated.
#include "formats/gguf.h"

#include "formats/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <limits>

namespace hs::gguf {
namespace {

constexpr int kMaxArrayNesting = 4;

class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  template <typename T>
  Status read(T* out, const std::string& what) {
    if (left() < sizeof(T))
      return truncated(what, sizeof(T));
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string_view* out, const std::string& what) {
    uint64_t len = 0;
    uint64_t at = pos_;
    HS_RETURN_IF_ERROR(read(&len, what + " (string length)"));
    if (len > left())
      return make_error(StatusCode::kCorrupt,
                        "gguf: {} has string length {} at byte {}, but only {} bytes remain", what,
                        len, at, left());
    *out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }

  Status skip(uint64_t n, const std::string& what) {
    if (n > left()) return truncated(what, n);
    pos_ += n;
    return Status::ok();
  }

  const uint8_t* here() const { return base_ + pos_; }

 private:
  Status truncated(const std::string& what, uint64_t need) const {
    return make_error(StatusCode::kCorrupt,
                      "gguf: truncated file: reading {} at byte {} needs {} bytes, {} remain", what,
                      pos_, need, left());
  }
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

Status read_scalar(Cursor& c, ValueType t, Value* v, const std::string& what) {
  v->type = t;
  switch (t) {
    case ValueType::UINT8: { uint8_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->u = x; break; }
    case ValueType::INT8: { int8_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->i = x; break; }
    case ValueType::UINT16: { uint16_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->u = x; break; }
    case ValueType::INT16: { int16_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->i = x; break; }
    case ValueType::UINT32: { uint32_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->u = x; break; }
    case ValueType::INT32: { int32_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->i = x; break; }
    case ValueType::UINT64: { uint64_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->u = x; break; }
    case ValueType::INT64: { int64_t x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->i = x; break; }
    case ValueType::FLOAT32: { float x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->f = x; break; }
    case ValueType::FLOAT64: { double x; HS_RETURN_IF_ERROR(c.read(&x, what)); v->f = x; break; }
    case ValueType::BOOL: {
      uint8_t x;
      uint64_t at = c.pos();
      HS_RETURN_IF_ERROR(c.read(&x, what));
      if (x > 1)
        return make_error(StatusCode::kCorrupt, "gguf: {} at byte {} is a bool with value {}", what,
                          at, x);
      v->u = x;
      break;
    }
    case ValueType::STRING: HS_RETURN_IF_ERROR(c.read_string(&v->s, what)); break;
    case ValueType::ARRAY:
      return make_error(StatusCode::kInternal, "gguf: read_scalar called for an array");
  }
  return Status::ok();
}

Status read_value(Cursor& c, ValueType t, Value* v, const std::string& what, int depth) {
  if (t != ValueType::ARRAY) return read_scalar(c, t, v, what);
  if (depth >= kMaxArrayNesting)
    return make_error(StatusCode::kCorrupt, "gguf: {} at byte {}: arrays nested deeper than {}",
                      what, c.pos(), kMaxArrayNesting);
  v->type = ValueType::ARRAY;
  uint32_t et = 0;
  uint64_t at = c.pos();
  HS_RETURN_IF_ERROR(c.read(&et, what + " (array element type)"));
  if (!valid_value_type(et))
    return make_error(StatusCode::kCorrupt, "gguf: {} at byte {}: unknown array element type {}",
                      what, at, et);
  v->elem_type = static_cast<ValueType>(et);
  at = c.pos();
  HS_RETURN_IF_ERROR(c.read(&v->count, what + " (array length)"));
  // Every element takes at least one byte (strings: 8): reject impossible counts before
  // allocating anything.
  uint64_t min_elem = v->elem_type == ValueType::STRING ? 8
                      : v->elem_type == ValueType::ARRAY ? 12
                                                         : value_type_size(v->elem_type);
  if (v->count > c.left() / min_elem)
    return make_error(StatusCode::kCorrupt,
                      "gguf: {} at byte {}: array length {} of {} cannot fit in the {} bytes left",
                      what, at, v->count, value_type_name(v->elem_type), c.left());
  if (v->elem_type == ValueType::STRING) {
    v->strings.resize(v->count);
    for (uint64_t k = 0; k < v->count; ++k)
      HS_RETURN_IF_ERROR(c.read_string(&v->strings[k], what + "[" + std::to_string(k) + "]"));
  } else if (v->elem_type == ValueType::ARRAY) {
    v->children.resize(v->count);
    for (uint64_t k = 0; k < v->count; ++k)
      HS_RETURN_IF_ERROR(read_value(c, ValueType::ARRAY, &v->children[k],
                                    what + "[" + std::to_string(k) + "]", depth + 1));
  } else {
    v->raw = c.here();
    HS_RETURN_IF_ERROR(c.skip(v->count * min_elem, what + " (array data)"));
    if (v->elem_type == ValueType::BOOL)
      for (uint64_t k = 0; k < v->count; ++k)
        if (v->raw[k] > 1)
          return make_error(StatusCode::kCorrupt, "gguf: {}[{}] at byte {} is a bool with value {}",
                            what, k, c.pos() - v->count + k, v->raw[k]);
  }
  return Status::ok();
}

// Read element k of a numeric array as double / int64.
double numeric_at(const Value& v, uint64_t k) {
  const uint8_t* p = v.raw + k * value_type_size(v.elem_type);
  auto ld = [p](auto x) { std::memcpy(&x, p, sizeof(x)); return x; };
  switch (v.elem_type) {
    case ValueType::UINT8: return ld(uint8_t{});
    case ValueType::INT8: return ld(int8_t{});
    case ValueType::UINT16: return ld(uint16_t{});
    case ValueType::INT16: return ld(int16_t{});
    case ValueType::UINT32: return ld(uint32_t{});
    case ValueType::INT32: return ld(int32_t{});
    case ValueType::UINT64: return static_cast<double>(ld(uint64_t{}));
    case ValueType::INT64: return static_cast<double>(ld(int64_t{}));
    case ValueType::FLOAT32: return ld(float{});
    case ValueType::FLOAT64: return ld(double{});
    case ValueType::BOOL: return ld(uint8_t{});
    default: return 0;
  }
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "?";
}

uint32_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default: return false;
  }
}

std::string Value::to_display_string(size_t max_chars) const {
  auto clip = [max_chars](std::string s) {
    for (auto& ch : s) if (ch == '\n') ch = ' ';
    if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
    return s;
  };
  switch (type) {
    case ValueType::STRING: return clip(std::string(s));
    case ValueType::BOOL: return u ? "true" : "false";
    case ValueType::FLOAT32: case ValueType::FLOAT64: return fmt::format("{:g}", f);
    case ValueType::ARRAY: {
      std::string out = fmt::format("[{} x {}]", value_type_name(elem_type), count);
      if (elem_type == ValueType::STRING && count > 0 && count <= 8) {
        out += " {";
        for (uint64_t k = 0; k < count; ++k) out += (k ? ", " : "") + std::string(strings[k]);
        out += "}";
      }
      return clip(out);
    }
    default:
      if (type == ValueType::INT8 || type == ValueType::INT16 || type == ValueType::INT32 ||
          type == ValueType::INT64)
        return std::to_string(i);
      return std::to_string(u);
  }
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  HS_ASSIGN_OR_RETURN(MappedRegion region, map_file(path, "gguf"));
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

Result<std::unique_ptr<File>> File::from_buffer(std::unique_ptr<uint8_t[]> bytes, uint64_t size, std::string label) {
  std::unique_ptr<File> f(new File());
  f->path_ = std::move(label);
  f->buffer_ = std::move(bytes);
  f->base_ = f->buffer_.get();
  f->size_ = size;
  Status s = f->parse();
  if (!s.is_ok()) return Status(s.code(), s.message() + " (" + f->path_ + ")");
  return f;
}

File::~File() {
  if (mapped_) unmap_file(MappedRegion{base_, size_});
}

Status File::parse() {
  Cursor c(base_, size_);
  uint32_t magic = 0;
  HS_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (magic != kMagic)
    return make_error(StatusCode::kCorrupt, "gguf: bad magic 0x{:08x} at byte 0 (want 0x{:08x} 'GGUF')",
                      magic, kMagic);
  HS_RETURN_IF_ERROR(c.read(&version_, "version"));
  if (version_ != 2 && version_ != 3)
    return make_error(StatusCode::kUnsupported, "gguf: version {} at byte 4 (supported: 2, 3)",
                      version_);
  uint64_t n_tensors = 0, n_kv = 0;
  HS_RETURN_IF_ERROR(c.read(&n_tensors, "tensor count"));
  HS_RETURN_IF_ERROR(c.read(&n_kv, "metadata count"));
  // A key/value takes >= 13 bytes, a tensor info >= 28: reject impossible counts early.
  if (n_kv > c.left() / 13)
    return make_error(StatusCode::kCorrupt, "gguf: metadata count {} at byte 16 exceeds what {} bytes can hold",
                      n_kv, c.left());
  if (n_tensors > c.left() / 28)
    return make_error(StatusCode::kCorrupt, "gguf: tensor count {} at byte 8 exceeds what {} bytes can hold",
                      n_tensors, c.left());

  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string_view key;
    HS_RETURN_IF_ERROR(c.read_string(&key, fmt::format("metadata key #{}", k)));
    std::string what = fmt::format("metadata '{}'", key);
    uint32_t t = 0;
    uint64_t at = c.pos();
    HS_RETURN_IF_ERROR(c.read(&t, what + " (type)"));
    if (!valid_value_type(t))
      return make_error(StatusCode::kCorrupt, "gguf: {} at byte {}: unknown value type {}", what, at, t);
    Value v;
    HS_RETURN_IF_ERROR(read_value(c, static_cast<ValueType>(t), &v, what, 0));
    std::string key_s(key);
    if (!kv_index_.emplace(key_s, kv_.size()).second)
      return make_error(StatusCode::kCorrupt, "gguf: duplicate metadata key '{}' (ends at byte {})", key, c.pos());
    kv_.emplace_back(std::move(key_s), std::move(v));
  }

  if (const Value* a = find("general.alignment")) {
    if (!a->is_integer() || a->u == 0 || a->u > (1u << 20) || (a->u & (a->u - 1)) != 0)
      return make_error(StatusCode::kCorrupt,
                        "gguf: general.alignment must be a power of two integer, got {}",
                        a->to_display_string());
    alignment_ = static_cast<uint32_t>(a->u);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo ti;
    std::string_view name;
    HS_RETURN_IF_ERROR(c.read_string(&name, fmt::format("tensor #{} name", k)));
    ti.name = std::string(name);
    std::string what = fmt::format("tensor '{}'", ti.name);
    uint32_t n_dims = 0;
    uint64_t at = c.pos();
    HS_RETURN_IF_ERROR(c.read(&n_dims, what + " n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims)
      return make_error(StatusCode::kCorrupt, "gguf: {} n_dims at byte {} is {} (must be 1..{})", what, at,
                        n_dims, kMaxDims);
    ti.n_dims = static_cast<int>(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      at = c.pos();
      HS_RETURN_IF_ERROR(c.read(&ne, fmt::format("{} ne[{}]", what, d)));
      if (ne == 0 || ne > (uint64_t{1} << 40) ||
          n_elems > std::numeric_limits<int64_t>::max() / ne)
        return make_error(StatusCode::kCorrupt, "gguf: {} ne[{}] at byte {} is {} (zero or overflowing)",
                          what, d, at, ne);
      ti.ne[d] = static_cast<int64_t>(ne);
      n_elems *= ne;
    }
    if (n_elems > (uint64_t{1} << 56))
      return make_error(StatusCode::kCorrupt, "gguf: {} has {} elements (more than 2^56)", what, n_elems);
    uint32_t raw_type = 0;
    at = c.pos();
    HS_RETURN_IF_ERROR(c.read(&raw_type, what + " type"));
    auto info = dtype_info(raw_type);
    if (!info)
      return make_error(StatusCode::kUnsupported, "gguf: {} type at byte {}: unknown tensor type id {}",
                        what, at, raw_type);
    ti.type = info->type;
    if (ti.ne[0] % info->block_elems != 0)
      return make_error(StatusCode::kCorrupt, "gguf: {} ne[0]={} is not a multiple of the {} block size {}",
                        what, ti.ne[0], info->name, info->block_elems);
    ti.n_bytes = dtype_row_bytes(*info, n_elems);
    at = c.pos();
    HS_RETURN_IF_ERROR(c.read(&ti.offset, what + " offset"));
    if (ti.offset % alignment_ != 0)
      return make_error(StatusCode::kCorrupt, "gguf: {} offset {} at byte {} is not aligned to {}", what,
                        ti.offset, at, alignment_);
    if (!tensor_index_.emplace(ti.name, tensors_.size()).second)
      return make_error(StatusCode::kCorrupt, "gguf: duplicate tensor name '{}' at byte {}", ti.name, at);
    tensors_.push_back(std::move(ti));
  }

  // Data section starts at the next multiple of the alignment.
  uint64_t pad = (alignment_ - c.pos() % alignment_) % alignment_;
  data_offset_ = c.pos() + pad;
  if (!tensors_.empty() && data_offset_ > size_)
    return make_error(StatusCode::kCorrupt, "gguf: truncated file: data section would start at byte {} but the file has {} bytes",
                      data_offset_, size_);
  const uint64_t data_size = size_ > data_offset_ ? size_ - data_offset_ : 0;
  for (auto& ti : tensors_) {
    if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
      return make_error(StatusCode::kCorrupt,
                        "gguf: tensor '{}' data [{}, {}) runs past the end of the file (data section "
                        "starts at byte {}, file has {} bytes)",
                        ti.name, data_offset_ + ti.offset, data_offset_ + ti.offset + ti.n_bytes,
                        data_offset_, size_);
    ti.data = base_ + data_offset_ + ti.offset;
  }
  return Status::ok();
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
Status missing(std::string_view key) {
  return make_error(StatusCode::kNotFound, "gguf: metadata key '{}' is missing", key);
}
Status wrong_type(std::string_view key, const Value& v, const char* want) {
  std::string got = value_type_name(v.type);
  if (v.type == ValueType::ARRAY) got += fmt::format(" of {}", value_type_name(v.elem_type));
  return make_error(StatusCode::kInvalidArgument, "gguf: metadata '{}' is {}, expected {}", key, got, want);
}
}  // namespace

Result<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::STRING) return wrong_type(key, *v, "string");
  return v->s;
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (!v->is_integer()) return wrong_type(key, *v, "an integer");
  bool is_unsigned = v->type == ValueType::UINT8 || v->type == ValueType::UINT16 ||
                     v->type == ValueType::UINT32 || v->type == ValueType::UINT64;
  if (is_unsigned) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return make_error(StatusCode::kInvalidArgument, "gguf: metadata '{}' = {} is out of range", key, v->u);
    return static_cast<int64_t>(v->u);
  }
  return v->i;
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->is_float()) return v->f;
  if (v->is_integer()) {
    HS_ASSIGN_OR_RETURN(int64_t x, get_int(key));
    return static_cast<double>(x);
  }
  return wrong_type(key, *v, "a number");
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::BOOL) return wrong_type(key, *v, "bool");
  return v->u != 0;
}

Result<std::span<const std::string_view>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::ARRAY || v->elem_type != ValueType::STRING)
    return wrong_type(key, *v, "array of string");
  return std::span<const std::string_view>(v->strings);
}

Result<std::vector<float>> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::ARRAY || v->elem_type == ValueType::STRING ||
      v->elem_type == ValueType::ARRAY || v->elem_type == ValueType::BOOL)
    return wrong_type(key, *v, "array of numbers");
  std::vector<float> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) out[k] = static_cast<float>(numeric_at(*v, k));
  return out;
}

Result<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::ARRAY ||
      !(Value{.type = v->elem_type}.is_integer() || v->elem_type == ValueType::BOOL))
    return wrong_type(key, *v, "array of integers");
  std::vector<int64_t> out(v->count);
  const uint32_t es = value_type_size(v->elem_type);
  for (uint64_t k = 0; k < v->count; ++k) {
    const uint8_t* p = v->raw + k * es;
    switch (v->elem_type) {
      case ValueType::UINT64: { uint64_t x; std::memcpy(&x, p, 8); out[k] = static_cast<int64_t>(x); break; }
      case ValueType::INT64: { int64_t x; std::memcpy(&x, p, 8); out[k] = x; break; }
      default: out[k] = static_cast<int64_t>(numeric_at(*v, k));
    }
  }
  return out;
}

Result<int64_t> File::get_int_or(std::string_view key, int64_t dflt) const {
  return has(key) ? get_int(key) : Result<int64_t>(dflt);
}
Result<double> File::get_float_or(std::string_view key, double dflt) const {
  return has(key) ? get_float(key) : Result<double>(dflt);
}
Result<bool> File::get_bool_or(std::string_view key, bool dflt) const {
  return has(key) ? get_bool(key) : Result<bool>(dflt);
}

}  // namespace hs::gguf
