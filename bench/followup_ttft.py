#!/usr/bin/env python3
"""Follow-up latency on a long cached context (issue 14, point 7), with no dependency beyond
aiohttp (the lent GPU machine has it, and no network).

An agent asks a new question about the same huge context: the context (--context tokens) is sent
once (streamed /v1/completions, max_tokens 1: its prefill), then --followups times the same
context plus a new --question-tokens question, each asking for --osl tokens. For every request:
the time to the first streamed token (TTFT) and the server's usage (prompt tokens and
prompt_tokens_details.cached_tokens: what its prefix cache reused). With hindsight's synthetic
dummy vocabulary (`--load-format dummy`, no --vocab) one prompt byte is one token, so the
context is --context random lowercase letters; with a real tokenizer the counts are approximate
and the server's usage is what the table reports.

Prints a markdown table and, with --json, writes the rows. Exits non-zero when a request fails.

Usage: followup_ttft.py --url http://127.0.0.1:8080 [--context 262144] [--question-tokens 100]
                        [--followups 3] [--osl 8] [--json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import string
import sys
import time

import aiohttp


async def served_model(session: aiohttp.ClientSession, url: str, key: str | None) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with session.get(f"{url}/v1/models", headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"GET /v1/models: HTTP {r.status}")
        return (await r.json())["data"][0]["id"]


async def one(session: aiohttp.ClientSession, url: str, model: str, prompt: str, max_tokens: int,
              key: str | None) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    t0 = time.perf_counter()
    ttft = None
    usage = None
    async with session.post(f"{url}/v1/completions", json=body, headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:300]}")
        async for raw in r.content:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ev.get("choices") and ttft is None and ev["choices"][0].get("text"):
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                usage = ev["usage"]
    total = time.perf_counter() - t0
    usage = usage or {}
    return {"ttft_s": ttft if ttft is not None else total, "total_s": total,
            "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens")}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--context", type=int, default=262144, help="context tokens (dummy vocabulary: bytes)")
    ap.add_argument("--question-tokens", type=int, default=100)
    ap.add_argument("--followups", type=int, default=3)
    ap.add_argument("--osl", type=int, default=8, help="tokens each follow-up generates")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds a request may take")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    rnd = random.Random(a.seed)
    context = "".join(rnd.choice(string.ascii_lowercase) for _ in range(a.context))
    rows = []
    timeout = aiohttp.ClientTimeout(total=a.timeout)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        try:
            model = await served_model(s, a.url, a.api_key)
            first = await one(s, a.url, model, context, 1, a.api_key)
            rows.append({"request": "context (prefill)", **first})
            for i in range(a.followups):
                q = "".join(rnd.choice(string.ascii_lowercase) for _ in range(a.question_tokens))
                r = await one(s, a.url, model, context + q, a.osl, a.api_key)
                rows.append({"request": f"follow-up {i + 1}", **r})
        except Exception as e:  # noqa: BLE001 - report what failed and stop
            print(f"request failed: {e}", file=sys.stderr)
            return 1

    print("| request | prompt tokens | cached tokens | TTFT s | total s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['request']} | {r['prompt_tokens']} | {r['cached_tokens']} | {r['ttft_s']:.3f} | {r['total_s']:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"context": a.context, "question_tokens": a.question_tokens, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
