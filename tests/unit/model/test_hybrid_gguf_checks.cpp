// tests/unit/model/test_hybrid_gguf_checks.cpp — the GGUF loader's tensor checks on the hybrid
// fixtures (llama.cpp's conversions, tests/fixtures/hybrid/*-tiny-bf16.gguf): the file copied
// with one tensor renamed away (missing) or with its shape dims swapped (same bytes) fails to
// load with an error naming that tensor; the unchanged copy loads (so the failures come from the
// change). Covers the qwen3next-only tensors (ssm_ba, the 3-D experts, the router, the shared
// expert's gate) and one each of the shared ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "formats/gguf_builder.h"
#include "model/hybrid_decoder.h"

namespace hs {
namespace {

std::string fixture(const std::string& model) {
  return std::string(HS_FIXTURES_DIR) + "/hybrid/" + model + "-tiny/" + model + "-tiny-bf16.gguf";
}

// GCC 12 at -O3 sees a false stringop-overflow in GgufBuilder's inlined vector growth here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
// The file again, tensor `name` renamed to `rename` (when not empty) or its first two dims swapped.
std::vector<uint8_t> rewrite(const gguf::File& f, const std::string& name, const std::string& rename) {
  gguf::GgufBuilder b(f.version(), f.alignment());
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") b.kv_value(k, v);
  if (f.alignment() != gguf::kDefaultAlignment) b.kv_u32("general.alignment", f.alignment());
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::vector<uint64_t> ne(t.ne, t.ne + t.n_dims);
    std::string n = t.name;
    if (t.name == name) {
      if (!rename.empty()) n = rename;
      else std::swap(ne[0], ne[1]);
    }
    b.tensor(n, ne, static_cast<uint32_t>(t.type), t.offset);
  }
  const uint8_t* data = f.tensors().front().data - f.tensors().front().offset;
  const uint8_t* end = data;
  for (const gguf::TensorInfo& t : f.tensors()) end = std::max(end, t.data + t.n_bytes);
  b.data(std::vector<uint8_t>(data, end));
  return b.bytes();
}
#pragma GCC diagnostic pop

Status load(std::span<const uint8_t> bytes) {
  HS_ASSIGN_OR_RETURN(auto file, gguf::File::from_bytes(bytes));
  HS_ASSIGN_OR_RETURN(auto dec, HybridDecoder::create(std::move(file)));
  return Status::ok();
}

TEST(HybridGgufChecks, Qwen3NextTensorsCheckedByNameAndShape) {
  auto f = gguf::File::open(fixture("qwen3next"));
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  ASSERT_TRUE(load(rewrite(**f, "", "")).is_ok()) << "the unchanged copy must load";
  for (const char* name : {"blk.0.ssm_ba.weight", "blk.2.ffn_down_exps.weight", "blk.3.ffn_gate_exps.weight",
                           "blk.5.ffn_gate_inp.weight", "blk.6.ffn_up_shexp.weight", "blk.7.ffn_gate_inp_shexp.weight",
                           "blk.4.attn_qkv.weight", "blk.3.attn_q.weight"}) {
    for (const bool missing : {true, false}) {
      const Status st = load(rewrite(**f, name, missing ? std::string(name) + ".renamed" : ""));
      ASSERT_FALSE(st.is_ok()) << name << (missing ? " missing" : " misshapen");
      EXPECT_NE(st.message().find(std::string("'") + name + "'"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(missing ? "missing" : "shape"), std::string::npos) << st.message();
    }
  }
}

// A qwen35 file is not read as qwen3next (and the other way round): the fused / split
// projections are asked for by architecture.
TEST(HybridGgufChecks, ArchitecturesAskForTheirOwnTensors) {
  auto f35 = gguf::File::open(fixture("qwen35"));
  ASSERT_TRUE(f35.is_ok()) << f35.status().to_string();
  const Status st = load(rewrite(**f35, "blk.0.ssm_beta.weight", "blk.0.ssm_ba.weight"));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("blk.0.ssm_beta.weight"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace hs
