"""Sparse attention through the server: `hindsight serve --sparse sketch` (a random sketch
basis, so no fitted file is needed) answers like the dense server when the budget covers the
context, and with a small budget it selects and fetches chunks through the device tier
(/metrics counts them) and gives every page, lease and hot slot back afterwards."""
from __future__ import annotations

import json
import random
import time

from hs_server import metric_value

SPARSE_ARGS = ["-c", "8192", "--max-model-len", "4096", "--max-num-seqs", "4", "--sparse", "sketch",
               "--sketch", "random", "--sparse-min-context", "0", "--sparse-window", "64"]


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


def _greedy(srv, prompt: list[int], max_tokens: int) -> dict:
    status, _, body = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                                   "ignore_eos": True, "logprobs": 1}, timeout=300)
    assert status == 200, body
    return json.loads(body)


def _tokens(resp: dict) -> list[str]:
    return resp["choices"][0]["logprobs"]["tokens"]


def test_budget_covering_context_answers_like_dense(server, start_server):
    prompt = _prompt(700, 1)
    dense = _greedy(server, prompt, 12)
    sparse_srv = start_server(SPARSE_ARGS + ["--sparse-budget", "8192"])
    sparse = _greedy(sparse_srv, prompt, 12)
    assert _tokens(sparse) == _tokens(dense)
    assert sparse["choices"][0]["text"] == dense["choices"][0]["text"]


def test_small_budget_fetches_and_returns_everything(start_server):
    srv = start_server(SPARSE_ARGS + ["--sparse-budget", "64", "--device-kv-budget", str(64 << 20)])
    before = srv.metrics()
    for i in range(3):
        resp = _greedy(srv, _prompt(600 + 100 * i, 10 + i), 16)
        assert resp["usage"]["completion_tokens"] == 16
    deadline = time.monotonic() + 30
    while True:
        m = srv.metrics()
        idle = (metric_value(m, "hindsight:num_requests_running") == 0
                and metric_value(m, "hindsight:kv_pages_used") == 0
                and metric_value(m, "hindsight:kv_leases_live") == 0)
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert idle, m
    fetched = (metric_value(m, "hindsight:kv_fetch_hits_total") + metric_value(m, "hindsight:kv_fetch_misses_total")
               - metric_value(before, "hindsight:kv_fetch_hits_total")
               - metric_value(before, "hindsight:kv_fetch_misses_total"))
    assert fetched > 0  # the decode steps selected chunks and went through the hot slots
    assert metric_value(m, "hindsight:kv_fetch_bytes_total") > 0
    assert metric_value(m, "hindsight:kv_cache_usage_perc", tier="device") == 0  # every slot freed with its lease
