#!/usr/bin/env python3
"""Small Hugging Face tokenizer directories (tokenizer.json + tokenizer_config.json) and the ids
HF `tokenizers` gives for the committed corpus, for hindsight's tokenizer.json importer.

There is no Hugging Face hub here, so no real Qwen tokenizer.json; these are trained with HF's own
library on the committed corpus, with the pipelines the Qwen checkpoints publish:
  normalizer NFC, pre-tokenizer Sequence[Split(<regex>, isolated), ByteLevel(use_regex=False)],
  model BPE (byte-level alphabet, no byte fallback), decoder ByteLevel,
  added tokens <|endoftext|> <|im_start|> <|im_end|> (special) and <tool_call> </tool_call>
  (not special: user-defined, matched even when special text is not parsed).
  hf_qwen2_tiny   Qwen2 / Qwen2.5's split regex (single digits)
  hf_qwen35_tiny  Qwen3.5's (combining marks \\p{M} kept with letters, out of punctuation runs)
Each directory gets expected.json in the format of tests/fixtures/tokenizer/*_expected.json
(ids with HF's defaults, ids_plain with special text tokenized as text, decoded when it differs).
The vocabulary is 1024 entries (the qwen35 fixture's vocab_size): trained tokens, then the added
ones; the importer pads to the model's size as llama.cpp's converter does.

Usage: python tools/reference/gen_hf_tokenizer_fixtures.py   (needs `pip install tokenizers==0.22.1`)
"""
import json
import pathlib

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "tokenizer"

QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
            r"|\s+(?!\S)|\s+")
QWEN35_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<tool_call>", "</tool_call>"]
N_VOCAB = 1024
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def build(regex: str, texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    n_trained = N_VOCAB - len(SPECIAL) - len(USER_DEFINED)
    trainer = trainers.BpeTrainer(vocab_size=n_trained, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts * 4, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in USER_DEFINED])
    return tok


def expected(tok: Tokenizer, texts: list[str], name: str) -> dict:
    cases = []
    for text in texts:
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        c = {"ids": ids}
        if plain != ids:
            c["ids_plain"] = plain
        decoded = tok.decode(ids, skip_special_tokens=True)
        if decoded != text:
            c["decoded"] = decoded
        cases.append(c)
    return {"model": name, "generator": f"tools/reference/gen_hf_tokenizer_fixtures.py, tokenizers {tokenizers.__version__}",
            "tokenizers_version": tokenizers.__version__, "transformers_version": None, "add_bos": False,
            "cases": cases}


def main() -> None:
    texts = json.loads((FIX / "corpus.json").read_text())["strings"]
    for name, regex in (("hf_qwen2_tiny", QWEN2_RE), ("hf_qwen35_tiny", QWEN35_RE)):
        out = FIX / name
        out.mkdir(exist_ok=True)
        tok = build(regex, texts)
        tok.save(str(out / "tokenizer.json"))
        (out / "tokenizer_config.json").write_text(json.dumps({
            "add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "chat_template": CHATML, "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer"}, indent=1) + "\n")
        (out / "expected.json").write_text(json.dumps(expected(tok, texts, name), ensure_ascii=False) + "\n")
        print(f"{out}: vocab {tok.get_vocab_size()} (with added), {len(texts)} cases")


if __name__ == "__main__":
    main()
