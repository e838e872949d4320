"""Fresh random blocks every run: hindsight's dequantizer vs gguf-python, bit for bit.

Generates new random blocks of every supported GGML type (new seed each run, printed on
failure; set HS_DEQUANT_SEED to replay), writes them as records
([u32 type][u64 n_elems][u64 n_bytes][bytes]) to a temp file, runs
`hs_unit_tests --gtest_filter=QuantRandom.FromEnv` (HS_UNIT_TESTS, default
build/bin/hs_unit_tests) to dequantize them, and compares with `gguf.quants.dequantize`.

Block types get random bytes with random finite fp16 scale fields (the same generator as
the committed fixture, tools/reference/gen_quant_fixtures.py). F16 and BF16 also cover all
65536 bit patterns each. Equality is bitwise; the only relaxation is for NaN outputs of the
scalar types, which must be NaN of the same sign and payload up to the quiet bit (numpy may
convert fp16 with hardware that quiets signaling NaNs).
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools/reference"))
import gen_quant_fixtures as gen  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402

UNIT_TESTS = Path(os.environ.get("HS_UNIT_TESTS", ROOT / "build/bin/hs_unit_tests"))


def _cases(rng: np.random.Generator):
    cases = list(gen.make_cases(rng, blocks_32=4096, blocks_k=1024, scalars=8192))
    all16 = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
    cases += [(T.F16, 1 << 16, all16), (T.BF16, 1 << 16, all16)]
    # Short rows (one block) of every block type.
    for qtype in gen.BLOCK_TYPES:
        block_size, _ = gen.GGML_QUANT_SIZES[qtype]
        cases.append((qtype, block_size, gen.random_blocks(rng, qtype, 1).reshape(-1)))
    return cases


def _nan_key(bits: np.ndarray) -> np.ndarray:
    """Sign + payload with the quiet bit cleared (float32 bits)."""
    return bits & np.uint32(0xFFBFFFFF)


def test_dequant_matches_gguf_python_on_fresh_random_blocks(tmp_path: Path):
    if not UNIT_TESTS.exists():
        pytest.skip(f"{UNIT_TESTS} not built (set HS_UNIT_TESTS)")
    seed = int(os.environ.get("HS_DEQUANT_SEED", secrets.randbits(63)))
    print(f"HS_DEQUANT_SEED={seed}")
    rng = np.random.default_rng(seed)
    cases = _cases(rng)

    in_path, out_path = tmp_path / "blocks.bin", tmp_path / "floats.bin"
    with in_path.open("wb") as f:
        for qtype, n_elems, data in cases:
            f.write(gen.record_head(qtype, n_elems, data.size) + data.tobytes())
    env = dict(os.environ, HS_DEQUANT_IN=str(in_path), HS_DEQUANT_OUT=str(out_path))
    proc = subprocess.run([str(UNIT_TESTS), "--gtest_filter=QuantRandom.FromEnv"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"seed {seed}\n{proc.stdout}\n{proc.stderr}"
    assert "[  PASSED  ] 1 test" in proc.stdout, f"FromEnv did not run:\n{proc.stdout}"

    got_all = np.fromfile(out_path, dtype=np.uint32)
    assert got_all.size == sum(n for _, n, _ in cases), f"seed {seed}: output size"
    failures = []
    pos = 0
    for qtype, n_elems, data in cases:
        got = got_all[pos:pos + n_elems]
        pos += n_elems
        want = gen.reference(qtype, data).view(np.uint32)
        wantf, gotf = want.view(np.float32), got.view(np.float32)
        nan = np.isnan(wantf)
        if qtype in gen.BLOCK_TYPES:
            assert not nan.any(), f"seed {seed}: reference produced NaN for {qtype.name}"
        bad = (got != want) & ~nan
        bad |= nan & ~(np.isnan(gotf) & (_nan_key(got) == _nan_key(want)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            failures.append(f"{qtype.name} x{n_elems}: {int(bad.sum())} differ; first at {i}: "
                            f"got {gotf[i]!r} (0x{got[i]:08x}) want {wantf[i]!r} (0x{want[i]:08x})")
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
