// model/dummy_model.h — a model of any supported shape with random weights, built in memory
// from a Hugging Face config.json (`--load-format dummy --config FILE`), for speed tests of
// shapes whose weights are too large to ship (Llama-3.1-8B: configs/llama-3.1-8b.json).
//
// The result is an ordinary in-memory GGUF (gguf::File::from_buffer): metadata in the GGUF
// keys llama.cpp writes for the architecture, tensors under the names model/weights.cpp reads,
// so the same config, weight and forward code runs on it as on a real file. Matrices are of
// one type (f32, f16, bf16, q8_0, q4_0, q4_k) with values of std ~ 1/sqrt(n_in) (outputs of
// unit scale, finite logits); norm weights are 1, biases 0. The tokenizer is either copied from a
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

// A GGUF holding only a tokenizer of n_vocab tokens (for models whose file has none, e.g. the
// tiny test checkpoints): vocab_path "synthetic" = the synthetic byte-level vocabulary above
// (with its ChatML template), else the tokenizer.* keys of that GGUF (its size must be n_vocab).
Result<std::unique_ptr<gguf::File>> make_vocab_file(const std::string& vocab_path, int64_t n_vocab);

}  // namespace hs
