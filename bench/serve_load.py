#!/usr/bin/env python3
"""Serving load test with no dependency beyond aiohttp: drives a running OpenAI-compatible
server (hindsight serve, or any other) with streaming /v1/completions requests at several
concurrencies and prints TTFT, TPOT, ITL p50/p99 and throughput as a markdown table and JSON.

For machines where aiperf (bench/serve_bench.py) cannot be installed — the lent GPU machine has
python3 with aiohttp and no network. Each level runs `--requests-per-level x concurrency`
requests after a warm-up of `concurrency` requests; every request asks for exactly --osl tokens
(ignore_eos) after a prompt of --isl tokens: with hindsight's synthetic dummy vocabulary
(`--load-format dummy`, no --vocab) one prompt byte is one token, so the prompt is --isl
random lowercase letters; with a real tokenizer the count is approximate and the server's
`usage.prompt_tokens` is reported instead.

Metrics (vLLM's names): TTFT = time from sending to the first streamed token; TPOT = (latency -
TTFT) / (output tokens - 1) per request; ITL = the gap between consecutive streamed chunks
carrying text; throughput = output tokens of the level / its wall time.

Usage: serve_load.py --url http://127.0.0.1:8080 [--concurrency 1,8,32,64] [--isl 512] [--osl 128]
                     [--requests-per-level 2] [--json FILE]
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


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def one_request(session: aiohttp.ClientSession, url: str, model: str, isl: int, osl: int, rng: random.Random,
                      api_key: str | None) -> dict:
    prompt = "".join(rng.choice(string.ascii_lowercase) for _ in range(isl))
    body = {"model": model, "prompt": prompt, "max_tokens": osl, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    t0 = time.perf_counter()
    chunks: list[float] = []
    usage = None
    async with session.post(f"{url}/v1/completions", json=body, headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:300]}")
        buf = b""
        async for data in r.content.iter_any():
            buf += data
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if not line.startswith(b"data: "):
                        continue
                    payload = line[6:].strip()
                    if payload == b"[DONE]":
                        continue
                    msg = json.loads(payload)
                    if msg.get("usage"):
                        usage = msg["usage"]
                    if any(c.get("text") for c in msg.get("choices", [])):
                        chunks.append(time.perf_counter())
    t1 = time.perf_counter()
    if not chunks:
        raise RuntimeError("no text streamed")
    out_tokens = usage["completion_tokens"] if usage else len(chunks)
    ttft = chunks[0] - t0
    return {"ttft": ttft, "latency": t1 - t0, "out_tokens": out_tokens,
            "prompt_tokens": usage["prompt_tokens"] if usage else isl,
            "tpot": (chunks[-1] - chunks[0]) / (out_tokens - 1) if out_tokens > 1 else float("nan"),
            "itl": [b - a for a, b in zip(chunks, chunks[1:])]}


async def run_level(url: str, model: str, conc: int, n_requests: int, isl: int, osl: int, api_key: str | None,
                    seed: int) -> dict:
    rng = random.Random(seed)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def worker(n: int, results: list):
            for _ in range(n):
                results.append(await one_request(session, url, model, isl, osl, rng, api_key))

        warm: list = []
        await asyncio.gather(*(worker(1, warm) for _ in range(conc)))
        results: list = []
        per = max(1, n_requests // conc)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(per, results) for _ in range(conc)))
        wall = time.perf_counter() - t0
    itl = [x for r in results for x in r["itl"]]
    out = sum(r["out_tokens"] for r in results)
    return {"concurrency": conc, "requests": len(results), "isl": isl, "osl": osl,
            "prompt_tokens_mean": sum(r["prompt_tokens"] for r in results) / len(results),
            "ttft_ms": {"p50": 1e3 * pct([r["ttft"] for r in results], 50),
                        "p99": 1e3 * pct([r["ttft"] for r in results], 99)},
            "tpot_ms": {"p50": 1e3 * pct([r["tpot"] for r in results], 50),
                        "p99": 1e3 * pct([r["tpot"] for r in results], 99)},
            "itl_ms": {"p50": 1e3 * pct(itl, 50), "p99": 1e3 * pct(itl, 99)},
            "output_tokens_per_second": out / wall, "wall_s": wall}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--isl", type=int, default=512)
    ap.add_argument("--osl", type=int, default=128)
    ap.add_argument("--requests-per-level", type=int, default=2, help="requests per level = this x concurrency")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    model = a.model
    if not model:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{a.url}/v1/models") as r:
                model = (await r.json())["data"][0]["id"]
    levels = []
    for c in [int(x) for x in a.concurrency.split(",") if x]:
        lv = await run_level(a.url, model, c, a.requests_per_level * c, a.isl, a.osl, a.api_key, 1234 + c)
        levels.append(lv)
        print(f"[serve_load] concurrency {c}: {lv['output_tokens_per_second']:.0f} tok/s", file=sys.stderr, flush=True)
    print(f"\nmodel {model}, prompt {a.isl} tokens, {a.osl} generated (ignore_eos), streaming /v1/completions\n")
    print("| concurrency | requests | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | ITL p50 ms | ITL p99 ms "
          "| output tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lv in levels:
        print(f"| {lv['concurrency']} | {lv['requests']} | {lv['ttft_ms']['p50']:.1f} | {lv['ttft_ms']['p99']:.1f} | "
              f"{lv['tpot_ms']['p50']:.2f} | {lv['tpot_ms']['p99']:.2f} | {lv['itl_ms']['p50']:.2f} | "
              f"{lv['itl_ms']['p99']:.2f} | {lv['output_tokens_per_second']:.0f} |")
    result = {"url": a.url, "model": model, "levels": levels}
    print("\n" + json.dumps(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
