#!/usr/bin/env python3
"""NFC tables for the qwen2 tokenizer, as HF `tokenizers` normalizes (normalizers.NFC()).

Qwen2's tokenizer (transformers' Qwen2Tokenizer, the published tokenizer.json) runs an NFC
normalizer before its pre-tokenizer; src/tokenizer/unicode_nfc.cpp does the same with the
tables this script writes to src/tokenizer/unicode_nfc_tables.cpp:
  kNfcDecomp  every canonical single-step decomposition cp -> (first, second) (second 0: a
              singleton) that HF knows, flagged when the pair composes back (a primary
              composite: not a composition exclusion, not a singleton, not a non-starter);
  kNfcCcc     ranges of non-zero canonical combining class.
Hangul syllables are algorithmic in both and not listed.

HF's NFC (Rust `unicode-normalization-alignments`) carries an older Unicode than this Python's
`unicodedata`: marks assigned later (U+07FD, U+0898.., ...) are starters (class 0) to HF and
decompositions added later (U+11938) are unknown to it. So the tables start from unicodedata
and keep only what HF's normalizer is seen to do: a class is kept when HF reorders the mark
around probe marks as unicodedata says, a decomposition when HF's NFD applies it. The script
then re-implements NFC over the tables alone (the same algorithm as the C++) and checks it
against HF on every code point, every code point next to probe marks, random strings of marks,
bases and jamo, and the tokenizer corpus; it fails on any difference.

Run from the repository root:  .venv-ref/bin/python tools/reference/gen_unicode_nfc.py
Needs: tokenizers.
"""

from __future__ import annotations

import json
import random
import sys
import unicodedata
from pathlib import Path

from tokenizers import normalizers

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "src" / "tokenizer" / "unicode_nfc_tables.cpp"
CPS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
HF_NFC = normalizers.NFC()
HF_NFD = normalizers.NFD()
S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
N_COUNT, S_COUNT = V_COUNT * T_COUNT, 19 * 21 * 28


def batched(f, strs, size=4000):
    """f over many strings with few calls: join with a starter that nothing composes with."""
    out = []
    for k in range(0, len(strs), size):
        chunk = strs[k:k + size]
        res = f("\n".join(chunk)).split("\n")
        if len(res) != len(chunk):  # a string held a newline of its own: one by one
            res = [f(s) for s in chunk]
        out += res
    return out


def hf_classes() -> dict[int, int]:
    """Non-zero combining classes as HF's NFC orders them."""
    cand = [c for c in CPS if unicodedata.combining(chr(c))]
    low, high = "\u0334", "\u0345"  # classes 1 and 240, in every Unicode version
    strs = []
    for c in cand:
        strs += ["\u2200" + high + chr(c), "\u2200" + chr(c) + low]
    hf = batched(HF_NFC.normalize_str, strs)
    py = [unicodedata.normalize("NFC", s) for s in strs]
    ccc = {}
    for i, c in enumerate(cand):
        if hf[2 * i] == py[2 * i] and hf[2 * i + 1] == py[2 * i + 1]:
            ccc[c] = unicodedata.combining(chr(c))
    return ccc


def hf_decomps() -> dict[int, tuple[int, int, bool]]:
    """cp -> (first, second, composes) for the canonical decompositions HF's NFD applies."""
    cand = []
    for c in CPS:
        if S_BASE <= c < S_BASE + S_COUNT:
            continue
        d = unicodedata.decomposition(chr(c))
        if d and not d.startswith("<"):
            cand.append((c, [int(x, 16) for x in d.split()]))
    nfd = batched(HF_NFD.normalize_str, [chr(c) for c, _ in cand])
    nfc = batched(HF_NFC.normalize_str, [chr(c) for c, _ in cand])
    out = {}
    for (c, parts), d, n in zip(cand, nfd, nfc):
        if d == chr(c):
            continue  # newer than HF's tables
        if d != unicodedata.normalize("NFD", chr(c)):
            sys.exit(f"U+{c:04X}: HF decomposes to {d!r}, unicodedata to a different string")
        composes = len(parts) == 2 and n == chr(c)
        out[c] = (parts[0], parts[1] if len(parts) == 2 else 0, composes)
    return out


class Nfc:
    """NFC from the tables alone: the algorithm of src/tokenizer/unicode_nfc.cpp."""

    def __init__(self, ccc, decomp):
        self.ccc = ccc
        self.decomp = decomp
        self.comp = {(a, b): c for c, (a, b, ok) in decomp.items() if ok}

    def decompose(self, c, out):
        if S_BASE <= c < S_BASE + S_COUNT:
            s = c - S_BASE
            out += [L_BASE + s // N_COUNT, V_BASE + (s % N_COUNT) // T_COUNT]
            if s % T_COUNT:
                out.append(T_BASE + s % T_COUNT)
            return
        d = self.decomp.get(c)
        if d is None:
            out.append(c)
            return
        self.decompose(d[0], out)
        if d[1]:
            self.decompose(d[1], out)

    def compose_pair(self, a, b):
        if L_BASE <= a < L_BASE + L_COUNT and V_BASE <= b < V_BASE + V_COUNT:
            return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT
        if S_BASE <= a < S_BASE + S_COUNT and (a - S_BASE) % T_COUNT == 0 and T_BASE < b < T_BASE + T_COUNT:
            return a + (b - T_BASE)
        return self.comp.get((a, b))

    def __call__(self, s):
        d = []
        for ch in s:
            self.decompose(ord(ch), d)
        # canonical order: stable sort of each run of non-starters by class
        i = 0
        while i < len(d):
            if self.ccc.get(d[i], 0) == 0:
                i += 1
                continue
            j = i
            while j < len(d) and self.ccc.get(d[j], 0):
                j += 1
            d[i:j] = sorted(d[i:j], key=lambda c: self.ccc[c])
            i = j
        out = []
        starter = -1
        last = 0
        for c in d:
            k = self.ccc.get(c, 0)
            if starter >= 0 and (last == 0 and len(out) == starter + 1 or 0 < last < k):
                comp = self.compose_pair(out[starter], c)
                if comp is not None:
                    out[starter] = comp
                    continue
            if k == 0:
                starter = len(out)
            last = k
            out.append(c)
        return "".join(map(chr, out))


def verify(nfc: Nfc) -> int:
    tests = [chr(c) for c in CPS]
    marks = [c for c in CPS if unicodedata.combining(chr(c))][:: 7] + [0x0334, 0x0345, 0x0301, 0x0327, 0x093C]
    for m in [0x0301, 0x0334, 0x0345, 0x0327, 0x0316, 0x05B0, 0x093C, 0x0F71, 0x3099]:
        tests += ["\u2200" + chr(c) + chr(m) for c in CPS if c % 3 == 0 or unicodedata.combining(chr(c))]
        tests += ["\u2200" + chr(m) + chr(c) for c in CPS if c % 3 == 1 or unicodedata.combining(chr(c))]
    rng = random.Random(20250301)
    bases = [0x41, 0x61, 0x45, 0x65, 0x4F, 0x55, 0x43, 0x53, 0x3B1, 0x3C9, 0x415, 0x438, 0x915, 0x9C7, 0xB47,
             0x0BC6, 0x0CC6, 0x0D46, 0x0DD9, 0x1025, 0x1B05, 0x3046, 0x304B, 0x30A6, 0x30AB, 0x1100, 0x1161, 0x11A8,
             0xAC00, 0xAC01, 0x110BA, 0x11131, 0x11347, 0x114B9, 0x115B8, 0x1D157, 0x0308, 0x00E9, 0x212B]
    pool = bases + marks + [0x1161, 0x1175, 0x11A8, 0x11C2, 0x3099, 0x309A, 0x0F72, 0x0F80]
    for _ in range(60000):
        tests.append("".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 8))))
    corpus = json.loads((ROOT / "tests/fixtures/tokenizer/corpus.json").read_text(encoding="utf-8"))["strings"]
    tests += [s for s in corpus if "\n" not in s]
    hf = batched(HF_NFC.normalize_str, tests)
    bad = [(t, h) for t, h in zip(tests, hf) if nfc(t) != h]
    bad += [(s, None) for s in corpus if nfc(s) != HF_NFC.normalize_str(s)]
    for t, h in bad[:10]:
        print(f"mismatch: {t!r}: HF {h!r}, tables {nfc(t)!r}", file=sys.stderr)
    if bad:
        sys.exit(f"{len(bad)} mismatches")
    return len(tests)


def write(ccc, decomp):
    ranges = []
    for c in sorted(ccc):
        if ranges and ranges[-1][1] == c - 1 and ranges[-1][2] == ccc[c]:
            ranges[-1][1] = c
        else:
            ranges.append([c, c, ccc[c]])
    lines = [
        "// tokenizer/unicode_nfc_tables.cpp — generated by tools/reference/gen_unicode_nfc.py; do not edit.",
        "//",
        "// Canonical decompositions and combining classes as HF `tokenizers`' NFC normalizer knows them",
        f"// (checked against it; unicodedata {unicodedata.unidata_version} minus what HF's older tables lack).",
        '#include "tokenizer/unicode_nfc.h"',
        "",
        "namespace hs::tok::nfc_data {",
        "",
        f"// {len(decomp)} decompositions: cp, first, second (0: singleton), composes back (primary composite).",
        f"const Decomp kDecomp[] = {{",
    ]
    items = [f"{{0x{c:X},0x{a:X},0x{b:X},{int(ok)}}}," for c, (a, b, ok) in sorted(decomp.items())]
    for k in range(0, len(items), 6):
        lines.append("    " + "".join(items[k:k + 6]))
    lines += ["};", f"const size_t kDecompCount = sizeof(kDecomp) / sizeof(kDecomp[0]);", "",
              f"// {len(ranges)} ranges of non-zero canonical combining class ({len(ccc)} code points).",
              "const CccRange kCcc[] = {"]
    items = [f"{{0x{a:X},0x{b:X},{k}}}," for a, b, k in ranges]
    for k in range(0, len(items), 7):
        lines.append("    " + "".join(items[k:k + 7]))
    lines += ["};", "const size_t kCccCount = sizeof(kCcc) / sizeof(kCcc[0]);", "",
              "}  // namespace hs::tok::nfc_data", ""]
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(decomp)} decompositions, {len(ranges)} class ranges")


def main() -> int:
    ccc = hf_classes()
    decomp = hf_decomps()
    n = verify(Nfc(ccc, decomp))
    print(f"tables reproduce HF's NFC on {n} strings")
    write(ccc, decomp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
