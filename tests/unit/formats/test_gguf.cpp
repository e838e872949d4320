// tests/unit/formats/test_gguf.cpp — GGUF reader: values, tensors, and malformed files.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "formats/gguf.h"
#include "formats/gguf_builder.h"

namespace hs {
namespace {

using test::GgufBuilder;

// A valid v3 file with every scalar type, arrays and two tensors (F32 [4,2], Q8_0 [32]).
std::vector<uint8_t> make_valid_file(uint32_t version = 3) {
  GgufBuilder b(version);
  b.kv_str("general.architecture", "llama");
  b.kv_u8("t.u8", 200);
  b.kv_i8("t.i8", -100);
  b.kv_u16("t.u16", 60000);
  b.kv_i16("t.i16", -30000);
  b.kv_u32("t.u32", 4000000000u);
  b.kv_i32("t.i32", -2000000000);
  b.kv_f32("t.f32", 1.5f);
  b.kv_bool("t.bool", true);
  b.kv_u64("t.u64", 1ull << 40);
  b.kv_i64("t.i64", -(1ll << 40));
  b.kv_f64("t.f64", 0.25);
  b.kv_str_array("t.strs", {"a", "", "héllo"});
  b.kv_f32_array("t.f32s", {1.0f, -2.0f});
  b.kv_i32_array("t.i32s", {7, -8, 9});
  b.tensor("w", {4, 2}, 0, 0);    // F32: 32 bytes at 0
  b.tensor("q", {32}, 8, 32);     // Q8_0: 34 bytes at 32
  std::vector<uint8_t> data(66);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  b.data(data);
  return b.bytes();
}

TEST(Gguf, ParsesEveryValueTypeAndTensors) {
  for (uint32_t version : {2u, 3u}) {
    auto bytes = make_valid_file(version);
    auto f = gguf::File::from_bytes(bytes);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const auto& file = **f;
    EXPECT_EQ(file.version(), version);
    EXPECT_EQ(*file.get_string("general.architecture"), "llama");
    EXPECT_EQ(*file.get_int("t.u8"), 200);
    EXPECT_EQ(*file.get_int("t.i8"), -100);
    EXPECT_EQ(*file.get_int("t.u16"), 60000);
    EXPECT_EQ(*file.get_int("t.i16"), -30000);
    EXPECT_EQ(*file.get_int("t.u32"), 4000000000ll);
    EXPECT_EQ(*file.get_int("t.i32"), -2000000000);
    EXPECT_EQ(*file.get_float("t.f32"), 1.5);
    EXPECT_EQ(*file.get_bool("t.bool"), true);
    EXPECT_EQ(*file.get_int("t.u64"), 1ll << 40);
    EXPECT_EQ(*file.get_int("t.i64"), -(1ll << 40));
    EXPECT_EQ(*file.get_float("t.f64"), 0.25);
    auto strs = file.get_string_array("t.strs");
    ASSERT_TRUE(strs.is_ok());
    ASSERT_EQ(strs->size(), 3u);
    EXPECT_EQ((*strs)[2], "héllo");
    EXPECT_EQ(*file.get_float_array("t.f32s"), (std::vector<float>{1.0f, -2.0f}));
    EXPECT_EQ(*file.get_int_array("t.i32s"), (std::vector<int64_t>{7, -8, 9}));

    ASSERT_EQ(file.tensors().size(), 2u);
    const auto* w = file.find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->type, DType::F32);
    EXPECT_EQ(w->n_dims, 2);
    EXPECT_EQ(w->ne[0], 4);
    EXPECT_EQ(w->ne[1], 2);
    EXPECT_EQ(w->n_bytes, 32u);
    EXPECT_EQ(w->data[0], 0);
    const auto* q = file.find_tensor("q");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, DType::Q8_0);
    EXPECT_EQ(q->n_bytes, 34u);
    EXPECT_EQ(q->data[0], 32);
    EXPECT_EQ(file.data_offset() % 32, 0u);
  }
}

TEST(Gguf, TypedGettersReportMissingAndWrongTypes) {
  auto bytes = make_valid_file();
  auto f = gguf::File::from_bytes(bytes);
  ASSERT_TRUE(f.is_ok());
  auto missing = (*f)->get_int("nope");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  auto wrong = (*f)->get_int("general.architecture");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("string"), std::string::npos);
  EXPECT_EQ(*(*f)->get_int_or("nope", 5), 5);
  EXPECT_FALSE((*f)->get_string_array("t.f32s").is_ok());
}

// Every strict prefix of a valid file must be rejected with an error naming a byte offset.
TEST(Gguf, EveryTruncationIsAnErrorNamingTheOffset) {
  auto bytes = make_valid_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::span<const uint8_t> prefix(bytes.data(), n);
    auto f = gguf::File::from_bytes(prefix);
    ASSERT_FALSE(f.is_ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_NE(f.status().message().find("byte"), std::string::npos) << f.status().message();
  }
}

// Random bit flips: each parse must either succeed or fail cleanly (ASan build checks
// that nothing reads out of bounds).
TEST(Gguf, BitFlipsNeverCrash) {
  auto bytes = make_valid_file();
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 3000; ++trial) {
    auto copy = bytes;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) copy[rng() % copy.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    auto f = gguf::File::from_bytes(copy);
    if (f.is_ok())
      for (const auto& t : (*f)->tensors())
        EXPECT_LE((t.data - (*f)->tensors()[0].data) + 0, static_cast<ptrdiff_t>(copy.size()));
    else
      EXPECT_FALSE(f.status().message().empty());
  }
}

struct Malformed {
  const char* what;
  std::vector<uint8_t> bytes;
  const char* expect_in_message;
};

std::vector<Malformed> malformed_cases() {
  std::vector<Malformed> out;
  {
    auto b = make_valid_file();
    b[0] = 'X';
    out.push_back({"bad magic", b, "magic"});
  }
  {
    auto b = make_valid_file();
    b[4] = 1;
    out.push_back({"version 1", b, "version 1"});
  }
  {
    GgufBuilder b;
    b.kv_str("k", "x");
    uint64_t huge = 1ull << 62;
    std::memcpy(b.bytes().data() + 24, &huge, 8);  // the key's length field follows the 24-byte header
    out.push_back({"huge key length", b.bytes(), "metadata key #0"});
  }
  {
    GgufBuilder b;
    b.kv_str("k", "x");
    // Value string length field: header(24) + key len(8) + key(1) + type(4) = 37.
    uint64_t huge = 1ull << 40;
    std::memcpy(b.bytes().data() + 37, &huge, 8);
    out.push_back({"string length past the end", b.bytes(), "string length"});
  }
  {
    GgufBuilder b;
    b.kv_str("a", "1");
    b.kv_str("a", "2");
    out.push_back({"duplicate key", b.bytes(), "duplicate metadata key 'a'"});
  }
  {
    GgufBuilder b;
    b.kv_str("k", "x");
    b.bytes()[33] = 99;  // value type field of key 'k' (24 + 8 + 1)
    out.push_back({"unknown value type", b.bytes(), "unknown value type 99"});
  }
  {
    GgufBuilder b;
    b.kv_bool("flag", true);
    b.bytes().back() = 2;
    out.push_back({"bool out of range", b.bytes(), "bool with value 2"});
  }
  {
    GgufBuilder b;
    b.kv_i32_array("arr", {1});
    uint64_t huge = 1ull << 61;
    std::memcpy(b.bytes().data() + 24 + 8 + 3 + 4 + 4, &huge, 8);  // header, key len, "arr", type, elem type
    out.push_back({"array count overflow", b.bytes(), "array length"});
  }
  {
    GgufBuilder b;
    b.kv_u32("general.alignment", 24);
    out.push_back({"alignment not a power of two", b.bytes(), "general.alignment"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {4, 1, 1, 1, 1}, 0, 0);
    b.data(std::vector<uint8_t>(16));
    out.push_back({"five dims", b.bytes(), "n_dims"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {4}, 77, 0);
    b.data(std::vector<uint8_t>(16));
    out.push_back({"unknown tensor type", b.bytes(), "unknown tensor type id 77"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {4}, 0, 8);
    b.data(std::vector<uint8_t>(64));
    out.push_back({"misaligned tensor offset", b.bytes(), "not aligned"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {64}, 0, 0);
    b.data(std::vector<uint8_t>(16));
    out.push_back({"tensor data past the end", b.bytes(), "runs past the end"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {33}, 2, 0);  // Q4_0 rows must be a multiple of 32
    b.data(std::vector<uint8_t>(64));
    out.push_back({"row not a multiple of the block", b.bytes(), "block size"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {1ull << 33, 1ull << 33}, 0, 0);
    b.data(std::vector<uint8_t>(16));
    out.push_back({"element count overflow", b.bytes(), "overflowing"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {4}, 0, 0);
    b.tensor("t", {4}, 0, 32);
    b.data(std::vector<uint8_t>(64));
    out.push_back({"duplicate tensor", b.bytes(), "duplicate tensor name 't'"});
  }
  {
    GgufBuilder b;
    b.tensor("t", {0}, 0, 0);
    b.data(std::vector<uint8_t>(16));
    out.push_back({"zero dim", b.bytes(), "ne[0]"});
  }
  return out;
}

TEST(Gguf, MalformedFilesGiveNamedErrors) {
  for (const auto& m : malformed_cases()) {
    auto f = gguf::File::from_bytes(m.bytes);
    ASSERT_FALSE(f.is_ok()) << m.what << " parsed";
    EXPECT_NE(f.status().message().find(m.expect_in_message), std::string::npos)
        << m.what << ": " << f.status().message();
  }
}

TEST(Gguf, MissingFileIsNotFound) {
  auto f = gguf::File::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

// The real default models (skipped when scripts/setup has not fetched them).
TEST(Gguf, OpensDefaultModels) {
  struct Expect { const char* file; const char* arch; size_t n_tensors; };
  for (auto e : {Expect{"smollm2-135m-instruct-q4_1.gguf", "llama", 272},
                 Expect{"gemma-3-270m-q4_k_m.gguf", "gemma3", 236}}) {
    std::string path = std::string(HS_SOURCE_DIR) + "/models/" + e.file;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (run scripts/setup)";
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_EQ(*(*f)->get_string("general.architecture"), e.arch);
    EXPECT_EQ((*f)->tensors().size(), e.n_tensors);
    uint64_t end = 0;
    for (const auto& t : (*f)->tensors()) end = std::max(end, (*f)->data_offset() + t.offset + t.n_bytes);
    EXPECT_LE(end, (*f)->file_size());
    EXPECT_NE((*f)->find_tensor("token_embd.weight"), nullptr);
  }
}

}  // namespace
}  // namespace hs
