#!/usr/bin/env python3
"""Code points HF `tokenizers` classifies differently from this machine's PCRE2.

The byte-level pre-tokenizers use \\p{L}, \\p{N} and \\s. HF `tokenizers` evaluates them with
Oniguruma (and Digits with Rust's char::is_numeric), which carry a newer Unicode version than
Debian 12's PCRE2 10.42 (Unicode 14): letters and digits assigned in Unicode 15-17 (CJK Ext. H/I,
Egyptian Hieroglyphs Ext. A, Garay, Kawi digits, ...) would otherwise split differently. This
script classifies every code point both ways and prints the ranges to ADD to PCRE2's classes,
as C++ string constants for src/tokenizer/pretokenizer.cpp (kExtraL, kExtraN, kExtraDigits).
Only additions can be patched into a `[\\p{L}...]` class; the script fails if HF ever drops a
code point PCRE2 has.

Run from the repository root:  .venv/bin/python tools/reference/gen_unicode_class_patch.py
Needs: tokenizers, and libpcre2-8 (loaded with ctypes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

from tokenizers import Regex, pre_tokenizers

N_CP = 0x110000
SURROGATES = range(0xD800, 0xE000)
WS = r"\t\n\x0B\f\r\x{85}\p{Z}"  # what pretokenizer.cpp spells for Oniguruma's \s


def all_cps() -> list[int]:
    return [cp for cp in range(N_CP) if cp not in SURROGATES]


def hf_class(pattern: str | None) -> set[int]:
    """Code points matched by an Oniguruma class (or by Digits when pattern is None)."""
    cps = all_cps()
    out: set[int] = set()
    if pattern is None:
        pt = pre_tokenizers.Digits(individual_digits=True)
        for k in range(0, len(cps), 20000):
            # 'a' separators: numeric chars come back as one-char pieces of their own.
            s = "a".join(chr(c) for c in cps[k:k + 20000])
            out |= {ord(p) for p, _ in pt.pre_tokenize_str(s) if len(p) == 1 and p != "a"}
        return out
    pt = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    for k in range(0, len(cps), 20000):
        chunk = cps[k:k + 20000]
        kept = {ord(ch) for p, _ in pt.pre_tokenize_str("".join(map(chr, chunk))) for ch in p}
        out |= set(chunk) - kept
    return out


def pcre2_class(pattern: str) -> set[int]:
    lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8") or "libpcre2-8.so.0")
    lib.pcre2_compile_8.restype = ctypes.c_void_p
    lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                    ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t),
                                    ctypes.c_void_p]
    lib.pcre2_match_data_create_8.restype = ctypes.c_void_p
    lib.pcre2_match_data_create_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
    lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p,
                                  ctypes.c_void_p]
    PCRE2_UTF, PCRE2_UCP = 0x00080000, 0x00020000
    err, off = ctypes.c_int(), ctypes.c_size_t()
    pat = f"^{pattern}$".encode()
    code = lib.pcre2_compile_8(pat, len(pat), PCRE2_UTF | PCRE2_UCP, ctypes.byref(err),
                               ctypes.byref(off), None)
    assert code, f"pcre2_compile failed: {err.value}"
    md = lib.pcre2_match_data_create_8(4, None)
    out = set()
    for cp in all_cps():
        b = chr(cp).encode()
        if lib.pcre2_match_8(code, b, len(b), 0, 0, md, None) >= 0:
            out.add(cp)
    return out


def ranges(cps: set[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def spell(rs: list[tuple[int, int]]) -> list[str]:
    return [f"\\\\x{{{a:X}}}" if a == b else f"\\\\x{{{a:X}}}-\\\\x{{{b:X}}}" for a, b in rs]


def main() -> int:
    pairs = {
        "kExtraL": (hf_class(r"\p{L}"), pcre2_class(r"\p{L}")),
        "kExtraN": (hf_class(r"\p{N}"), pcre2_class(r"\p{N}")),
        "kExtraDigits": (hf_class(None), pcre2_class(r"\p{N}")),
    }
    ws_hf, ws_pcre = hf_class(r"\s"), pcre2_class(f"[{WS}]")
    if ws_hf != ws_pcre:
        print(f"whitespace differs: {sorted(ws_hf ^ ws_pcre)}", file=sys.stderr)
        return 1
    for name, (hf, pc) in pairs.items():
        if pc - hf:
            print(f"{name}: PCRE2 has {len(pc - hf)} code points HF lacks; cannot patch by union",
                  file=sys.stderr)
            return 1
        rs = ranges(hf - pc)
        lines, line = [], ""
        for item in spell(rs):
            if len(line) + len(item) > 88:
                lines.append(line)
                line = ""
            line += item
        lines.append(line)
        print(f"// {len(rs)} ranges, {len(hf - pc)} code points")
        print(f"constexpr const char* {name} =")
        print("\n".join(f'    "{x}"' for x in lines) + ";")
    return 0


if __name__ == "__main__":
    sys.exit(main())
