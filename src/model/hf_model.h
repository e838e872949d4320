// model/hf_model.h — a Hugging Face checkpoint (config.json + model.safetensors) as the
// in-memory GGUF that llama.cpp's converter would write, so one config / weight / forward
// path serves both formats.
//
// Supported: model_type qwen3_5_text / qwen3_5 (Qwen3.5 dense hybrid; fields under
// text_config, tensors under model. or model.language_model.) → a qwen35 GGUF, and qwen3_next
// (Qwen3-Next, MoE) → a qwen3next GGUF. The conversion applies the converter's transforms
// (models-and-gguf.md §5): tensor names to blk.N.*, every zero-centred *norm.weight stored as
// 1 + w (not linear_attn.norm), A_log stored as -exp(A_log), conv1d squeezed to
// [conv_dim][kernel]; for qwen35 the V heads of the Gated-DeltaNet tensors reordered from
// transformers' grouped order (v-head j reads k-head j / r) to llama.cpp's tiled order (j % n_k):
// the V rows of in_proj_qkv, in_proj_z, in_proj_a/b, A_log, dt_bias, the conv's V channels and
// out_proj's columns. For qwen3next (no reorder): in_proj_qkvz (grouped per key head) split into
// attn_qkv = [all q | all k | all v] and attn_gate = z, in_proj_ba kept as ssm_ba, the per-expert
// mlp.experts.N.{gate,up,down}_proj stacked into 3-D ffn_{gate,up,down}_exps, mlp.gate →
// ffn_gate_inp and shared_expert_gate → ffn_gate_inp_shexp (both f32, as the converter forces),
// shared_expert.* → ffn_*_shexp. Other matrices keep their stored type (bf16 / f16 / f32),
// vectors become f32.
// A missing tensor, a wrong shape or an unsupported field is an error naming it; tensors the
// forward pass does not use (mtp.*, vision) are skipped.
// A tokenizer.json beside the weights (tokenizer/hf_tokenizer_json.h) becomes the file's
// tokenizer.* keys; without one the model takes --vocab.
// Cost: the weights are copied once into the GGUF buffer (host RAM of the checkpoint's size
// while loading; the safetensors mappings are closed afterwards). One file (model.safetensors)
// or sharded (model.safetensors.index.json; formats/safetensors_checkpoint.h).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"

namespace hs {

// `dir` holds config.json and model.safetensors or its index and shards (and optionally tokenizer.json,
// tokenizer_config.json, chat_template.jinja).
Result<std::unique_ptr<gguf::File>> load_hf_model(const std::string& dir);

}  // namespace hs
