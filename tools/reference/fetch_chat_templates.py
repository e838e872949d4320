#!/usr/bin/env python3
"""Copy the chat templates that no default model carries into tests/fixtures/chat/templates.

The Qwen3.5 and Qwen3-Coder templates (the `<tool_call>\\n<function=NAME>\\n<parameter=KEY>`
XML tool-call family) are not in any GGUF that scripts/setup fetches. llama.cpp keeps the
models' own templates, byte for byte as their tokenizer_config.json has them, under
models/templates/, and the llama-cpp-python sdist on PyPI vendors that llama.cpp: this script
downloads the sdist with pip (once, into --sdist-dir; the same one gen_hybrid_gguf.py uses),
checks each file's sha256 and copies it. gen_chat_templates.py then renders them with
transformers like every other template.

Usage: .venv-ref/bin/python tools/reference/fetch_chat_templates.py [--sdist-dir DIR] [--check]
"""
import argparse
import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "fixtures" / "chat" / "templates"
LCP_VERSION = "0.3.36"

# fixture file <- (llama.cpp models/templates/ file, sha256)
FILES = {
    "qwen3_5.jinja": ("Qwen3.5-4B.jinja", "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"),
    "qwen3_coder.jinja": ("Qwen3-Coder.jinja", "d287fb2edf144207f868ae1b282755dc19db2a3f1c5b3a3d57e9e5abffa98392"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist-dir", type=Path, default=ROOT / ".cache" / "lcp")
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args()
    src = args.sdist_dir / f"llama_cpp_python-{LCP_VERSION}" / "vendor" / "llama.cpp" / "models" / "templates"
    if not src.exists():
        args.sdist_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={LCP_VERSION}", "-d", str(args.sdist_dir)], check=True)
        with tarfile.open(args.sdist_dir / f"llama_cpp_python-{LCP_VERSION}.tar.gz") as t:
            t.extractall(args.sdist_dir, filter="data")
    stale = []
    for dst, (name, sha) in FILES.items():
        data = (src / name).read_bytes()
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            sys.exit(f"error: {name}: sha256 {got}, expected {sha}")
        out = TEMPLATES / dst
        if args.check:
            if not out.exists() or out.read_bytes() != data:
                stale.append(dst)
            continue
        out.write_bytes(data)
        print(f"wrote {out.relative_to(ROOT)} ({len(data)} bytes, from llama.cpp models/templates/{name})")
    if stale:
        sys.exit(f"stale: {', '.join(stale)}: re-run without --check")
    if args.check:
        print("templates up to date")


if __name__ == "__main__":
    main()
