"""`hindsight serve` on a hybrid Gated-DeltaNet model: the tiny random Qwen3.5 fixture
(tests/fixtures/hybrid/qwen35-tiny, loaded from its Hugging Face directory, with the synthetic
byte-level tokenizer). Concurrent greedy completions equal the same requests sent one at a time,
a follow-up whose prefix is cached reports cached_tokens (restored from a recurrent-state
checkpoint) with the output of a full recompute, and the pools (KV pages, requests, recurrent-state
slots, read from /metrics) are back at baseline afterwards."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hs_server import http, metric_value

TINY = Path(__file__).resolve().parents[2] / "tests/fixtures/hybrid/qwen35-tiny"
ARGS = ["--vocab", "synthetic", "-c", "4096", "--max-model-len", "1024", "--max-num-seqs", "4",
        "--max-num-batched-tokens", "64"]


def complete(srv, prompt: str, max_tokens: int = 16) -> dict:
    status, _, body = http("POST", srv.base_url + "/v1/completions", {
        "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
    }, headers=srv.auth, timeout=120)
    assert status == 200, body[:300]
    import json
    return json.loads(body)


def at_baseline(srv) -> bool:
    m = srv.metrics()
    return all(metric_value(m, g) == 0 for g in
               ("hindsight:kv_pages_used", "hindsight:num_requests_running", "hindsight:num_requests_waiting",
                "hindsight:state_slots_used"))


def wait_baseline(srv, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not at_baseline(srv):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


PROMPTS = ["The quick brown fox jumps over the lazy dog. " * 3, "def f(x):\n    return x * 2\n",
           "hybrid models keep a recurrent state", "0123456789" * 7]


def test_concurrent_equals_alone(start_server):
    # Prefix caching off: each request computes its whole prompt, batched or alone.
    srv = start_server(ARGS + ["--no-prefix-caching"], model=TINY, served_model_name="tiny")
    with ThreadPoolExecutor(len(PROMPTS)) as ex:
        together = list(ex.map(complete, [srv] * len(PROMPTS), PROMPTS))
    alone = [complete(srv, p) for p in PROMPTS]
    for t, a, p in zip(together, alone, PROMPTS):
        assert t["choices"][0]["text"] == a["choices"][0]["text"], p
        assert t["usage"]["completion_tokens"] == 16
    assert wait_baseline(srv)


def test_follow_up_reuses_the_cached_prefix(start_server):
    srv = start_server(ARGS, model=TINY, served_model_name="tiny")
    ref = start_server(ARGS + ["--no-prefix-caching"], model=TINY, served_model_name="tiny")
    first = "You are an agent. Call tools when needed. " * 2  # 86 bytes = 86 tokens
    a = complete(srv, first, 24)
    follow = first + a["choices"][0]["text"] + " and now the tool result: 42."
    b = complete(srv, follow, 12)
    full = complete(ref, follow, 12)
    cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 64, b["usage"]  # at least the first request's prompt checkpoint (80)
    assert cached % 16 == 0 and cached < b["usage"]["prompt_tokens"]
    assert full["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert b["choices"][0]["text"] == full["choices"][0]["text"]
    assert wait_baseline(srv) and wait_baseline(ref)
    m = srv.metrics()
    assert metric_value(m, "hindsight:state_slots_total") == 4
    assert metric_value(m, "hindsight:state_checkpoint_restores_total") >= 1
    assert metric_value(m, "hindsight:state_checkpoints_used") >= 1
    assert metric_value(ref.metrics(), "hindsight:state_checkpoint_restores_total") == 0


def _stream_and_drop(srv, body: dict, after_chunks: int) -> int:
    import httpx
    got = 0
    with httpx.Client(base_url=srv.base_url, headers=srv.auth, timeout=60) as c:
        with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200, r.read()[:300]
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got += 1
                    if got >= after_chunks:
                        break
    return got


def test_disconnects_and_finishes_free_every_state_slot(start_server):
    """Streams dropped by their clients mid-way (cancel), streams that finish, and more requests than
    state slots (queued): afterwards no recurrent-state slot, KV page or request is left."""
    srv = start_server(["--vocab", "synthetic", "-c", "32768", "--max-model-len", "8192", "--max-num-seqs", "4"],
                       model=TINY, served_model_name="tiny")
    long = {"prompt": "agent step ", "max_tokens": 8000, "ignore_eos": True, "stream": True, "temperature": 0}
    short = {"prompt": "agent step ", "max_tokens": 20, "ignore_eos": True, "stream": True, "temperature": 0}
    jobs = [(long, 3)] * 4 + [(short, 10 ** 6)] * 4  # 8 streams for 4 slots
    with ThreadPoolExecutor(len(jobs)) as ex:
        got = list(ex.map(lambda j: _stream_and_drop(srv, *j), jobs))
    assert got[:4] == [3] * 4
    assert all(g >= 20 for g in got[4:]), got  # 20 tokens (+ the final event)
    assert wait_baseline(srv), srv.metrics()
    m = srv.metrics()
    assert metric_value(m, "hindsight:request_success_total", finished_reason="abort") == 4
    assert metric_value(m, "hindsight:request_success_total", finished_reason="length") == 4


def test_checkpoint_directory_with_its_tokenizer(start_server, tmp_path):
    """A Hugging Face directory that carries tokenizer.json is served without --vocab: the ids are
    those HF `tokenizers` gave (tests/fixtures/tokenizer/hf_qwen35_tiny/expected.json) and a chat
    request renders the directory's ChatML template."""
    import json
    import shutil
    tok_dir = TINY.parents[1] / "tokenizer/hf_qwen35_tiny"
    shutil.copy(TINY / "config.json", tmp_path / "config.json")
    (tmp_path / "model.safetensors").symlink_to(TINY / "model.safetensors")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, tmp_path / f)
    srv = start_server(ARGS[2:], model=tmp_path, served_model_name="tiny")
    corpus = json.loads((TINY.parents[1] / "tokenizer/corpus.json").read_text())["strings"]
    expected = json.loads((tok_dir / "expected.json").read_text())["cases"]
    for text, case in list(zip(corpus, expected))[:40]:
        assert srv.tokenize(text) == case["ids"], text
    status, _, body = http("POST", srv.base_url + "/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0,
    }, headers=srv.auth, timeout=120)
    assert status == 200, body[:300]
    usage = json.loads(body)["usage"]
    rendered = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert usage["prompt_tokens"] == len(srv.tokenize(rendered))
    assert wait_baseline(srv)
