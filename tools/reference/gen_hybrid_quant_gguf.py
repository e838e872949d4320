"""Quantized GGUFs of the tiny hybrid fixtures, as llama.cpp's llama-quantize would write them.

Reads tests/fixtures/hybrid/<model>-tiny/<model>-tiny-bf16.gguf (llama.cpp's converter output,
gen_hybrid_gguf.py) and writes <model>-tiny-<type>.gguf beside it with every tensor llama-quantize
quantizes turned into Q8_0 or Q4_0 by gguf-py's reference quantizer (gguf.quants.quantize, the
ggml formulas). Which tensors: llama-quantize's rules (src/llama-quant.cpp): names ending in
"weight" with >= 2 dims, except "_norm.weight", "ffn_gate_inp.weight" (the router) and
"ssm_conv1d.weight" (small 2-D conv weights); a tensor whose rows are not a whole number of
32-element blocks stays as it is. 1-D tensors (ssm_a, ssm_dt.bias, norms) stay F32. The metadata
is copied, with general.file_type set to the ftype. Beside it, <model>-tiny-<type>.json: for every
quantized tensor, gguf-py's own dequantization of the bytes written (sum and sum of squares in
double, the first 8 values), which the C++ test compares with hindsight's reading of the file. (llama-quantize's non-"pure" mixes would
pick other types for some tensors at Q4_0, e.g. the output at Q6_K; these files are the pure
mix, which exercises each hybrid tensor in the quantized type.)

Usage: .venv/bin/python tools/reference/gen_hybrid_quant_gguf.py [--model qwen35|qwen3next] [--type q8_0|q4_0]
"""
import argparse
import json
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "hybrid"
FTYPE = {"q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0), "q4_0": (QT.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0)}


def quantizes(name: str, shape) -> bool:
    return (name.endswith("weight") and len(shape) >= 2 and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name and "ssm_conv1d.weight" not in name and int(shape[0]) % 32 == 0)


def as_float32(t) -> np.ndarray:
    """The tensor's values as f32, numpy shape [.., ne1, ne0]."""
    shape = tuple(int(x) for x in reversed(t.shape))
    if t.tensor_type == QT.F32:
        return np.asarray(t.data, dtype=np.float32).reshape(shape)
    if t.tensor_type == QT.BF16:
        bits = np.asarray(t.data).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    if t.tensor_type == QT.F16:
        return np.asarray(t.data).view(np.float16).astype(np.float32).reshape(shape)
    raise SystemExit(f"{t.name}: unexpected type {t.tensor_type.name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["qwen35", "qwen3next"], default="qwen35")
    ap.add_argument("--type", choices=sorted(FTYPE), default="q8_0")
    args = ap.parse_args()
    qtype, ftype = FTYPE[args.type]
    src = FIXTURES / f"{args.model}-tiny" / f"{args.model}-tiny-bf16.gguf"
    out = src.with_name(f"{args.model}-tiny-{args.type}.gguf")
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = ftype if key == "general.file_type" else field.contents()
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY and len(field.types) > 1 else None
        w.add_key_value(key, value, field.types[0], sub_type=sub)
    n_q = 0
    sums = {}
    for t in r.tensors:
        x = as_float32(t)
        if quantizes(t.name, t.shape):
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(t.name, q, raw_shape=gguf.quants.quant_shape_to_byte_shape(x.shape, qtype), raw_dtype=qtype)
            d = gguf.quants.dequantize(q, qtype).astype(np.float64).ravel()
            sums[t.name] = {"sum": float(d.sum()), "sumsq": float((d * d).sum()), "first": [float(v) for v in d[:8]],
                            "n": int(d.size)}
            n_q += 1
        elif t.tensor_type == QT.F32:
            w.add_tensor(t.name, x)
        else:  # kept in its 16-bit type
            raw = np.frombuffer(np.asarray(t.data).tobytes(), dtype=np.uint8)
            w.add_tensor(t.name, raw, raw_shape=gguf.quants.quant_shape_to_byte_shape(x.shape, t.tensor_type),
                         raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out.with_suffix(".json").write_text(json.dumps({"type": args.type, "tensors": sums}, indent=1) + "\n")
    print(f"wrote {out}: {n_q} of {len(r.tensors)} tensors in {args.type}")


if __name__ == "__main__":
    main()
