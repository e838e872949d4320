#!/usr/bin/env python3
"""Write a Hugging Face tokenizer directory (tokenizer.json + tokenizer_config.json) for a GGUF
model, so load tools that count tokens client-side (aiperf --tokenizer DIR) work offline.

There is no hub here; the tokenizer is rebuilt from the GGUF's own metadata with transformers'
GGUF converter, exactly as tools/reference/gen_tokenizer_fixtures.py does for the tokenizer
fixtures (including the SmolLM2 'smollm' pre-tokenizer fix). Needs gguf, tokenizers and
transformers (no torch). Usage: hf_tokenizer.py MODEL.gguf OUT_DIR
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools/reference"))


def build(model: Path, out: Path) -> Path:
    from gen_tokenizer_fixtures import read_gguf_tokenizer  # noqa: E402
    from tokenizers import pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    arch, td, cfg = read_gguf_tokenizer(model)
    tok, _ = convert_gguf_tokenizer(arch, td)
    if td.get("tokenizer_type") == "gpt2" and td.get("pre_tokenizer_type") == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    if cfg.get("add_bos_token"):
        bos = cfg["bos_token"]
        tok.post_processor = TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = None
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=cfg.get("bos_token"),
                                   eos_token=cfg.get("eos_token"), unk_token=cfg.get("unk_token"),
                                   pad_token=cfg.get("pad_token") or cfg.get("eos_token"))
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    (out / "source.json").write_text(json.dumps({"gguf": str(model), "size": model.stat().st_size}))
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    src = out / "source.json"
    if src.is_file() and json.loads(src.read_text()) == {"gguf": str(model), "size": model.stat().st_size}:
        print(out)
        return 0
    print(build(model, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
