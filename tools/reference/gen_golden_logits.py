"""Golden logits from Hugging Face transformers for the default GGUF models.

transformers loads the same GGUF files we serve (dequantizing every tensor to float32,
undoing the converter's Q/K permutation and the gemma `+1` norm convention itself; qwen2
files are not permuted and keep their q/k/v biases and separate output.weight), runs the
prompts with eager attention in float32 on the CPU, and we store per prompt:
  - the prompt token ids (from transformers' GGUF tokenizer; the C++ test feeds ids, so it
    does not depend on our tokenizer),
  - per position the top-20 token ids and log-probabilities,
  - a 64-token greedy continuation with the top-1/top-2 log-prob margin at each step.

Output: tests/fixtures/golden/<model>.json (metadata, ids, margins) and <model>.bin
(float32/int32 arrays, layout in the JSON). Usage: gen_golden_logits.py [--model NAME]
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "golden"
TOPK = 20
N_GREEDY = 64

MODELS = {
    "smollm2": "smollm2-135m-instruct-q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen2": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}

SHORT_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
]


# Characters of the long prompt: ~1,300 tokens for the small models; the 0.5B qwen2 (3.5x the
# compute per token of gemma3 270M) gets ~1,040, still >= 1,000, to keep its CI test short.
LONG_CHARS = {"qwen2": 4100}


def long_prompt(name: str) -> str:
    """>= 1,000 tokens of real text: this repository's architecture notes."""
    text = (ROOT.parent / "shared" / "ARCHITECTURE.md").read_text()
    return text[:LONG_CHARS.get(name, 5200)]


def top_k(logits: torch.Tensor):
    logp = torch.log_softmax(logits.double(), dim=-1)
    vals, ids = torch.topk(logp, TOPK, dim=-1)
    return ids.to(torch.int32).numpy(), vals.to(torch.float32).numpy()


def run_model(name: str) -> None:
    fname = MODELS[name]
    tok = AutoTokenizer.from_pretrained(ROOT / "models", gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(
        ROOT / "models", gguf_file=fname, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    cfg = model.config
    print(f"{name}: {cfg.model_type}, tie_word_embeddings={cfg.tie_word_embeddings}, "
          f"rope={getattr(cfg, 'rope_parameters', None) or getattr(cfg, 'rope_theta', None)}", file=sys.stderr)
    cases = []
    blobs = []
    offset = 0
    for i, prompt in enumerate(SHORT_PROMPTS + [long_prompt(name)]):
        ids = tok(prompt, add_special_tokens=True)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        top_ids, top_lp = top_k(logits)
        # Greedy continuation, one token at a time with the full forward (exact, no cache quirks).
        greedy, margins = [], []
        cur = list(ids)
        with torch.no_grad():
            out = model.generate(torch.tensor([cur]), max_new_tokens=N_GREEDY, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True,
                                 pad_token_id=tok.eos_token_id, eos_token_id=None)
        for step, scores in enumerate(out.scores):
            lp = torch.log_softmax(scores[0].double(), dim=-1)
            v, ix = torch.topk(lp, 2)
            greedy.append(int(ix[0]))
            margins.append(float(v[0] - v[1]))
        n = len(ids)
        case = {
            "name": f"{name}-{i}",
            "prompt": prompt if len(prompt) < 200 else prompt[:200] + "...",
            "tokens": ids,
            "n_positions": n,
            "top_ids_offset": offset,
            "top_logprobs_offset": offset + n * TOPK * 4,
            "greedy": greedy,
            "greedy_margins": margins,
        }
        blobs.append(top_ids.astype("<i4").tobytes())
        blobs.append(top_lp.astype("<f4").tobytes())
        offset += n * TOPK * 8
        cases.append(case)
        print(f"{name} case {i}: {n} tokens, greedy {tok.decode(greedy)[:60]!r}", file=sys.stderr)
    meta = {
        "model_file": fname,
        "generator": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, "
                     "float32, eager attention, CPU",
        "top_k": TOPK,
        "cases": cases,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(meta, indent=1))
    (OUT / f"{name}.bin").write_bytes(b"".join(blobs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=list(MODELS), action="append")
    args = ap.parse_args()
    torch.manual_seed(0)
    for name in args.model or list(MODELS):
        run_model(name)


if __name__ == "__main__":
    main()
