#!/usr/bin/env python3
"""Soak test (issue 17, deliverable 4): 16 concurrent mixed clients against a running
`hindsight serve` for --duration seconds, sampling the server process and its pools every
--sample seconds.

Clients (each loops, picking one kind at random; weights in KINDS): streamed chat, plain chat,
streamed completion, a stream cancelled after a few chunks (the client closes the connection),
invalid requests (malformed JSON, unknown field types, an over-long prompt, a wrong method), and
long prompts (~--long-tokens words). A valid request counts as failed when it does not end with
200 and a complete answer; an invalid one when it is not a 4xx with a JSON error body.

Samples (one JSON object per line in --out): time, RSS (kB), open fds and threads of --pid (from
/proc), the machine's 1-minute load average (other work on the machine shows), and from /metrics:
requests running / waiting, KV pages used / cached, active HTTP requests, leases. At the end a
summary line: requests by kind and outcome, failed valid requests.
bench/soak_plot.py draws the samples (PNG). Needs only httpx (in .venv).

Usage: soak.py --url http://127.0.0.1:8080 --pid PID [--duration 3600] [--sample 60] [--clients 16] --out FILE
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import time

import httpx

KINDS = [("chat_stream", 4), ("chat", 2), ("completion_stream", 2), ("cancel", 2), ("invalid", 2), ("long", 1)]
GAUGES = ["num_requests_running", "num_requests_waiting", "kv_pages_used", "kv_pages_cached", "http_requests_active",
          "kv_leases_live"]


def proc_sample(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss_kb"] = int(line.split()[1])
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    with open("/proc/loadavg") as f:
        out["load1"] = float(f.read().split()[0])  # the machine's, so other work during the soak shows
    return out


async def metrics_sample(client: httpx.AsyncClient) -> dict:
    text = (await client.get("/metrics", timeout=10)).text
    out = {}
    for g in GAUGES:
        m = re.search(r"^hindsight:%s(?:\{[^}]*\})? ([0-9.e+-]+)$" % g, text, re.M)
        if m:
            out[g] = float(m.group(1))
    return out


def words(n: int, rng: random.Random) -> str:
    vocab = ["alpha", "beta", "gamma", "delta", "kernel", "thread", "buffer", "token", "cache", "page"]
    return " ".join(rng.choice(vocab) for _ in range(n))


async def one_request(client: httpx.AsyncClient, kind: str, rng: random.Random, args) -> bool:
    """True when the server answered as it should."""
    msg = [{"role": "user", "content": "Write one sentence about " + words(3, rng)}]
    if kind in ("chat_stream", "cancel", "long"):
        if kind == "long":
            msg = [{"role": "user", "content": words(args.long_tokens, rng) + "\nSummarize the text above."}]
        body = {"messages": msg, "max_tokens": 48 if kind != "cancel" else 200, "stream": True,
                "stream_options": {"include_usage": True}}
        chunks, done = 0, False
        async with client.stream("POST", "/v1/chat/completions", json=body, timeout=300) as r:
            if r.status_code != 200:
                return False
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    chunks += 1
                    if line == "data: [DONE]":
                        done = True
                    if kind == "cancel" and chunks >= 3:
                        return True  # leaving the block closes the connection mid-stream
        return done
    if kind == "chat":
        r = await client.post("/v1/chat/completions", json={"messages": msg, "max_tokens": 32}, timeout=300)
        return r.status_code == 200 and bool(r.json()["choices"][0]["message"].get("content") is not None)
    if kind == "completion_stream":
        body = {"prompt": "def " + words(2, rng).replace(" ", "_") + "(", "max_tokens": 32, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body, timeout=300) as r:
            if r.status_code != 200:
                return False
            return any([line == "data: [DONE]" async for line in r.aiter_lines()])
    # invalid: one of four, each must be a 4xx with a JSON error
    which = rng.randrange(4)
    if which == 0:
        r = await client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    elif which == 1:
        r = await client.post("/v1/chat/completions", json={"messages": "nope", "max_tokens": -3})
    elif which == 2:
        r = await client.post("/v1/completions", json={"prompt": words(args.too_long_words, rng), "max_tokens": 8})
    else:
        r = await client.put("/v1/chat/completions", json={})
    try:
        ok_body = "error" in r.json()
    except ValueError:
        ok_body = False
    return 400 <= r.status_code < 500 and ok_body


async def client_loop(i: int, url: str, stop: float, stats: dict, args) -> None:
    rng = random.Random(1000 + i)
    kinds = [k for k, w in KINDS for _ in range(w)]
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        while time.time() < stop:
            kind = rng.choice(kinds)
            try:
                ok = await one_request(client, kind, rng, args)
            except (httpx.HTTPError, KeyError, ValueError) as e:
                ok = False
                stats.setdefault("errors", []).append(f"{kind}: {type(e).__name__}: {e}"[:200])
            key = f"{kind}:{'ok' if ok else 'failed'}"
            stats[key] = stats.get(key, 0) + 1


async def sampler(url: str, pid: int, t0: float, stop: float, period: float, out) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        while True:
            s = {"t": round(time.time() - t0, 1), **proc_sample(pid)}
            try:
                s.update(await metrics_sample(client))
            except httpx.HTTPError as e:
                s["metrics_error"] = str(e)[:100]
            out.write(json.dumps(s) + "\n")
            out.flush()
            if time.time() >= stop:
                return
            await asyncio.sleep(min(period, max(0.0, stop - time.time())))


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--duration", type=float, default=3600)
    ap.add_argument("--sample", type=float, default=60)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--long-tokens", type=int, default=1500)
    ap.add_argument("--too-long-words", type=int, default=40000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    t0 = time.time()
    stop = t0 + args.duration
    stats: dict = {}
    with open(args.out, "w") as out:
        tasks = [client_loop(i, args.url, stop, stats, args) for i in range(args.clients)]
        await asyncio.gather(sampler(args.url, args.pid, t0, stop, args.sample, out), *tasks)
        # Settle: one more sample once the last requests have drained.
        await asyncio.sleep(2)
        await sampler(args.url, args.pid, t0, time.time(), args.sample, out)
        valid_failed = sum(v for k, v in stats.items() if k.endswith(":failed") and not k.startswith("invalid"))
        summary = {"summary": {k: v for k, v in stats.items() if k != "errors"}, "valid_failed": valid_failed,
                   "errors": stats.get("errors", [])[:20]}
        out.write(json.dumps(summary) + "\n")
    print(json.dumps(summary, indent=1))
    return 0 if valid_failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
