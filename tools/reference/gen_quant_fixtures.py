#!/usr/bin/env python3
"""Generate tests/fixtures/quant/dequant_cases.bin: random GGML blocks + gguf-python floats.

The reference is `gguf.quants.dequantize` (gguf-py, the package llama.cpp's converters
use), which for every type here reproduces ggml's dequantize_row_* arithmetic in float32.

Block bytes are random, except the fp16 scale/min fields, which are random *finite* halves
(half the blocks: any finite bit pattern incl. subnormals and zero; the other half:
realistic magnitudes) so outputs carry no NaN/inf noise. The F16/BF16/F32 records are
random bit patterns and do include inf/NaN/subnormals: those conversions are pure bit
widenings, compared bitwise.

File format (little-endian), shared with the QuantRandom.FromEnv input format:
    header:  b"HSDQ" | u32 version=1 | u32 n_records
    record:  u32 ggml_type | u64 n_elems | u64 n_bytes | bytes[n_bytes] | f32[n_elems]
(the FromEnv input file has no header and no f32 payload: just the record heads + bytes).

Usage: .venv/bin/python tools/reference/gen_quant_fixtures.py [--out PATH] [--seed N]
"""
from __future__ import annotations

import argparse
import struct
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# Byte offsets of the fp16 fields inside one block (ggml-common.h layouts).
FP16_FIELDS: dict[T, tuple[int, ...]] = {
    T.Q4_0: (0,),
    T.Q4_1: (0, 2),
    T.Q5_0: (0,),
    T.Q5_1: (0, 2),
    T.Q8_0: (0,),
    T.Q4_K: (0, 2),
    T.Q5_K: (0, 2),
    T.Q6_K: (208,),
}
BLOCK_TYPES = list(FP16_FIELDS)
SCALAR_TYPES = [T.F32, T.F16, T.BF16]

MAGIC = b"HSDQ"
VERSION = 1


def random_finite_halves(rng: np.random.Generator, n: int, realistic: bool) -> np.ndarray:
    """n random finite fp16 values as uint16 bits."""
    if realistic:
        mag = rng.standard_normal(n) * 10.0 ** rng.uniform(-5, 0, n)
        return mag.astype(np.float16).view(np.uint16)
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    bad = (bits & 0x7C00) == 0x7C00  # exponent all ones: inf / NaN
    bits[bad] &= np.uint16(0xBFFF)  # clear the top exponent bit -> finite
    return bits


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    """[n_blocks][type_size] uint8 with sane fp16 fields."""
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        half = np.concatenate([
            random_finite_halves(rng, n_blocks // 2, realistic=False),
            random_finite_halves(rng, n_blocks - n_blocks // 2, realistic=True),
        ])
        blocks[:, off:off + 2] = half.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def random_scalar_bytes(rng: np.random.Generator, qtype: T, n_elems: int) -> np.ndarray:
    """Random bit patterns (incl. inf/NaN/subnormals) for F32/F16/BF16, as uint8."""
    width = {T.F32: 4, T.F16: 2, T.BF16: 2}[qtype]
    raw = rng.integers(0, 256, n_elems * width, dtype=np.uint8)
    if qtype in (T.F16, T.BF16):
        specials = {
            T.F16: [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00,
                    0x7C01, 0x7E00, 0xFFFF, 0x8001, 0x3C00, 0xBC00],
            T.BF16: [0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x7F7F, 0x7F80, 0xFF80,
                     0x7F81, 0x7FC0, 0xFFFF, 0x3F80],
        }[qtype]
        view = raw.view(np.uint16)
        view[: len(specials)] = np.array(specials, dtype=np.uint16)
    return raw


def reference(qtype: T, data: np.ndarray) -> np.ndarray:
    out = dequantize(data, qtype)
    return np.ascontiguousarray(out, dtype=np.float32).reshape(-1)


def make_cases(rng: np.random.Generator, blocks_32: int, blocks_k: int, scalars: int):
    """Yields (qtype, n_elems, data_uint8) for every supported type."""
    for qtype in SCALAR_TYPES:
        yield qtype, scalars, random_scalar_bytes(rng, qtype, scalars)
    for qtype in BLOCK_TYPES:
        block_size, _ = GGML_QUANT_SIZES[qtype]
        n_blocks = blocks_k if block_size == 256 else blocks_32
        yield qtype, n_blocks * block_size, random_blocks(rng, qtype, n_blocks).reshape(-1)


def record_head(qtype: T, n_elems: int, n_bytes: int) -> bytes:
    return struct.pack("<IQQ", int(qtype), n_elems, n_bytes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[2]
    ap.add_argument("--out", type=Path, default=root / "tests/fixtures/quant/dequant_cases.bin")
    ap.add_argument("--seed", type=int, default=20240613)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    cases = list(make_cases(rng, blocks_32=12, blocks_k=6, scalars=1024))
    # One more single-block record per block type (the smallest legal row).
    for qtype in BLOCK_TYPES:
        block_size, _ = GGML_QUANT_SIZES[qtype]
        cases.append((qtype, block_size, random_blocks(rng, qtype, 1).reshape(-1)))

    out = bytearray(MAGIC + struct.pack("<II", VERSION, len(cases)))
    for qtype, n_elems, data in cases:
        ref = reference(qtype, data)
        assert ref.size == n_elems, (qtype, ref.size, n_elems)
        if qtype not in SCALAR_TYPES:
            assert np.all(np.isfinite(ref)), qtype
        out += record_head(qtype, n_elems, data.size) + data.tobytes() + ref.tobytes()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(bytes(out))
    print(f"wrote {args.out} ({len(out)} bytes, {len(cases)} records)")


if __name__ == "__main__":
    main()
