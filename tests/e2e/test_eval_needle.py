"""`hindsight eval needle` end to end on SmolLM2 (small context, a random sketch basis): the
JSON has every configuration; a budget covering the context answers exactly like dense
(every answer identical, mass recall 1); with a small budget no selector keeps more softmax
mass than the best selection of its size (the mass oracle of the same steps), with and
without the exact rerank of a shortlist, whether the question is prefilled or decoded; a bad
selector spec is refused. On the tiny hybrid qwen35 (2 full-attention layers of 8): `fit-sketch`
fits a basis for its KV layers only, and `eval needle` runs with it (the haystack's recurrent
state forked from a checkpoint for every question): a covering budget answers like dense, a
small one keeps no more mass than the oracle, per KV layer."""
from __future__ import annotations

import json
import subprocess

import pytest

from hs_server import ROOT, hs_bin, hs_model

TINY_HYBRID = ROOT / "tests/fixtures/hybrid/qwen35-tiny"


@pytest.mark.parametrize("question", ["prefill", "decode"])
def test_eval_needle_small(tmp_path, question):
    if not hs_model().is_file():
        pytest.skip(f"model {hs_model()} is absent (run scripts/setup)")
    out = tmp_path / "eval.json"
    cmd = [str(hs_bin()), "eval", "needle", "-m", str(hs_model()), "--context", "2048", "--needles", "3",
           "--budgets", "256", "4096", "--selectors", "sketch", "quest", "sketch+mass", "quest+rerank4", "sketch+f16+res1",
           "sketch+max+norerank+pages256", "sketch+max+rerank4+pages1024", "--sketch", "random",
           "--answer-tokens", "10", "--question", question, "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| 2048 | dense |" in proc.stdout
    result = json.loads(out.read_text())
    configs = {c["config"]: c for c in result["contexts"][0]["configs"]}
    assert set(configs) == {"dense"} | {f"{s}@{b}" for s in ("sketch", "quest", "sketch+mass", "quest+rerank4",
                                                                  "sketch+f16+res1", "sketch+max+norerank+pages256",
                                                                  "sketch+max+rerank4+pages1024")
                                        for b in (256, 4096)}
    for name, c in configs.items():
        assert c["total"] == 3 and 0 <= c["correct"] <= 3, name
        if name == "dense" or name.endswith("@4096"):  # budget ≥ context: dense attention exactly
            assert c["same_as_dense"] == 3 and c["same_number_as_dense"] == 3, name
            assert all(r == pytest.approx(1.0) for r in c["mass_recall_per_layer"]), name
        else:
            recall, oracle = c["mass_recall_per_layer"], c["oracle_mass_recall_per_layer"]
            assert len(recall) == 30 and len(oracle) == 30, name
            for layer, (r, o) in enumerate(zip(recall, oracle)):
                assert 0.0 < r <= o + 1e-6, f"{name} layer {layer}: recall {r} above the mass oracle {o}"


def test_eval_needle_refuses_unknown_selector_modifier():
    if not hs_model().is_file():
        pytest.skip(f"model {hs_model()} is absent (run scripts/setup)")
    proc = subprocess.run([str(hs_bin()), "eval", "needle", "-m", str(hs_model()), "--context", "2048",
                           "--needles", "2", "--selectors", "sketch+fast"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "unknown modifier 'fast'" in proc.stderr
    # A residual bound needs f16 sketches (the default is int8): a clear refusal, not a crash.
    proc = subprocess.run([str(hs_bin()), "eval", "needle", "-m", str(hs_model()), "--context", "2048",
                           "--needles", "2", "--selectors", "sketch+res1", "--sketch", "random"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "--sparse-residual needs f16 sketches" in proc.stderr


def test_fit_sketch_and_eval_needle_on_a_hybrid_model(tmp_path):
    sketch = tmp_path / "q35.sketch.safetensors"
    fit = subprocess.run([str(hs_bin()), "fit-sketch", "-m", str(TINY_HYBRID), "--vocab", "synthetic",
                          "--corpus", str(ROOT / "README.md"), "--window", "512", "--rank", "32", "-o", str(sketch)],
                         capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stderr[-2000:]
    assert "| 1 |" in fit.stdout and "| 2 |" not in fit.stdout  # the 2 KV layers, not the 8 layers
    out = tmp_path / "eval.json"
    proc = subprocess.run([str(hs_bin()), "eval", "needle", "-m", str(TINY_HYBRID), "--vocab", "synthetic",
                           "--corpus", str(ROOT / "README.md"), "--context", "2048", "--needles", "3",
                           "--budgets", "128", "4096", "--selectors", "sketch", "quest", "--sketch", str(sketch),
                           "--sparse-window", "64", "--answer-tokens", "6", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    configs = {c["config"]: c for c in json.loads(out.read_text())["contexts"][0]["configs"]}
    assert set(configs) == {"dense", "sketch@128", "sketch@4096", "quest@128", "quest@4096"}
    for name, c in configs.items():
        if name == "dense":
            continue
        recall, oracle = c["mass_recall_per_layer"], c["oracle_mass_recall_per_layer"]
        assert len(recall) == 2 and len(oracle) == 2, name
        if name.endswith("@4096"):
            assert c["same_as_dense"] == 3, name
            assert all(r == pytest.approx(1.0) for r in recall), name
        else:
            for layer, (r, o) in enumerate(zip(recall, oracle)):
                assert 0.0 < r <= o + 1e-6, f"{name} layer {layer}: recall {r} above the mass oracle {o}"
