"""Graceful shutdown: SIGTERM stops admission (503, /health draining), lets the requests in flight
finish for up to --shutdown-timeout seconds, cancels what is left after it, and exits 0."""
from __future__ import annotations

import json
import signal
import threading
import time

import httpx

from hs_server import http


def _stream(server, body: dict, out: dict, first_chunk: threading.Event) -> None:
    """Reads a streaming completion; out gets the data events and how the stream ended."""
    events: list[dict] = []
    try:
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body, headers=server.auth,
                          timeout=120) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    out["done"] = True
                    break
                events.append(json.loads(data))
                first_chunk.set()
    except httpx.HTTPError as e:
        out["error"] = repr(e)
    out["events"] = events
    first_chunk.set()


def test_sigterm_lets_the_stream_finish(start_server):
    srv = start_server(["--shutdown-timeout", "60"])
    body = {"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    out: dict = {}
    first = threading.Event()
    t = threading.Thread(target=_stream, args=(srv, body, out, first), daemon=True)
    t.start()
    assert first.wait(60), "no first chunk"
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    # Draining: no new work, /health says so, the listener still answers.
    status, _, raw = http("GET", srv.base_url + "/health", timeout=10)
    assert status == 503 and b"draining" in raw, (status, raw[:200])
    status, _, raw = http("POST", srv.base_url + "/v1/completions", body={"prompt": "x", "max_tokens": 2},
                          headers=srv.auth, timeout=10)
    assert status == 503, (status, raw[:200])
    t.join(60)
    assert out.get("done"), out.get("error")
    finishes = [c["finish_reason"] for e in out["events"] for c in e.get("choices", []) if c.get("finish_reason")]
    assert finishes == ["length"], finishes
    usage = [e["usage"] for e in out["events"] if e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 48, usage
    assert srv.proc.wait(30) == 0


def test_shutdown_timeout_cancels_what_is_left(start_server):
    srv = start_server(["--shutdown-timeout", "0.5"])
    body = {"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    out: dict = {}
    first = threading.Event()
    t = threading.Thread(target=_stream, args=(srv, body, out, first), daemon=True)
    t.start()
    assert first.wait(60), "no first chunk"
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(30) == 0
    assert time.monotonic() - t0 < 15, "the drain did not stop at its deadline"
    t.join(30)
    n_tokens = sum(1 for e in out["events"] for c in e.get("choices", []) if c.get("text"))
    assert n_tokens < 3000, "the long request was not cut off"
