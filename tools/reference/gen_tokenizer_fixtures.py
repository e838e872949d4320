#!/usr/bin/env python3
"""Golden token ids for hindsight's tokenizers, from Hugging Face `tokenizers`.

Writes, under tests/fixtures/tokenizer/:
  corpus.json            the test strings (hand-written + generated with a fixed seed)
  smollm2_expected.json  ids for models/smollm2-135m-instruct-q4_1.gguf
  gemma3_expected.json   ids for models/gemma-3-270m-q4_k_m.gguf
  qwen2_expected.json    ids for models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

For every corpus string, each expected file holds
  ids        encode(text) as HF does by default: add_special_tokens=True and special-token
             text recognised (split_special_tokens=False)   == hs encode(text, true, true)
  ids_plain  only when it differs from `ids` minus the BOS the post-processor adds:
             add_special_tokens=False, encode_special_tokens=True (special-token text is
             tokenized as ordinary text; non-special added tokens are still matched)
                                                             == hs encode(text, false, false)
  decoded    only when it differs from the text: decode(ids, skip_special_tokens=True)

How the reference is built, and why
-----------------------------------
There is no Hugging Face hub here, so no tokenizer.json. The reference is rebuilt from the GGUF
itself with transformers' own GGUF converter (`transformers.integrations.gguf.
gguf_tokenizer_mapping.convert_gguf_tokenizer`, the code `AutoTokenizer.from_pretrained(dir,
gguf_file=...)` runs). We call it directly on metadata read with the `gguf` package, because
transformers' GGUF *reader* imports torch, which the tokenizer does not need.

* Gemma 3 (tokenizer.ggml.model = 'llama', architecture gemma3): used as converted. The
  converter builds GemmaTokenizer's pipeline -- normalizer Replace(' ' -> U+2581), a Split(' ')
  pre-tokenizer that is a no-op after that normalizer, BPE with byte_fallback and fuse_unk,
  decoder Replace(U+2581 -> ' ') + ByteFallback + Fuse -- which is the published Gemma 3
  tokenizer.json pipeline. The GGUF has no merges; they are derived from the vocabulary with
  `generate_merges` ranked by token position (the merged token's id, then the longer left
  piece first), as the published tokenizer's merges follow vocabulary order. Whitespace-only
  tokens the GGUF spells with real spaces ("  ") are respelled "▁▁". Control tokens
  (token_type 3) become special added tokens, user-defined ones (type 4: "\\n", "\\t", HTML
  tags, ...) non-special added tokens; respelled space runs are not added tokens and are
  reached through merges. BOS is added by a TemplateProcessing post-processor
  (tokenizer.ggml.add_bos_token = true).
* SmolLM2 (tokenizer.ggml.model = 'gpt2', pre = 'smollm'): the converter gives a GPT-2
  byte-level BPE with the file's merges and the 17 control tokens as special added tokens, but
  its pre-tokenizer is plain ByteLevel (the converter has no entry for pre='smollm'). The
  published SmolLM2 tokenizer.json pre-tokenizer is Sequence[Digits(individual_digits=True),
  ByteLevel(add_prefix_space=False, use_regex=True)] -- llama.cpp's 'smollm' pre-tokenizer
  ("\\p{N}" then the GPT-2 regex) says the same -- so we replace the pre-tokenizer with that.
  Without it "2024" would be merged into multi-digit tokens the model never saw.
  No BOS is added (tokenizer.ggml.add_bos_token = false; the published post-processor is
  ByteLevel, which adds nothing).
* Qwen2.5-Coder (tokenizer.ggml.model = 'gpt2', pre = 'qwen2'): the converter gives the byte-level
  BPE with the file's merges and the Qwen2 split regex (Split(isolated) + ByteLevel without
  regex), control tokens as special added tokens and <tool_call>/</tool_call> (user-defined) as
  non-special ones. It has no normalizer, but Qwen's published tokenizer.json and transformers'
  own Qwen2Tokenizer run NFC first, so we add normalizers.NFC(): "e" + U+0301 must give the ids
  of "é" (llama.cpp skips this step). Added tokens are matched before it (normalized=False).
  No BOS (add_bos_token = false).

Requirements (installed on demand, not by `make test`): gguf, tokenizers, transformers
(no torch). Run from the repository root:
    .venv/bin/python tools/reference/gen_tokenizer_fixtures.py
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tokenizer"
MODELS = {
    "smollm2": ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf",
    "gemma3": ROOT / "models" / "gemma-3-270m-q4_k_m.gguf",
    "qwen2": ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
SEED = 20250301

# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------

CODE = [
    # C++
    '#include <vector>\n#include <string>\n\nint main(int argc, char** argv) {\n'
    '  std::vector<std::string> args(argv, argv + argc);\n  for (const auto& a : args) {\n'
    '    if (a == "--help") return 0;\n  }\n  return 1;\n}\n',
    'template <typename T>\nconstexpr T clamp(T v, T lo, T hi) noexcept {\n'
    '    return v < lo ? lo : (hi < v ? hi : v);\n}\n',
    'namespace hs {\nstruct Foo final : public Bar {\n  ~Foo() override = default;\n'
    '  std::unique_ptr<int[]> data_;  // [n]\n};\n}  // namespace hs\n',
    'auto x = std::make_shared<std::map<int, std::string>>();\nx->emplace(42, "forty-two");\n'
    'static_assert(sizeof(void*) == 8, "64-bit only");\n',
    # Python
    'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n'
    '    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nprint(fib(30))\n',
    'class Config:\n    def __init__(self, **kwargs):\n        self.__dict__.update(kwargs)\n\n'
    '    def __repr__(self):\n        return f"Config({self.__dict__!r})"\n',
    'import numpy as np\nx = np.arange(12).reshape(3, 4)\nprint(x @ x.T, x.mean(axis=0))\n'
    'lambda_ = [i**2 for i in range(10) if i % 2 == 0]\n',
    'try:\n\twith open("data.txt") as f:\n\t\tlines = f.readlines()\nexcept OSError as e:\n'
    '\tprint(f"error: {e}", file=sys.stderr)\n',
    # Rust
    'fn main() {\n    let v: Vec<u32> = (1..=10).map(|x| x * x).collect();\n'
    '    println!("{:?}", v.iter().sum::<u32>());\n}\n',
    'impl<T: Clone + Send + \'static> Worker<T> {\n    pub fn spawn(&self) -> Result<(), Box<dyn Error>> {\n'
    '        let (tx, rx) = mpsc::channel();\n        Ok(())\n    }\n}\n',
    '#[derive(Debug, Clone, PartialEq)]\nenum Token<\'a> { Word(&\'a str), Num(i64), Eof }\n',
    # Go
    'package main\n\nimport (\n\t"fmt"\n\t"net/http"\n)\n\nfunc handler(w http.ResponseWriter, r *http.Request) {\n'
    '\tfmt.Fprintf(w, "Hello, %s!", r.URL.Path[1:])\n}\n',
    'func (s *Server) Close() error {\n\ts.mu.Lock()\n\tdefer s.mu.Unlock()\n\tif s.closed {\n'
    '\t\treturn ErrClosed\n\t}\n\ts.closed = true\n\treturn nil\n}\n',
    # JavaScript / TypeScript
    'const fetchData = async (url) => {\n  const res = await fetch(url, { method: "GET" });\n'
    '  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return res.json();\n};\n',
    'export default function App({ items = [] }) {\n  return <ul>{items.map((i) => <li key={i.id}>{i.name}</li>)}</ul>;\n}\n',
    'interface User { id: number; name?: string; tags: Array<string> }\n'
    'let u: User = { id: 1, tags: [] } as const;\n',
    # SQL
    'SELECT u.id, u.name, COUNT(o.id) AS orders\nFROM users u\nLEFT JOIN orders o ON o.user_id = u.id\n'
    "WHERE u.created_at >= '2024-01-01'\nGROUP BY u.id, u.name\nHAVING COUNT(o.id) > 5\nORDER BY orders DESC\nLIMIT 10;\n",
    'CREATE TABLE IF NOT EXISTS kv (\n  key TEXT PRIMARY KEY,\n  value BLOB NOT NULL,\n'
    '  ts INTEGER DEFAULT (strftime(\'%s\', \'now\'))\n);\n',
    # shell
    '#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.log; do\n  gzip -9 "$f" && echo "compressed $f"\ndone\n'
    'grep -rn "TODO" src/ | wc -l\n',
    'export PATH="$HOME/.local/bin:$PATH"\n[ -d build ] || mkdir -p build && cd build && cmake .. -G Ninja\n',
    # others
    '{\n  "name": "hindsight",\n  "version": "0.1.0",\n  "dependencies": {"left-pad": "^1.3.0"},\n  "enabled": true,\n  "ratio": 0.75\n}\n',
    'server:\n  host: 0.0.0.0\n  port: 8080\n  models:\n    - name: gemma-3-270m\n      ctx: 32768\n',
    'all: build\n\nbuild:\n\tcmake --build build -j$(nproc)\n\n.PHONY: all build\n',
    '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>Test</title></head>\n'
    '<body><div class="x"><p>Hello &amp; welcome</p></div></body>\n</html>\n',
    'public static void main(String[] args) {\n    System.out.println("Hello, World!");\n}\n',
    'main :: IO ()\nmain = mapM_ print $ take 10 $ filter even [1..]\n',
    '__global__ void add(const float* __restrict__ a, float* b, int n) {\n'
    '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] += a[i];\n}\n',
    '\\begin{equation}\n  E = mc^2 \\quad \\text{and} \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}\n',
]

HAND = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\n\n\n",
    " \n ",
    "\t \t  \t",
    " " * 40,
    " " * 33 + "a",
    "\n" * 35,
    "\t" * 33,
    "  leading spaces",
    "trailing spaces   ",
    "\tleading tab and trailing newline\n",
    "a  b   c    d     e",
    "mixed \t\n \r\n\t whitespace \u00a0 runs \u3000 here",
    "no-break\u00a0space and ideographic\u3000space",
    "line\u2028separator and paragraph\u2029separator",
    "next\u0085line and mongolian\u180evowel separator",
    "zero\u200bwidth\u200cjoiners\u200dhere\ufeff",
    "Hello world",
    "Hello, World! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you're right, it's what we'll do, they've said, I'd agree.",
    "DON'T SHOUT, IT'S RUDE. WE'LL SEE. I'M FINE.",
    "'s 't 're 've 'm 'll 'd",
    "rock'n'roll ''quoted'' 'single'",
    "It’s a curly apostrophe — and “smart quotes” too…",
    "0",
    "1234567890",
    "12345678901234567890123456789012345678901234567890",
    "3.14159265358979323846",
    "-42, +7, 1e-9, 6.022e23, 0x1F, 0b1010, 1_000_000",
    "Prices: $1,299.99 / €5.00 / ¥1000 / £3.50",
    "2024-03-01T12:34:56Z",
    "v1.2.3-rc.4+build.567",
    "Full-width digits １２３４５ and Arabic-Indic ٠١٢٣٤٥٦٧٨٩",
    "Superscripts x² y³ ½ ¼ and roman Ⅻ ⅻ",
    "Devanagari digits ०१२३ and Thai ๑๒๓",
    "你好，世界！今天天气很好。",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。",
    "東京は日本の首都です。人口は約1400万人です。",
    "안녕하세요, 세계! 한국어 텍스트입니다.",
    "대한민국의 수도는 서울입니다.",
    "Привет, мир! Как дела?",
    "Ελληνικά: Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Tiếng Việt có dấu: Xin chào thế giới",
    "Hello мир 世界 مرحبا שלום नमस्ते 🌍",
    "mixedスクリプトtext한국어123abc",
    "😀",
    "😀😃😄😁",
    "👍🏽 👋🏿 🧑🏻‍💻",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈 🏴‍☠️ ❤️‍🔥",
    "🇯🇵🇺🇸🇩🇪 flags",
    "1️⃣ 2️⃣ #️⃣ keycaps",
    "🫩 🥲 🩵 new emoji",
    "🤔➡️🌱🌎✨➡️🚶‍♂️🚶‍♀️",
    "e\u0301 a\u0308 n\u0303 combining",
    "Z\u0351\u036b\u0343a\u0310\u0306l\u0357g\u0344o zalgo",
    "\ufffd replacement char",
    "private use \ue000\uf8ff and \U000f0000",
    "max code point \U0010ffff end",
    "noncharacters \ufffe \uffff \ufdd0",
    "control \x01\x02\x1b[31mred\x1b[0m \x7f",
    "nul\x00byte",
    "tab\there",
    "variation selectors \u2764\ufe0f \u2764\ufe0e",
    "math 𝔸𝔹ℂ 𝒜ℬ and ∀x∈ℝ: x²≥0",
    "old italic 𐌀𐌁𐌂 and cuneiform 𒀀",
    # Letters/digits newer than Unicode 14 (CJK Ext. I, Egyptian Ext. A, Kawi and Tangut digits).
    "new letters \U0002EBF0's \U00013460're and digits \U00011F50\U00011F51 x\U00016FF4y",
    "▁ literal lower one eighth block ▁▁ here",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>",
    "<|endoftext|>",
    "text before<|endoftext|>text after",
    "<|im_start|><|im_end|><|im_start|>",
    "<|im_start",
    "<<|im_start|>>",
    "|im_start|",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>",
    "<bos><bos>hello<eos>",
    "<pad><unk><mask>",
    "<end_of_turn>",
    "<unused0> <unused99> <unused6241>",
    "<start_of_image><end_of_image>",
    "[multimodal]",
    "<table><tr><td>cell</td></tr></table>",
    "<b>bold</b> <i>italic</i> <code>x</code>",
    "<repo_name>hindsight<file_sep>main.cpp<filename>",
    "<jupyter_code>print(1)<jupyter_output>1",
    "<think>reasoning</think>",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n    return c<|fim_middle|>",
    "<|repo_name|>hindsight\n<|file_sep|>src/main.cpp\nint main() {}",
    # NFC (qwen2 normalizes first): precomposed vs decomposed, an exclusion, Hangul jamo.
    "\u1e08 C\u0327\u0301 \u00c5 A\u030a \u212b \ud55c \u1112\u1161\u11ab \u0958 \u0915\u093c",
    "o\u0301\u0323 o\u0323\u0301 \u1ecd\u0301 q\u0307\u0323 \u0344 \u0f73",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "C:\\Users\\name\\file.txt and /usr/local/bin",
    "!!!???...,,,;;;:::",
    "(((nested)))[[brackets]]{{braces}}",
    "-----===== ***** ##### ~~~~~",
    "a" * 100,
    "ab" * 50,
    "😀" * 20,
    "中" * 50,
    "Mr. Smith's cat's toy isn't Bob's.",
    "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS !@#",
    "camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
    "x+=1;y-=2;z*=3;w/=4;",
    "a\rb\rc",
    "\r\n\r\n",
    " \t\n\r\x0b\x0c",
]

WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had "
    "by word but not what all were we when your can said there use an each which she do how their if will "
    "up other about out many then them these so some her would make like him into time has look two more "
    "write go see number no way could people my than first water been call who oil its now find long down "
    "day did get come made may part model token cache kernel attention sparse memory buffer tensor batch"
).split()
PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`")
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\n\n", " \n", "\r\n", "    ", "\u00a0", "\u3000"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>",
            "<bos>", "<eos>", "<pad>", "<unused7>", "<file_sep>", "<b>", "[multimodal]"]
RANGES = [
    (0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
    (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
    (0xAC00, 0xD7A3), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0x2000, 0x206F), (0xFF00, 0xFFEF),
]


def _rand_char(rng: random.Random) -> str:
    lo, hi = rng.choice(RANGES)
    cp = rng.randint(lo, hi)
    if 0xD800 <= cp <= 0xDFFF:
        cp = 0x41
    return chr(cp)


def _gen_prose(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.55:
            w = rng.choice(WORDS)
            if rng.random() < 0.15:
                w = w.capitalize()
            elif rng.random() < 0.05:
                w = w.upper()
            if rng.random() < 0.08:
                w += rng.choice(["'s", "'t", "'re", "'ll", "'d", "'ve", "'m"])
            out.append(w)
        elif r < 0.70:
            out.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        elif r < 0.80:
            out.append("".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 3))))
        elif r < 0.93:
            out.append("".join(_rand_char(rng) for _ in range(rng.randint(1, 6))))
        else:
            out.append(rng.choice(SPECIALS))
        out.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
    s = "".join(out)
    if rng.random() < 0.2:
        s = rng.choice(SPACES) + s
    return s


def _gen_code(rng: random.Random) -> str:
    snippet = rng.choice(CODE)
    lines = snippet.split("\n")
    a = rng.randint(0, len(lines) - 1)
    b = rng.randint(a + 1, len(lines))
    piece = "\n".join(lines[a:b])
    if rng.random() < 0.3:
        piece = piece.replace("    ", "\t")
    if rng.random() < 0.2:
        piece = piece.replace("  ", " " * rng.randint(3, 9))
    return piece


def _gen_unicode(rng: random.Random) -> str:
    return "".join(_rand_char(rng) if rng.random() < 0.8 else rng.choice(SPACES)
                   for _ in range(rng.randint(1, 40)))


def _gen_numbers(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 8)):
        k = rng.random()
        if k < 0.4:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 30))))
        elif k < 0.7:
            parts.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 9)}f}")
        else:
            parts.append(f"{rng.uniform(0, 1):.3e}")
    return rng.choice([" ", ", ", "\n", "+", " x "]).join(parts)


def build_corpus() -> list[str]:
    rng = random.Random(SEED)
    strings = list(HAND) + list(CODE)
    gens = [_gen_prose] * 4 + [_gen_code] * 3 + [_gen_unicode] * 2 + [_gen_numbers]
    while len(strings) < 360:
        strings.append(rng.choice(gens)(rng))
    # Deterministic, no duplicates, order kept.
    seen, out = set(), []
    for s in strings:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


# --------------------------------------------------------------------------------------------
# Reference tokenizers
# --------------------------------------------------------------------------------------------


def read_gguf_tokenizer(path: Path) -> tuple[str, dict, dict]:
    """Same dicts as transformers' get_gguf_tokenizer(), read with the `gguf` package."""
    import gguf
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING

    reader = gguf.GGUFReader(str(path))
    md = {k: f.contents() for k, f in reader.fields.items()
          if k.startswith("tokenizer.") or k == "general.architecture"}
    arch = md["general.architecture"]
    groups = {g: {name: md[f"tokenizer.{k}"] for k, name in ren.items() if f"tokenizer.{k}" in md}
              for g, ren in GGUF_TOKENIZER_MAPPING.items()}
    td, cfg = groups["tokenizer"], groups["tokenizer_config"]
    if td.get("tokenizer_type") == "llama":
        cfg.setdefault("add_bos_token", True)
    for name, key in {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                      "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}.items():
        i = md.get(f"tokenizer.ggml.{key}")
        cfg[name] = td["tokens"][i] if i is not None else None
    cfg.pop("chat_template", None)
    return arch, td, cfg


def build_reference(name: str):
    from tokenizers import pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    arch, td, cfg = read_gguf_tokenizer(MODELS[name])
    tok, _ = convert_gguf_tokenizer(arch, td)
    if name == "qwen2":
        from tokenizers import normalizers
        assert td["tokenizer_type"] == "gpt2" and td["pre_tokenizer_type"] == "qwen2"
        tok.normalizer = normalizers.NFC()
    if name == "smollm2":
        assert td["tokenizer_type"] == "gpt2" and td["pre_tokenizer_type"] == "smollm"
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    if cfg.get("add_bos_token"):
        bos = cfg["bos_token"]
        tok.post_processor = TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = None
    return tok, bool(cfg.get("add_bos_token"))


def expected_for(name: str, corpus: list[str]) -> dict:
    import tokenizers
    import transformers

    tok, add_bos = build_reference(name)
    cases = []
    for text in corpus:
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        case = {"ids": ids}
        if plain != (ids[1:] if add_bos else ids):
            case["ids_plain"] = plain
        decoded = tok.decode(ids, skip_special_tokens=True)
        if decoded != text:
            case["decoded"] = decoded
        cases.append(case)
    return {
        "model": MODELS[name].name,
        "generator": "tools/reference/gen_tokenizer_fixtures.py",
        "tokenizers_version": tokenizers.__version__,
        "transformers_version": transformers.__version__,
        "add_bos": add_bos,
        "cases": cases,
    }


def _dump(path: Path, obj) -> None:
    # One case per line keeps diffs readable and the files small.
    if isinstance(obj, dict) and "cases" in obj:
        head = {k: v for k, v in obj.items() if k != "cases"}
        lines = [json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [']
        lines += [json.dumps(c, ensure_ascii=False, separators=(",", ":")) + ","
                  for c in obj["cases"]]
        lines[-1] = lines[-1][:-1]
        text = "\n".join(lines) + "\n]}\n"
    else:
        text = json.dumps(obj, ensure_ascii=False, indent=0) + "\n"
    path.write_text(text, encoding="utf-8")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus()
    _dump(OUT / "corpus.json", {"seed": SEED, "strings": corpus})
    print(f"corpus: {len(corpus)} strings, {sum(len(s.encode()) for s in corpus)} bytes")
    for name, path in MODELS.items():
        if not path.exists():
            print(f"skip {name}: {path} missing", file=sys.stderr)
            continue
        exp = expected_for(name, corpus)
        _dump(OUT / f"{name}_expected.json", exp)
        n_tok = sum(len(c["ids"]) for c in exp["cases"])
        print(f"{name}: {n_tok} tokens, {sum('decoded' in c for c in exp['cases'])} decode diffs, "
              f"{sum('ids_plain' in c for c in exp['cases'])} plain diffs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
