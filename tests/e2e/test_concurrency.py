"""Concurrency and lifecycle: many clients at once, clients that go away mid-request, and
every pool back to its baseline afterwards (read from /metrics)."""
from __future__ import annotations

import asyncio
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from hs_server import metric_value

GAUGES = ["hindsight:kv_pages_used", "hindsight:num_requests_running", "hindsight:num_requests_waiting",
          "hindsight:http_requests_active"]


def gauges(server) -> dict[str, float]:
    m = server.metrics()
    return {g: metric_value(m, g) for g in GAUGES}


def aborted(server) -> float:
    return metric_value(server.metrics(), "hindsight:request_success_total", finished_reason="abort")


def wait_for(pred, timeout: float, interval: float = 0.1):
    """Polls pred() until it returns a truthy value or timeout passes; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


# /health and /metrics are not counted in http_requests_active, so an idle server reads 0.
IDLE_ACTIVE = 0


def idle(server, baseline_active: float = IDLE_ACTIVE):
    g = gauges(server)
    ok = (g["hindsight:kv_pages_used"] == 0 and g["hindsight:num_requests_running"] == 0
          and g["hindsight:num_requests_waiting"] == 0 and g["hindsight:http_requests_active"] <= baseline_active)
    return g if ok else None


def test_16_concurrent_streams(server, async_client_factory, model_name):
    n_clients, max_tokens = 16, 16

    async def one(client, i):
        stream = await client.chat.completions.create(
            model=model_name, messages=[{"role": "user", "content": f"Tell me fact number {i} about owls."}],
            max_tokens=max_tokens, temperature=0.7, seed=i, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        text, finish, usage, n_chunks = "", None, None, 0
        async for ch in stream:
            n_chunks += 1
            if ch.usage is not None:
                usage = ch.usage
            for c in ch.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        return text, finish, usage, n_chunks

    async def main():
        client = async_client_factory()
        try:
            return await asyncio.gather(*(one(client, i) for i in range(n_clients)))
        finally:
            await client.close()

    t0 = time.monotonic()
    results = asyncio.run(main())
    elapsed = time.monotonic() - t0
    prompt_tokens = set()
    for text, finish, usage, n_chunks in results:
        assert finish == "length"
        assert usage is not None
        assert usage.completion_tokens == max_tokens
        assert usage.total_tokens == usage.prompt_tokens + max_tokens
        assert n_chunks >= 3
        assert text
        prompt_tokens.add(usage.prompt_tokens)
    assert len(results) == n_clients
    assert all(p > 10 for p in prompt_tokens)
    print(f"16 streams x {max_tokens} tokens in {elapsed:.2f} s")
    assert wait_for(lambda: idle(server), 10), gauges(server)


def _stream_and_drop(server, body: dict, path: str, after_chunks: int) -> int:
    """Opens a streaming request on its own connection, reads `after_chunks` data events,
    then closes the connection. Returns the number of data events read."""
    got = 0
    with httpx.Client(base_url=server.base_url, headers=server.auth, timeout=60) as c:
        with c.stream("POST", path, json=body) as r:
            assert r.status_code == 200, r.read()[:300]
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got += 1
                    if got >= after_chunks:
                        break
    return got


def test_disconnect_mid_stream_cancels(server):
    assert wait_for(lambda: idle(server), 10), gauges(server)
    aborted0 = aborted(server)
    body = {"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    assert _stream_and_drop(server, body, "/v1/completions", 2) == 2
    t0 = time.monotonic()
    g = wait_for(lambda: idle(server), 5)
    assert g, f"not idle 5 s after the client left: {gauges(server)}"
    print(f"cancelled and idle {time.monotonic() - t0:.2f} s after the disconnect")
    assert aborted(server) == aborted0 + 1


def test_disconnect_non_stream_cancels(server):
    assert wait_for(lambda: idle(server), 10), gauges(server)
    aborted0 = aborted(server)
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.base_url + "/v1/chat/completions", headers=server.auth, timeout=httpx.Timeout(60, read=0.5),
                   json={"messages": [{"role": "user", "content": "Talk."}], "max_tokens": 3000, "ignore_eos": True})
    g = wait_for(lambda: idle(server), 5)
    assert g, f"not idle 5 s after the client left: {gauges(server)}"
    assert aborted(server) == aborted0 + 1


def test_200_request_lifecycle(server, model_name):
    """200 mixed requests, 16 at a time: valid (stream and not), malformed, invalid, cancelled
    mid-stream or mid-wait. Afterwards every pool is back at its baseline."""
    assert wait_for(lambda: idle(server), 10), gauges(server)
    base = gauges(server)
    aborted0 = aborted(server)
    rng = random.Random(2024)
    kinds = ["chat", "chat_stream", "completion", "completion_stream", "bad_json", "bad_param", "too_long",
             "no_auth", "unknown_model", "cancel_stream", "cancel_stream", "cancel_wait", "n2_stream"]
    plan = [kinds[i % len(kinds)] for i in range(200)]
    rng.shuffle(plan)
    url = server.base_url

    def run(i: int, kind: str) -> tuple[str, bool, str]:
        mt = random.Random(i).randint(1, 8)
        msgs = [{"role": "user", "content": f"Request {i}: say something short."}]
        try:
            if kind in ("chat", "completion"):
                path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
                body = {"max_tokens": mt, "temperature": 0.5, "seed": i}
                body.update({"messages": msgs} if kind == "chat" else {"prompt": f"Request {i}:"})
                r = httpx.post(url + path, json=body, headers=server.auth, timeout=120)
                j = r.json()
                ok = r.status_code == 200 and 1 <= j["usage"]["completion_tokens"] <= mt
                return kind, ok, r.text[:200]
            if kind in ("chat_stream", "completion_stream", "n2_stream"):
                chat = kind == "chat_stream"
                n = 2 if kind == "n2_stream" else 1
                path = "/v1/chat/completions" if chat else "/v1/completions"
                body = {"max_tokens": mt, "stream": True, "n": n, "ignore_eos": True,
                        "stream_options": {"include_usage": True}}
                body.update({"messages": msgs} if chat else {"prompt": f"Request {i}:"})
                usage, done, finishes = None, False, 0
                with httpx.stream("POST", url + path, json=body, headers=server.auth, timeout=120) as r:
                    if r.status_code != 200:
                        return kind, False, r.read().decode()[:200]
                    for line in r.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        data = line[6:]
                        if data == "[DONE]":
                            done = True
                            continue
                        ch = json.loads(data)
                        if ch.get("usage"):
                            usage = ch["usage"]
                        finishes += sum(1 for c in ch["choices"] if c.get("finish_reason"))
                ok = done and usage is not None and usage["completion_tokens"] == n * mt and finishes == n
                return kind, ok, str(usage)
            if kind == "bad_json":
                r = httpx.post(url + "/v1/chat/completions", content=b'{"messages": [}', headers=server.auth,
                               timeout=30)
                return kind, r.status_code == 400, r.text[:200]
            if kind == "bad_param":
                body = {"messages": msgs, "temperature": "hot" if i % 2 else -1}
                r = httpx.post(url + "/v1/chat/completions", json=body, headers=server.auth, timeout=30)
                return kind, r.status_code == 400 and r.json()["error"]["param"] == "temperature", r.text[:200]
            if kind == "too_long":
                body = {"prompt": "x", "max_tokens": 5000}
                r = httpx.post(url + "/v1/completions", json=body, headers=server.auth, timeout=30)
                return kind, r.status_code == 400, r.text[:200]
            if kind == "no_auth":
                r = httpx.post(url + "/v1/completions", json={"prompt": "x"}, timeout=30)
                return kind, r.status_code == 401, r.text[:200]
            if kind == "unknown_model":
                r = httpx.post(url + "/v1/completions", json={"prompt": "x", "model": "nope"},
                               headers=server.auth, timeout=30)
                return kind, r.status_code == 404, r.text[:200]
            if kind == "cancel_stream":
                chat = i % 2 == 0
                body = {"max_tokens": 1000, "ignore_eos": True, "stream": True}
                body.update({"messages": msgs} if chat else {"prompt": f"Request {i}:"})
                got = _stream_and_drop(server, body, "/v1/chat/completions" if chat else "/v1/completions", 2)
                return kind, got == 2, ""
            if kind == "cancel_wait":
                try:
                    httpx.post(url + "/v1/completions", headers=server.auth,
                               json={"prompt": f"Request {i}:", "max_tokens": 1000, "ignore_eos": True},
                               timeout=httpx.Timeout(60, read=0.4))
                except httpx.TimeoutException:
                    return kind, True, ""
                return kind, False, "completed before the client gave up"
            raise AssertionError(kind)
        except Exception as e:  # noqa: BLE001 - reported below
            return kind, False, f"{type(e).__name__}: {e}"

    t0 = time.monotonic()
    results = []
    with ThreadPoolExecutor(16) as pool:
        for start in range(0, len(plan), 16):
            batch = list(enumerate(plan))[start:start + 16]
            results += list(pool.map(lambda a: run(*a), batch))
    elapsed = time.monotonic() - t0
    failures = [(k, msg) for k, ok, msg in results if not ok]
    assert not failures, f"{len(failures)} of 200 failed: {failures[:10]}"
    assert server.alive()

    g = wait_for(lambda: idle(server, base["hindsight:http_requests_active"]), 10)
    assert g, f"pools not back to baseline: now {gauges(server)}, baseline {base}"
    assert g["hindsight:kv_pages_used"] == 0
    assert g["hindsight:num_requests_running"] == 0
    assert g["hindsight:num_requests_waiting"] == 0
    assert g["hindsight:http_requests_active"] == base["hindsight:http_requests_active"]
    n_cancel = sum(1 for k in plan if k.startswith("cancel"))
    assert aborted(server) - aborted0 == n_cancel
    print(f"200 mixed requests in {elapsed:.1f} s; {n_cancel} cancelled")
