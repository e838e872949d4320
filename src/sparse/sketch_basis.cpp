// sparse/sketch_basis.cpp — SketchBasis validation and its safetensors file.
#include "sparse/sketch_basis.h"

#include <charconv>
#include <cstdlib>
#include <cmath>
#include <map>

#include "formats/safetensors.h"

namespace hs {
namespace {

std::string layer_name(int layer, const char* what) { return "sketch.layers." + std::to_string(layer) + "." + what; }

Result<int> meta_int(const safetensors::File& f, const char* key) {
  HS_ASSIGN_OR_RETURN(const std::string v, f.get_metadata(key));
  int out = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < 0)
    return make_error(StatusCode::kCorrupt, "sketch: metadata {} = '{}' is not a non-negative integer", key, v);
  return out;
}

Result<bool> meta_bool(const safetensors::File& f, const char* key) {
  HS_ASSIGN_OR_RETURN(const std::string v, f.get_metadata(key));
  if (v == "true") return true;
  if (v == "false") return false;
  return make_error(StatusCode::kCorrupt, "sketch: metadata {} = '{}' is not true/false", key, v);
}

// The tensor as floats, checking its shape.
Result<std::vector<float>> load_tensor(const safetensors::File& f, const std::string& name,
                                       const std::vector<int64_t>& shape) {
  const safetensors::TensorInfo* t = f.find(name);
  if (!t) return make_error(StatusCode::kNotFound, "sketch: tensor '{}' missing", name);
  if (t->shape != shape) {
    safetensors::TensorInfo want;
    want.shape = shape;
    return make_error(StatusCode::kCorrupt, "sketch: tensor '{}' has shape {}, expected {}", name, t->shape_string(),
                      want.shape_string());
  }
  return safetensors::File::to_f32(*t);
}

}  // namespace

SketchBasis SketchBasis::zeros(int n_layer, int n_kv_heads, int head_dim, int rank) {
  SketchBasis b;
  b.n_layer = n_layer;
  b.n_kv_heads = n_kv_heads;
  b.head_dim = head_dim;
  b.rank = rank;
  b.basis.assign(n_layer, std::vector<float>(static_cast<size_t>(n_kv_heads) * head_dim * rank, 0.0f));
  b.mean.assign(n_layer, std::vector<float>(static_cast<size_t>(n_kv_heads) * head_dim, 0.0f));
  return b;
}

SketchBasis SketchBasis::identity(int n_layer, int n_kv_heads, int head_dim, int rank) {
  SketchBasis b = zeros(n_layer, n_kv_heads, head_dim, rank);
  b.centered = false;
  for (auto& layer : b.basis)
    for (int h = 0; h < n_kv_heads; ++h)
      for (int j = 0; j < rank && j < head_dim; ++j) layer[(static_cast<size_t>(h) * head_dim + j) * rank + j] = 1.0f;
  return b;
}

SketchBasis SketchBasis::heads(int h0, int n) const {
  SketchBasis b = *this;
  b.n_kv_heads = n;
  // Per layer, rows of `per_head` floats for each head: keep heads [h0, h0 + n).
  auto cut = [&](std::vector<std::vector<float>>& layers, int64_t per_head) {
    for (auto& v : layers)
      if (!v.empty()) v = std::vector<float>(v.begin() + h0 * per_head, v.begin() + (h0 + n) * per_head);
  };
  cut(b.basis, static_cast<int64_t>(head_dim) * rank);
  cut(b.query_basis, static_cast<int64_t>(head_dim) * rank);
  cut(b.mean, head_dim);
  cut(b.energy, 1);
  return b;
}

Status SketchBasis::validate(float tol) const {
  if (n_layer <= 0 || n_kv_heads <= 0 || head_dim <= 0 || rank <= 0 || rank > head_dim)
    return make_error(StatusCode::kInvalidArgument,
                      "sketch: bad geometry n_layer={} n_kv_heads={} head_dim={} rank={} (need 0 < rank <= head_dim)",
                      n_layer, n_kv_heads, head_dim, rank);
  if (basis.size() != static_cast<size_t>(n_layer) || mean.size() != static_cast<size_t>(n_layer))
    return make_error(StatusCode::kInvalidArgument, "sketch: {} bases / {} means for {} layers", basis.size(),
                      mean.size(), n_layer);
  if (!energy.empty() && energy.size() != static_cast<size_t>(n_layer))
    return make_error(StatusCode::kInvalidArgument, "sketch: {} energy rows for {} layers", energy.size(), n_layer);
  if (query_aware && query_basis.size() != static_cast<size_t>(n_layer))
    return make_error(StatusCode::kInvalidArgument, "sketch: query-aware with {} query bases for {} layers",
                      query_basis.size(), n_layer);
  if (!query_aware && !query_basis.empty())
    return make_error(StatusCode::kInvalidArgument, "sketch: query bases given but query_aware is false");
  int present = 0;
  for (int l = 0; l < n_layer; ++l) {
    if (basis[l].empty()) {
      if (!mean[l].empty()) return make_error(StatusCode::kInvalidArgument, "sketch: layer {} has a mean, no basis", l);
      if (query_aware && !query_basis[l].empty())
        return make_error(StatusCode::kInvalidArgument, "sketch: layer {} has a query basis, no basis", l);
      continue;
    }
    ++present;
    if (basis[l].size() != static_cast<size_t>(n_kv_heads) * head_dim * rank ||
        mean[l].size() != static_cast<size_t>(n_kv_heads) * head_dim)
      return make_error(StatusCode::kInvalidArgument, "sketch: layer {} has {} basis / {} mean values", l,
                        basis[l].size(), mean[l].size());
    for (float x : basis[l])
      if (!std::isfinite(x)) return make_error(StatusCode::kCorrupt, "sketch: layer {} basis has a non-finite value", l);
    for (float x : mean[l])
      if (!std::isfinite(x)) return make_error(StatusCode::kCorrupt, "sketch: layer {} mean has a non-finite value", l);
    if (query_aware) {  // B is not orthonormal (sketch_fitter.h): only A's size and values
      if (query_basis[l].size() != basis[l].size())
        return make_error(StatusCode::kInvalidArgument, "sketch: layer {} has {} query basis values, expected {}", l,
                          query_basis[l].size(), basis[l].size());
      for (float x : query_basis[l])
        if (!std::isfinite(x))
          return make_error(StatusCode::kCorrupt, "sketch: layer {} query basis has a non-finite value", l);
      continue;
    }
    for (int h = 0; h < n_kv_heads; ++h) {
      const float* b = B(l, h);  // [head_dim][rank]
      for (int i = 0; i < rank; ++i)
        for (int j = i; j < rank; ++j) {
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(b[d * rank + i]) * b[d * rank + j];
          if (std::fabs(dot - (i == j ? 1.0 : 0.0)) > tol)
            return make_error(StatusCode::kCorrupt,
                              "sketch: layer {} head {}: basis not orthonormal (column {} · column {} = {})", l, h, i,
                              j, dot);
        }
    }
  }
  if (present == 0) return make_error(StatusCode::kInvalidArgument, "sketch: no layer has a basis");
  return Status::ok();
}

Status SketchBasis::check_geometry(int model_n_layer, int model_n_kv_heads, int model_head_dim,
                                   const std::vector<bool>& attention_layers) const {
  if (n_layer != model_n_layer || n_kv_heads != model_n_kv_heads || head_dim != model_head_dim)
    return make_error(StatusCode::kInvalidArgument,
                      "sketch: fitted for n_layer={} n_kv_heads={} head_dim={}, the model has {} / {} / {}", n_layer,
                      n_kv_heads, head_dim, model_n_layer, model_n_kv_heads, model_head_dim);
  for (int l = 0; l < n_layer; ++l) {
    const bool needs = attention_layers.empty() || (l < static_cast<int>(attention_layers.size()) && attention_layers[l]);
    if (needs && !has_layer(l))
      return make_error(StatusCode::kInvalidArgument, "sketch: no basis for attention layer {}", l);
  }
  return Status::ok();
}

Status SketchBasis::save(const std::string& path) const {
  HS_RETURN_IF_ERROR(validate());
  std::vector<safetensors::TensorWrite> ts;
  auto bytes = [](const std::vector<float>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
  };
  for (int l = 0; l < n_layer; ++l) {
    if (!has_layer(l)) continue;
    ts.push_back({layer_name(l, "basis"), safetensors::Dtype::kF32, {n_kv_heads, head_dim, rank}, bytes(basis[l])});
    ts.push_back({layer_name(l, "mean"), safetensors::Dtype::kF32, {n_kv_heads, head_dim}, bytes(mean[l])});
    if (!energy.empty() && energy[l].size() == static_cast<size_t>(n_kv_heads))
      ts.push_back({layer_name(l, "energy"), safetensors::Dtype::kF32, {n_kv_heads}, bytes(energy[l])});
    if (query_aware)
      ts.push_back(
          {layer_name(l, "query_basis"), safetensors::Dtype::kF32, {n_kv_heads, head_dim, rank}, bytes(query_basis[l])});
  }
  std::map<std::string, std::string> meta = {
      {"format", "hindsight.sketch"},
      {"version", "1"},
      {"n_layer", std::to_string(n_layer)},
      {"n_kv_heads", std::to_string(n_kv_heads)},
      {"head_dim", std::to_string(head_dim)},
      {"rank", std::to_string(rank)},
      {"post_rope", post_rope ? "true" : "false"},
      {"centered", centered ? "true" : "false"},
      {"model_name", model_name},
      {"model_sha256", model_sha256},
  };
  if (query_aware) meta["query_aware"] = "true";
  return safetensors::write(path, ts, meta);
}

Result<SketchBasis> SketchBasis::load(const std::string& path) {
  HS_ASSIGN_OR_RETURN(auto file, safetensors::File::open(path));
  const safetensors::File& f = *file;
  auto format = f.get_metadata("format");
  if (!format.is_ok() || *format != "hindsight.sketch")
    return make_error(StatusCode::kCorrupt, "sketch: '{}' is not a hindsight sketch file (metadata format = '{}')",
                      path, format.is_ok() ? *format : std::string("<missing>"));
  HS_ASSIGN_OR_RETURN(const std::string version, f.get_metadata("version"));
  if (version != "1") return make_error(StatusCode::kUnsupported, "sketch: '{}' has version {}, expected 1", path, version);
  SketchBasis b;
  HS_ASSIGN_OR_RETURN(b.n_layer, meta_int(f, "n_layer"));
  HS_ASSIGN_OR_RETURN(b.n_kv_heads, meta_int(f, "n_kv_heads"));
  HS_ASSIGN_OR_RETURN(b.head_dim, meta_int(f, "head_dim"));
  HS_ASSIGN_OR_RETURN(b.rank, meta_int(f, "rank"));
  HS_ASSIGN_OR_RETURN(b.post_rope, meta_bool(f, "post_rope"));
  HS_ASSIGN_OR_RETURN(b.centered, meta_bool(f, "centered"));
  if (f.get_metadata("query_aware").is_ok()) {
    HS_ASSIGN_OR_RETURN(b.query_aware, meta_bool(f, "query_aware"));
  }
  b.model_name = f.get_metadata("model_name").is_ok() ? *f.get_metadata("model_name") : "";
  b.model_sha256 = f.get_metadata("model_sha256").is_ok() ? *f.get_metadata("model_sha256") : "";
  if (b.n_layer <= 0 || b.n_layer > 4096 || b.n_kv_heads <= 0 || b.n_kv_heads > 1024 || b.head_dim <= 0 ||
      b.head_dim > 1024 || b.rank <= 0 || b.rank > b.head_dim)
    return make_error(StatusCode::kCorrupt, "sketch: '{}': bad geometry n_layer={} n_kv_heads={} head_dim={} rank={}",
                      path, b.n_layer, b.n_kv_heads, b.head_dim, b.rank);
  b.basis.resize(b.n_layer);
  b.mean.resize(b.n_layer);
  b.energy.resize(b.n_layer);
  if (b.query_aware) b.query_basis.resize(b.n_layer);
  for (int l = 0; l < b.n_layer; ++l) {
    if (!f.find(layer_name(l, "basis"))) continue;
    HS_ASSIGN_OR_RETURN(b.basis[l], load_tensor(f, layer_name(l, "basis"), {b.n_kv_heads, b.head_dim, b.rank}));
    HS_ASSIGN_OR_RETURN(b.mean[l], load_tensor(f, layer_name(l, "mean"), {b.n_kv_heads, b.head_dim}));
    if (f.find(layer_name(l, "energy"))) {
      HS_ASSIGN_OR_RETURN(b.energy[l], load_tensor(f, layer_name(l, "energy"), {b.n_kv_heads}));
    }
    if (b.query_aware) {
      HS_ASSIGN_OR_RETURN(b.query_basis[l],
                          load_tensor(f, layer_name(l, "query_basis"), {b.n_kv_heads, b.head_dim, b.rank}));
    }
  }
  // Tensors for layers beyond n_layer mean the metadata and the tensors disagree.
  for (const auto& t : f.tensors()) {
    if (t.name.rfind("sketch.layers.", 0) != 0)
      return make_error(StatusCode::kCorrupt, "sketch: '{}': unexpected tensor '{}'", path, t.name);
    const int l = std::atoi(t.name.c_str() + 14);
    if (l < 0 || l >= b.n_layer)
      return make_error(StatusCode::kCorrupt, "sketch: '{}': tensor '{}' beyond n_layer = {}", path, t.name, b.n_layer);
    if (!b.query_aware && t.name.ends_with(".query_basis"))
      return make_error(StatusCode::kCorrupt, "sketch: '{}': tensor '{}' but metadata query_aware is not true", path,
                        t.name);
  }
  const Status s = b.validate(2e-2f);  // loose: a basis stored as BF16 is orthonormal to ~1e-2
  if (!s.is_ok()) return Status(s.code(), s.message() + " (file '" + path + "')");
  return b;
}

}  // namespace hs
