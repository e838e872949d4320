// tokenizer/hf_tokenizer_json.h — a Hugging Face tokenizer directory (tokenizer.json,
// tokenizer_config.json, chat_template.jinja) written as the `tokenizer.*` GGUF keys that
// llama.cpp's converter would write for it, so a safetensors checkpoint is tokenized by the
// same Vocab / BpeTokenizer / ChatTemplate code as a GGUF file (one format inside).
//
// Supported: byte-level BPE (model.type "BPE" with a ByteLevel pre-tokenizer and decoder), the
// pre-tokenizers hindsight implements, recognised by their structure and exact split regex:
//   Split(Qwen2 regex) + ByteLevel(use_regex=false), NFC normalizer   -> 'qwen2'
//   Split(Qwen3.5 regex, \p{M} with letters) + ByteLevel, NFC         -> 'qwen35'
//   Split(Llama 3 regex) + ByteLevel                                   -> 'llama3'
//   ByteLevel(use_regex=true)                                          -> 'gpt2'
//   Digits(individual) + ByteLevel(use_regex=true)                     -> 'smollm'
// Token types as the converter assigns them: vocabulary entries normal, added tokens control
// (special, or looking special: <|...|>, <unused...>) or user-defined, ids missing below the
// model's vocabulary size "[PAD<i>]" unused; an id past the model's rows is an error.
// Special ids and add_bos_token come from tokenizer_config.json; the chat template from
// chat_template.jinja, else tokenizer_config.json ("default" of a named list; the others as
// tokenizer.chat_template.<name>). Anything else is an error naming the file and the field.
// Cost: one parse of the JSON at load, linear in its size.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "formats/gguf_builder.h"

namespace hs::tok {

// Appends the tokenizer keys for `dir` to `b`; `n_vocab`: the model's embedding rows (the token
// list is padded up to it). Returns false (writing nothing) when `dir` has no tokenizer.json.
Result<bool> write_hf_tokenizer(const std::string& dir, int64_t n_vocab, gguf::GgufBuilder& b);

}  // namespace hs::tok
