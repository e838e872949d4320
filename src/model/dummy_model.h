// model/dummy_model.h — a model of any supported shape with random weights, built in memory
// from a Hugging Face config.json (`--load-format dummy --config FILE`), for speed tests of
// shapes whose weights are too large to ship (Llama-3.1-8B: configs/llama-3.1-8b.json; the
// hybrids Qwen3.5-0.8B / 9B / 27B and Qwen3-Next-80B-A3B: configs/qwen3.5-*.json,
// configs/qwen3-next-80b-a3b.json).
//
// model_type llama / mistral, qwen2, gemma3 / gemma3_text, and the hybrid Gated-DeltaNet
// models: qwen3_5_text / qwen3_5 (fields under text_config) → GGUF architecture qwen35, and
// qwen3_next → qwen3next (the MoE FFN on every layer), read as model/hf_model.cpp reads them
// (linear_* heads, linear_conv_kernel_dim, RoPE from rope_parameters, partial_rotary_factor →
// rope.dimension_count, the schedule from layer_types or full_attention_interval, written per
// layer as attention.recurrent_layers). Unknown fields (e.g. "_source") are ignored.
//
// The result is an ordinary in-memory GGUF (gguf::File::from_buffer): metadata in the GGUF
// keys llama.cpp writes for the architecture, tensors under the names model/weights.cpp reads,
// so the same config, weight and forward code runs on it as on a real file. Matrices are of
// one type (f32, f16, bf16, q8_0, q4_0, q4_k) with values of std ~ 1/sqrt(n_in) (outputs of
// unit scale, finite logits); norm weights are 1, biases 0. Hybrids: the zero-centred norms,
// stored as 1 + w, are 1 (w = 0), as is the gated ssm_norm (plain w); ssm_a = -exp(A_log) is
// -U(1, 16) per head, ssm_dt.bias 1; the conv ssm_conv1d {kernel, conv_dim} is f32 of std
// 1/sqrt(kernel); qwen3next's router ffn_gate_inp {n_embd, n_expert} and shared-expert gate
// ffn_gate_inp_shexp {n_embd, 1} are f32 (as llama.cpp's converter keeps them), the experts
// 3-D {n_in, n_out, n_expert} of the weight type; no MTP blocks. The tokenizer is either copied from a
// vocabulary GGUF (`--vocab`, e.g. llama.cpp's models/ggml-vocab-llama-bpe.gguf, which the
// llama.cpp peer uses) or a synthetic byte-level one: the 256 byte tokens (any text encodes to
// one token per byte), ChatML specials, and filler tokens up to the vocabulary size that decode
// to visible text ("w300 ") but are never produced by encoding; with a ChatML template.
// Cost: the whole model once in host RAM (16 GB for the 8B shape in bf16), filled by the thread
// pool from a counter-based generator (deterministic in the seed; ~1 s per GB per thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"

namespace hs {

struct DummyModelSpec {
  std::string config_path;      // Hugging Face config.json
  DType weight_type = DType::BF16;
  std::string vocab_path;       // "" = synthetic byte-level vocabulary
  uint64_t seed = 1;
};

// Weight types a dummy model can be made of, by --dummy-dtype name (f32, f16, bf16, q8_0, q4_0,
// q4_k); an error listing them for any other.
Result<DType> parse_dummy_dtype(const std::string& name);

Result<std::unique_ptr<gguf::File>> make_dummy_model(const DummyModelSpec& spec, ThreadPool& pool);

// What make_dummy_model(spec) would build, without allocating or filling it (the config read and
// checked the same way, the vocabulary not).
struct DummyModelInfo {
  std::string arch;                  // GGUF architecture
  int64_t n_layer = 0;
  std::vector<bool> layer_is_linear;  // hybrids: [n_layer], true = Gated DeltaNet; empty otherwise
  int64_t n_tensors = 0;
  int64_t n_params = 0;              // elements of all tensors
  uint64_t weight_bytes = 0;         // the data section (tensors aligned to 32 bytes)
};
Result<DummyModelInfo> describe_dummy_model(const DummyModelSpec& spec);

// A GGUF holding only a tokenizer of n_vocab tokens (for models whose file has none, e.g. the
// tiny test checkpoints): vocab_path "synthetic" = the synthetic byte-level vocabulary above
// (with its ChatML template), else the tokenizer.* keys of that GGUF (its size must be n_vocab).
Result<std::unique_ptr<gguf::File>> make_vocab_file(const std::string& vocab_path, int64_t n_vocab);

}  // namespace hs
