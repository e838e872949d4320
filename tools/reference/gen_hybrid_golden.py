"""Golden fixtures for the hybrid Gated-DeltaNet architectures, from transformers' own classes.

Builds a *tiny random* Qwen3.5 text model (transformers' Qwen3_5ForCausalLM /
Qwen3_5TextConfig, model_type "qwen3_5_text") with a fixed seed: 8 layers in the real
schedule (full_attention_interval 4: three Gated-DeltaNet layers, then one gated full-attention
layer, twice), hidden 128, full attention with 2 query heads / 1 kv head of head_dim 256 and
partial rotary 0.25 (64 rotated dims, interleaved-MRoPE sections as the real config), linear
attention with 2 key heads / 4 value heads of 32 (so v-head -> k-head sharing is not the
identity), conv kernel 4, vocabulary 1024. Weights are drawn with a larger std than the
checkpoint init (so logits have real margins), every norm / gate / decay parameter is
perturbed away from its init value (so the zero-centred (1 + w) norms, dt_bias, A_log and the
gated norm are all exercised), then rounded to bfloat16: the fixture stores bf16 weights and
the reference runs float32 on exactly those values.

--model qwen3next makes the same for Qwen3-Next (Qwen3NextForCausalLM: fused qkvz / ba
projections, 4 experts top-2 with a shared expert, vocabulary 512) in qwen3next-tiny/.

Output, tests/fixtures/hybrid/qwen35-tiny/ (and qwen3next-tiny/):
  config.json, model.safetensors   the model as save_pretrained writes it (bf16, ~3.6 MB)
  golden.json, golden.bin          per case: token ids, per-position top-20 log-probs (float32
                                   eager forward over the whole prompt: the chunked delta rule),
                                   a 48-token greedy continuation with top-1/top-2 margins
                                   (generate() with the cache: chunked prefill, then the
                                   recurrent rule token by token), in gen_golden_logits.py's
                                   layout.
Usage: .venv-ref/bin/python tools/reference/gen_hybrid_golden.py [--model qwen35|qwen3next]
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3NextConfig, Qwen3NextForCausalLM

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "hybrid"
TOPK = 20
N_GREEDY = 48
SEED = 1234
# Case lengths: three short prompts (the batched test) and one long one (>= 1,000 tokens).
LENGTHS = [7, 45, 130, 1100]


def make_config() -> Qwen3_5TextConfig:
    return Qwen3_5TextConfig(
        vocab_size=1024,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=8,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=256,
        hidden_act="silu",
        max_position_embeddings=4096,
        initializer_range=0.1,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
        linear_conv_kernel_dim=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        full_attention_interval=4,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def make_next_config() -> Qwen3NextConfig:
    """Qwen3-Next (MoE) in the same tiny shape: every layer's MLP is the sparse MoE block (4
    experts, top-2, renormalised, plus the sigmoid-gated shared expert); vocabulary 512 keeps
    the file under 4 MB."""
    return Qwen3NextConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=8,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=256,
        hidden_act="silu",
        max_position_embeddings=4096,
        initializer_range=0.1,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        linear_conv_kernel_dim=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        full_attention_interval=4,
        decoder_sparse_step=1,
        moe_intermediate_size=48,
        shared_expert_intermediate_size=48,
        num_experts_per_tok=2,
        num_experts=4,
        norm_topk_prob=True,
        mlp_only_layers=[],
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


MODELS = {
    "qwen35": ("qwen35-tiny", make_config, Qwen3_5ForCausalLM),
    "qwen3next": ("qwen3next-tiny", make_next_config, Qwen3NextForCausalLM),
}


def perturb(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Moves the parameters that init leaves at constants (norms, dt_bias) off them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("dt_bias"):
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
            if name.endswith("conv1d.weight"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            # Round to bf16 so the saved bf16 file holds exactly the reference's weights.
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def top_k(logits: torch.Tensor):
    logp = torch.log_softmax(logits.double(), dim=-1)
    vals, ids = torch.topk(logp, TOPK, dim=-1)
    return ids.to(torch.int32).numpy(), vals.to(torch.float32).numpy()


def run(name: str) -> None:
    out_name, make, cls = MODELS[name]
    OUT = FIXTURES / out_name
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    cfg = make()
    cfg._attn_implementation = "eager"
    model = cls(cfg).to(torch.float32)
    perturb(model, gen)
    model.eval()
    print(f"layer_types {cfg.layer_types}", file=sys.stderr)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params} parameters", file=sys.stderr)

    cases, blobs, offset = [], [], 0
    for i, n in enumerate(LENGTHS):
        ids = torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()
        with torch.no_grad():
            logits = model(torch.tensor([ids]), use_cache=False).logits[0]
            out = model.generate(torch.tensor([ids]), max_new_tokens=N_GREEDY, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True,
                                 pad_token_id=0, eos_token_id=None)
        top_ids, top_lp = top_k(logits)
        greedy, margins = [], []
        for scores in out.scores:
            lp = torch.log_softmax(scores[0].double(), dim=-1)
            v, ix = torch.topk(lp, 2)
            greedy.append(int(ix[0]))
            margins.append(float(v[0] - v[1]))
        gaps = top_lp[:, 0] - top_lp[:, 1]
        print(f"case {i}: {n} tokens, {np.mean(gaps > 0.05) * 100:.0f}% positions with margin > 0.05, "
              f"greedy {greedy[:12]}...", file=sys.stderr)
        cases.append({
            "name": f"{out_name}-{i}",
            "tokens": ids,
            "n_positions": n,
            "top_ids_offset": offset,
            "top_logprobs_offset": offset + n * TOPK * 4,
            "greedy": greedy,
            "greedy_margins": margins,
        })
        blobs.append(top_ids.astype("<i4").tobytes())
        blobs.append(top_lp.astype("<f4").tobytes())
        offset += n * TOPK * 8

    OUT.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(OUT, safe_serialization=True)
    gc = OUT / "generation_config.json"
    if gc.exists():
        gc.unlink()
    meta = {
        "model_dir": f"hybrid/{out_name}",
        "generator": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                     f"{cls.__name__}, float32, eager attention, CPU, seed {SEED}",
        "top_k": TOPK,
        "cases": cases,
    }
    (OUT / "golden.json").write_text(json.dumps(meta, indent=1))
    (OUT / "golden.bin").write_bytes(b"".join(blobs))
    print(f"wrote {OUT}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=list(MODELS), action="append")
    args = ap.parse_args()
    for name in args.model or list(MODELS):
        run(name)


if __name__ == "__main__":
    main()
