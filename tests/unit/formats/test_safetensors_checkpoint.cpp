// tests/unit/formats/test_safetensors_checkpoint.cpp — one-file and sharded checkpoints
// (formats/safetensors_checkpoint.h): every tensor found where the index puts it, and each bad
// index an error naming the file and tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "formats/safetensors_checkpoint.h"

namespace hs {
namespace {

namespace st = safetensors;
namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("hs_ckpt_" + tag + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Tensors a..d, [2][3] f32 each, values 100 * tensor + element.
std::vector<std::vector<float>> values() {
  std::vector<std::vector<float>> v(4, std::vector<float>(6));
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 6; ++i) v[t][i] = static_cast<float>(100 * t + i);
  return v;
}
const char* const kNames[] = {"a", "b", "c", "d"};

void write_shard(const fs::path& p, const std::vector<int>& which, const std::vector<std::vector<float>>& v) {
  std::vector<st::TensorWrite> ws;
  for (int t : which)
    ws.push_back({kNames[t], st::Dtype::kF32, {2, 3},
                  std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v[t].data()), 24)});
  ASSERT_TRUE(st::write(p.string(), ws, {}).is_ok());
}

const std::string kIndex = R"({"metadata": {"total_size": 96}, "weight_map": {
  "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
  "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors"}})";

void expect_values(const st::Checkpoint& cp, const std::vector<std::vector<float>>& v) {
  for (int t = 0; t < 4; ++t) {
    const st::TensorInfo* ti = cp.find(kNames[t]);
    ASSERT_NE(ti, nullptr) << kNames[t];
    ASSERT_EQ(ti->n_bytes, 24u);
    std::vector<float> got(6);
    std::memcpy(got.data(), ti->data, 24);
    EXPECT_EQ(got, v[t]) << kNames[t];
  }
  EXPECT_EQ(cp.find("e"), nullptr);
}

TEST(SafetensorsCheckpoint, OneFile) {
  TempDir d("one");
  const auto v = values();
  write_shard(d.path / "model.safetensors", {0, 1, 2, 3}, v);
  auto cp = st::Checkpoint::open_dir(d.str());
  ASSERT_TRUE(cp.is_ok()) << cp.status().to_string();
  EXPECT_EQ((*cp)->n_files(), 1u);
  EXPECT_EQ((*cp)->n_tensors(), 4u);
  expect_values(**cp, v);
}

TEST(SafetensorsCheckpoint, ShardsThroughTheIndex) {
  TempDir d("shards");
  const auto v = values();
  write_shard(d.path / "model-00001-of-00002.safetensors", {0, 1}, v);
  // The second shard also holds a stray copy of "a" with other values: the index says where "a"
  // lives, so the stray one is never read.
  auto stray = v;
  stray[0].assign(6, -1.0f);
  std::vector<st::TensorWrite> ws;
  for (int t : {2, 3, 0})
    ws.push_back({kNames[t], st::Dtype::kF32, {2, 3},
                  std::span<const uint8_t>(reinterpret_cast<const uint8_t*>((t == 0 ? stray : v)[t].data()), 24)});
  ASSERT_TRUE(st::write((d.path / "model-00002-of-00002.safetensors").string(), ws, {}).is_ok());
  write_text(d.path / "model.safetensors.index.json", kIndex);
  auto cp = st::Checkpoint::open_dir(d.str());
  ASSERT_TRUE(cp.is_ok()) << cp.status().to_string();
  EXPECT_EQ((*cp)->n_files(), 2u);
  EXPECT_EQ((*cp)->n_tensors(), 4u);
  EXPECT_NE((*cp)->describe().find("2 shards"), std::string::npos) << (*cp)->describe();
  expect_values(**cp, v);
}

TEST(SafetensorsCheckpoint, BadIndexIsAClearError) {
  const auto v = values();
  struct Case {
    std::string index, needle;
  };
  const std::string s1 = "model-00001-of-00002.safetensors";
  const Case cases[] = {
      {"{not json", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {R"({"metadata": {}})", "no \"weight_map\""},
      {R"({"weight_map": []})", "no \"weight_map\""},
      {R"({"weight_map": {}})", "empty"},
      {R"({"weight_map": {"a": 7}})", "tensor 'a' maps to a number"},
      {R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})", "not a file in"},
      {R"({"weight_map": {"a": "sub/x.safetensors"}})", "not a file in"},
      {R"({"weight_map": {"a": ""}})", "not a file in"},
      {R"({"weight_map": {"a": "missing.safetensors"}})", "missing.safetensors"},
      {R"({"weight_map": {"c": ")" + s1 + R"("}})", "tensor 'c' is not in"},
  };
  for (const Case& c : cases) {
    TempDir d("bad");
    write_shard(d.path / s1, {0, 1}, v);
    write_text(d.path / "model.safetensors.index.json", c.index);
    auto cp = st::Checkpoint::open_dir(d.str());
    ASSERT_FALSE(cp.is_ok()) << c.index;
    EXPECT_NE(cp.status().message().find(c.needle), std::string::npos) << c.index << ": " << cp.status().to_string();
    EXPECT_NE(cp.status().message().find(d.str()), std::string::npos) << cp.status().to_string();
  }
  // A shard that is not a safetensors file: the shard's own error, naming it.
  TempDir d("corrupt");
  write_text(d.path / s1, "garbage");
  write_text(d.path / "model.safetensors.index.json", R"({"weight_map": {"a": ")" + s1 + R"("}})");
  auto cp = st::Checkpoint::open_dir(d.str());
  ASSERT_FALSE(cp.is_ok());
  EXPECT_NE(cp.status().message().find(s1), std::string::npos) << cp.status().to_string();
  // Neither file: the missing single file is named.
  TempDir e("empty");
  auto ce = st::Checkpoint::open_dir(e.str());
  ASSERT_FALSE(ce.is_ok());
  EXPECT_NE(ce.status().message().find("model.safetensors"), std::string::npos) << ce.status().to_string();
}

}  // namespace
}  // namespace hs
