// formats/safetensors_checkpoint.cpp — one-file or sharded safetensors checkpoints
// (safetensors_checkpoint.h).
#include "formats/safetensors_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace hs::safetensors {
namespace {

using Json = nlohmann::json;

bool safe_shard_name(const std::string& f) {
  return !f.empty() && f.find('/') == std::string::npos && f.find('\\') == std::string::npos && f != "." &&
         f != ".." && f.find('\0') == std::string::npos;
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> Checkpoint::open_dir(const std::string& dir) {
  auto cp = std::unique_ptr<Checkpoint>(new Checkpoint());
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec) || !std::filesystem::exists(index, ec)) {
    HS_ASSIGN_OR_RETURN(auto f, File::open(single));
    for (const TensorInfo& t : f->tensors()) cp->by_name_.emplace(t.name, &t);
    cp->files_.push_back(std::move(f));
    cp->describe_ = single;
    return cp;
  }
  std::ifstream in(index, std::ios::binary);
  if (!in) return make_error(StatusCode::kNotFound, "safetensors index {}: cannot be read", index);
  std::stringstream ss;
  ss << in.rdbuf();
  const Json j = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return make_error(StatusCode::kCorrupt, "safetensors index {}: not a JSON object", index);
  const auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object())
    return make_error(StatusCode::kCorrupt, "safetensors index {}: no \"weight_map\" object", index);
  if (wm->empty()) return make_error(StatusCode::kCorrupt, "safetensors index {}: \"weight_map\" is empty", index);
  std::map<std::string, File*> opened;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      return make_error(StatusCode::kCorrupt, "safetensors index {}: tensor '{}' maps to a {}, not a file name", index,
                        it.key(), it.value().type_name());
    const std::string shard = it.value().get<std::string>();
    if (!safe_shard_name(shard))
      return make_error(StatusCode::kCorrupt, "safetensors index {}: tensor '{}' maps to '{}', not a file in {}", index,
                        it.key(), shard, dir);
    auto o = opened.find(shard);
    if (o == opened.end()) {
      HS_ASSIGN_OR_RETURN(auto f, File::open(dir + "/" + shard));
      o = opened.emplace(shard, f.get()).first;
      cp->files_.push_back(std::move(f));
    }
    const TensorInfo* t = o->second->find(it.key());
    if (!t)
      return make_error(StatusCode::kCorrupt, "safetensors index {}: tensor '{}' is not in {}/{}, the shard it names",
                        index, it.key(), dir, shard);
    cp->by_name_.emplace(it.key(), t);  // a JSON object's keys are unique: one shard a tensor
  }
  cp->describe_ = fmt::format("{} ({} shards)", dir, cp->files_.size());
  return cp;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

}  // namespace hs::safetensors
