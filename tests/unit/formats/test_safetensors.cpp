// tests/unit/formats/test_safetensors.cpp — safetensors round trip and every malformed case.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "core/fp16.h"
#include "formats/safetensors.h"

namespace hs {
namespace {

namespace st = safetensors;

// A file from a raw header text and `data_bytes` bytes of data.
std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

Status parse_status(const std::vector<uint8_t>& bytes) {
  auto f = st::File::from_bytes(bytes);
  return f.status();
}

void expect_corrupt(const std::vector<uint8_t>& bytes, const std::string& needle) {
  const Status s = parse_status(bytes);
  ASSERT_FALSE(s.is_ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
}

TEST(Safetensors, RoundTrip) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> a(2 * 3 * 5);  // [2][3][5] F32
  for (float& x : a) x = nd(rng);
  std::vector<uint16_t> h(7), b(4);  // [7] F16, [2][2] BF16
  for (auto& x : h) x = fp32_to_fp16(nd(rng));
  for (auto& x : b) x = fp32_to_bf16(nd(rng));
  const std::vector<uint8_t> u8 = {1, 2, 3};
  auto bytes_of = [](const auto& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]));
  };
  std::vector<st::TensorWrite> ts = {
      {"a.weight", st::Dtype::kF32, {2, 3, 5}, bytes_of(a)},
      {"h", st::Dtype::kF16, {7}, bytes_of(h)},
      {"b", st::Dtype::kBF16, {2, 2}, bytes_of(b)},
      {"bytes", st::Dtype::kU8, {3}, bytes_of(u8)},
      {"empty", st::Dtype::kF32, {0, 4}, {}},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "héllo \"quoted\""}};

  const auto path = (std::filesystem::temp_directory_path() / ("hs_st_" + std::to_string(seed) + ".safetensors")).string();
  ASSERT_TRUE(st::write(path, ts, meta).is_ok());
  auto f = st::File::open(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  const st::File& file = **f;
  EXPECT_EQ(file.metadata(), meta);
  EXPECT_EQ(*file.get_metadata("format"), "pt");
  EXPECT_FALSE(file.get_metadata("absent").is_ok());
  ASSERT_EQ(file.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {  // header order is kept
    const st::TensorInfo& t = file.tensors()[i];
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.dtype, ts[i].dtype);
    EXPECT_EQ(t.shape, ts[i].shape);
    ASSERT_EQ(t.n_bytes, ts[i].data.size());
    if (t.n_bytes) {
      EXPECT_EQ(std::memcmp(t.data, ts[i].data.data(), t.n_bytes), 0) << t.name;
    }
  }
  EXPECT_EQ(file.find("a.weight")->shape_string(), "[2, 3, 5]");
  EXPECT_EQ(file.find("nope"), nullptr);
  auto af = st::File::to_f32(*file.find("a.weight"));
  ASSERT_TRUE(af.is_ok());
  EXPECT_EQ(*af, a);
  auto hf = st::File::to_f32(*file.find("h"));
  ASSERT_TRUE(hf.is_ok());
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ((*hf)[i], fp16_to_fp32(h[i]));
  auto bf = st::File::to_f32(*file.find("b"));
  ASSERT_TRUE(bf.is_ok());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ((*bf)[i], bf16_to_fp32(b[i]));
  EXPECT_EQ(st::File::to_f32(*file.find("bytes")).status().code(), StatusCode::kUnsupported);
  // The header is padded so the data section starts 8-byte aligned.
  auto bytes = st::serialize(ts, meta);
  ASSERT_TRUE(bytes.is_ok());
  uint64_t n_header = 0;
  std::memcpy(&n_header, bytes->data(), 8);
  EXPECT_EQ((8 + n_header) % 8, 0u);
}

TEST(Safetensors, WriterRejectsBadInput) {
  const std::vector<float> x(4);
  const std::span<const uint8_t> xb(reinterpret_cast<const uint8_t*>(x.data()), 16);
  std::vector<st::TensorWrite> wrong_size = {{"x", st::Dtype::kF32, {3}, xb}};
  EXPECT_FALSE(st::serialize(wrong_size, {}).is_ok());
  std::vector<st::TensorWrite> dup = {{"x", st::Dtype::kF32, {4}, xb}, {"x", st::Dtype::kF32, {4}, xb}};
  EXPECT_FALSE(st::serialize(dup, {}).is_ok());
  std::vector<st::TensorWrite> reserved = {{"__metadata__", st::Dtype::kF32, {4}, xb}};
  EXPECT_FALSE(st::serialize(reserved, {}).is_ok());
}

TEST(Safetensors, OpenMissingFile) {
  auto f = st::File::open("/nonexistent/x.safetensors");
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

TEST(Safetensors, TruncatedHeaderLength) {
  for (size_t n : {0, 1, 7}) expect_corrupt(std::vector<uint8_t>(n, 0), "header length alone takes 8");
}

TEST(Safetensors, TruncatedHeader) {
  auto bytes = raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  bytes.resize(20);  // cut inside the JSON
  expect_corrupt(bytes, "truncated header");
  auto huge = raw_file("{}", 0);
  huge[7] = 0x10;  // length 2^60
  expect_corrupt(huge, "exceeds the limit");
}

TEST(Safetensors, BadJson) {
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32",)", 0), "not valid JSON");
  expect_corrupt(raw_file("[1, 2]", 0), "expected an object");
  expect_corrupt(raw_file(R"({"x": 3})", 0), "tensor 'x' is a number");
  expect_corrupt(raw_file(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4), "lacks dtype");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","data_offsets":[0,4]}})", 4), "lacks shape");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[1]}})", 4), "lacks data_offsets");
  expect_corrupt(raw_file(R"({"x":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4), "expected a string");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative integer");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "non-negative integer");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4), "expected an array");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "two non-negative");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 4), "two non-negative");
  expect_corrupt(raw_file(R"({"__metadata__":{"a":1}})", 0), "expected a string");
  expect_corrupt(raw_file(R"({"__metadata__":[]})", 0), "expected an object");
}

TEST(Safetensors, UnknownDtype) {
  const Status s = parse_status(raw_file(R"({"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4));
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("'Q4'"), std::string::npos) << s.to_string();
}

TEST(Safetensors, OffsetsOutOfRange) {
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "out of range");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), "end before begin");
  expect_corrupt(raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})", 8),
                 "out of range");
}

TEST(Safetensors, OverlappingOffsets) {
  expect_corrupt(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          12),
                 "overlaps");
  expect_corrupt(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          4),
                 "overlaps");
}

TEST(Safetensors, GapsAndTrailingBytes) {
  expect_corrupt(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "gap");
  expect_corrupt(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12), "trailing bytes");
}

TEST(Safetensors, WrongDtypeSize) {
  expect_corrupt(raw_file(R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", 8), "needs 6 bytes");
  expect_corrupt(raw_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", 8),
                 "overflows");
}

TEST(Safetensors, TruncatedDataFromAValidFile) {
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<st::TensorWrite> ts = {
      {"x", st::Dtype::kF32, {4}, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(x.data()), 16)}};
  auto bytes = st::serialize(ts, {{"k", "v"}});
  ASSERT_TRUE(bytes.is_ok());
  ASSERT_TRUE(st::File::from_bytes(*bytes).is_ok());
  for (size_t cut = 1; cut <= bytes->size(); ++cut) {  // every truncation fails cleanly
    std::vector<uint8_t> b(bytes->begin(), bytes->end() - cut);
    EXPECT_FALSE(st::File::from_bytes(b).is_ok()) << "cut " << cut;
  }
}

}  // namespace
}  // namespace hs
