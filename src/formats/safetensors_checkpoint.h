// formats/safetensors_checkpoint.h — the tensors of a Hugging Face checkpoint directory, one
// file or sharded: `model.safetensors`, or `model.safetensors.index.json` whose "weight_map"
// names, for every tensor, the shard file beside it that holds it (what transformers'
// save_pretrained writes above its shard size, e.g. model-00001-of-00011.safetensors).
//
// Opening checks the index as it is used: the JSON and its "weight_map" object of string
// values, shard names that stay in the directory (no '/', no "..", not empty), every shard
// opening as a safetensors file (formats/safetensors.h checks each), and every mapped tensor
// present in the shard the index names (a tensor is read from that shard only). Errors name the
// file and the tensor. Tensors in a shard that the index does not list are ignored.
// Cost: every shard's header is parsed and the shard mapped; tensor bytes load on first touch.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "formats/safetensors.h"

namespace hs::safetensors {

class Checkpoint {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json (the single file wins when
  // both exist, as in transformers' loader).
  static Result<std::unique_ptr<Checkpoint>> open_dir(const std::string& dir);

  const TensorInfo* find(std::string_view name) const;
  size_t n_tensors() const { return by_name_.size(); }
  size_t n_files() const { return files_.size(); }
  // Where the tensors come from, for messages: "DIR/model.safetensors" or "DIR (N shards)".
  const std::string& describe() const { return describe_; }

 private:
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
  std::string describe_;
};

}  // namespace hs::safetensors
