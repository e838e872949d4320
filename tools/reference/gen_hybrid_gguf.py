"""The tiny Qwen3.5 fixture as a GGUF, written by llama.cpp's own converter.

Runs convert_hf_to_gguf.py from the llama.cpp that the llama-cpp-python sdist on PyPI vendors
(the version bench/vs-llamacpp.sh uses) on tests/fixtures/hybrid/qwen35-tiny (made by
gen_hybrid_golden.py) with --outtype bf16, so the GGUF holds the same bf16 values as the
safetensors file. The fixture has no tokenizer: the converter's set_vocab is replaced by its
_set_vocab_none (tokenizer model "none") and --no-mtp is passed (it has no MTP head); everything else (names, the 1 + w norms, -exp(A_log),
the V-head reorder, the MRoPE sections) is the converter's. The C++ golden test loads both
files and asserts the same logits, so the safetensors loader and the GGUF loader cannot drift
from llama.cpp's layout.

Usage: .venv-ref/bin/python tools/reference/gen_hybrid_gguf.py [--model qwen35|qwen3next] [--sdist-dir DIR]
  (downloads llama-cpp-python==0.3.36's sdist with pip into DIR, default .cache/lcp, once)
"""
import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "hybrid"
LCP_VERSION = "0.3.36"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist-dir", type=Path, default=ROOT / ".cache" / "lcp")
    ap.add_argument("--model", choices=["qwen35", "qwen3next"], default="qwen35")
    ap.add_argument("--outfile", type=Path, help="default: the fixture's <name>-bf16.gguf")
    args = ap.parse_args()
    src = args.sdist_dir / f"llama_cpp_python-{LCP_VERSION}" / "vendor" / "llama.cpp"
    if not src.exists():
        args.sdist_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={LCP_VERSION}", "-d", str(args.sdist_dir)], check=True)
        with tarfile.open(args.sdist_dir / f"llama_cpp_python-{LCP_VERSION}.tar.gz") as t:
            t.extractall(args.sdist_dir, filter="data")
    sys.path.insert(0, str(src))
    sys.path.insert(1, str(src / "gguf-py"))
    import convert_hf_to_gguf as conv  # noqa: E402
    from conversion.qwen import Qwen3_5TextModel, Qwen3NextModel  # noqa: E402

    model_class = Qwen3_5TextModel if args.model == "qwen35" else Qwen3NextModel
    model_class.set_vocab = lambda self: self._set_vocab_none()
    fixture = FIXTURES / f"{args.model}-tiny"
    out = args.outfile or fixture / f"{args.model}-tiny-bf16.gguf"
    sys.argv = ["convert_hf_to_gguf.py", str(fixture), "--outtype", "bf16", "--no-mtp", "--outfile", str(out)]
    conv.main()
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
