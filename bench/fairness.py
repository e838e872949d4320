#!/usr/bin/env python3
"""Prefill fairness: does a 16K-token prefill stall the streams that are already decoding?

The target (the serving issue): while a 16K-token prompt is being prefilled, the p99
inter-token latency of 4 running streams stays within 3x their p99 without it.

1. Starts `hindsight serve` (--max-model-len 20000 -c 40000; --prefill-cost-ratio passed
   through when given, e.g. 0 = token budget only).
2. Opens 4 streaming /v1/completions requests (ignore_eos, large max_tokens, logprobs 0 so
   every engine step yields one SSE event) and timestamps each event on arrival.
3. After a warm-up, records a baseline window (--baseline-s) of the 4 streams' ITLs.
4. Sends one ~16K-token prompt (max_tokens 1, streamed so its TTFT is measured) and records
   the 4 streams' ITLs from its send until its response ends. Gaps overlapping that window
   count for it; gaps entirely inside the baseline window count for the baseline.
   A second baseline window follows the prefill (the streams are then as deep as during it);
   the baseline is both windows together.
5. Closes the streams, prints a table (p50/p90/p99/max ITL baseline vs during prefill, the p99
   ratio, the big prompt's TTFT) and writes JSON.

Standard library + httpx; run with .venv or .venv-bench (bench/serve.sh fairness ...).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/e2e"))
from hs_server import DEFAULT_MODEL, ServerProcess, hs_bin  # noqa: E402

API_KEY = "bench-key"
WORDS = ("river mountain lantern copper violet thunder meadow silver harbor orchard falcon marble "
         "canyon ember glacier willow saffron pepper orbit quartz bramble cinder dune fjord grove "
         "hollow isle juniper kelp lagoon mesa nettle oasis prairie quarry reef summit tundra "
         "valley wharf yarrow zephyr anchor beacon compass drift estuary ferry gale horizon").split()


def percentile(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def make_prompt(srv: ServerProcess, target_tokens: int, seed: int) -> tuple[str, int]:
    """Random words sized with /tokenize to about target_tokens."""
    rng = random.Random(seed)

    def text(n_words):
        r = random.Random(rng.random())
        return "Document:\n" + " ".join(r.choice(WORDS) for _ in range(n_words)) + "\nSummarize the document."
    n_words = target_tokens
    for _ in range(6):
        t = text(n_words)
        n = len(srv.tokenize(t))
        if abs(n - target_tokens) <= max(8, target_tokens // 500):
            return t, n
        n_words = max(1, int(n_words * target_tokens / n))
    return t, n


class Stream(threading.Thread):
    """One streaming completion; `times` are the arrival times of its SSE data events."""

    def __init__(self, srv: ServerProcess, idx: int, max_tokens: int):
        super().__init__(daemon=True)
        self.srv, self.idx, self.max_tokens = srv, idx, max_tokens
        self.times: list[float] = []
        self.stop = threading.Event()
        self.error: str | None = None

    def run(self):
        body = {"prompt": f"Story {self.idx}: Once upon a time, in a faraway land,", "max_tokens": self.max_tokens,
                "ignore_eos": True, "stream": True, "temperature": 0.8, "seed": self.idx, "logprobs": 0}
        try:
            with httpx.Client(base_url=self.srv.base_url, headers=self.srv.auth, timeout=httpx.Timeout(600)) as c:
                with c.stream("POST", "/v1/completions", json=body) as r:
                    if r.status_code != 200:
                        self.error = f"status {r.status_code}: {r.read()[:200]!r}"
                        return
                    for line in r.iter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            self.times.append(time.perf_counter())
                        if self.stop.is_set():
                            break
        except Exception as e:  # noqa: BLE001
            if not self.stop.is_set():
                self.error = f"{type(e).__name__}: {e}"


def gaps(times: list[float], t0: float, t1: float, overlap: bool) -> list[float]:
    """Inter-arrival gaps within [t0, t1] (overlap=False) or overlapping it (overlap=True)."""
    out = []
    for a, b in zip(times, times[1:]):
        if overlap:
            if a < t1 and b > t0:
                out.append(b - a)
        elif a >= t0 and b <= t1:
            out.append(b - a)
    return out


def stats(xs: list[float]) -> dict:
    ms = [x * 1e3 for x in xs]
    return {"n": len(ms), "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90),
            "p99_ms": percentile(ms, 99), "max_ms": max(ms) if ms else None,
            "mean_ms": sum(ms) / len(ms) if ms else None}


def trial(srv: ServerProcess, args, big_prompt: str, n_big: int, trial_no: int) -> dict:
    streams = [Stream(srv, 4 * trial_no + i, args.stream_max_tokens) for i in range(args.streams)]
    for s in streams:
        s.start()
    # warm-up: every stream has produced some tokens
    deadline = time.monotonic() + 120
    while any(len(s.times) < args.warmup_tokens for s in streams):
        if time.monotonic() > deadline or any(s.error for s in streams):
            raise RuntimeError("streams did not start: " + "; ".join(str(s.error) for s in streams))
        time.sleep(0.02)
    b0 = time.perf_counter()
    time.sleep(args.baseline_s)
    b1 = time.perf_counter()

    # the big prompt, streamed: TTFT = first data event, done = end of the response
    t_send = time.perf_counter()
    t_first = None
    usage = None
    body = {"prompt": big_prompt, "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0}
    with httpx.Client(base_url=srv.base_url, headers=srv.auth, timeout=httpx.Timeout(1800)) as c:
        with c.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"big prompt: status {r.status_code}: {r.read()[:300]!r}")
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ch = json.loads(line[6:])
                if ch.get("choices") and t_first is None:
                    t_first = time.perf_counter()
                if ch.get("usage"):
                    usage = ch["usage"]
    t_done = time.perf_counter()
    # A second baseline window after the prefill: the streams are now as deep as they were
    # while it ran (decode steps slow down with context), so "without it" is measured both at
    # the streams' starting depth and at their final depth.
    time.sleep(0.3)  # the gap that spans the end of the prefill closes
    a0 = time.perf_counter()
    time.sleep(args.baseline_s)
    a1 = time.perf_counter()
    for s in streams:
        s.stop.set()
    for s in streams:
        s.join(30)
    errors = [s.error for s in streams if s.error]
    if errors:
        raise RuntimeError("stream failed: " + "; ".join(errors))
    if any(s.times and s.times[-1] < a1 for s in streams):
        print("[fairness] warning: a stream ended before the prefill did (raise --stream-max-tokens)",
              file=sys.stderr)

    base_before = [g for s in streams for g in gaps(s.times, b0, b1, overlap=False)]
    base_after = [g for s in streams for g in gaps(s.times, a0, a1, overlap=False)]
    base = base_before + base_after
    during = [g for s in streams for g in gaps(s.times, t_send, t_done, overlap=True)]
    tokens_during = sum(1 for s in streams for t in s.times if t_send < t <= t_done)
    bs, ds = stats(base), stats(during)
    ratio = ds["p99_ms"] / bs["p99_ms"] if bs["p99_ms"] and ds["p99_ms"] else None
    return {
        "trial": trial_no, "big_prompt_tokens": (usage or {}).get("prompt_tokens", n_big),
        "big_cached_tokens": ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens"),
        "big_ttft_s": (t_first - t_send) if t_first else None, "big_e2e_s": t_done - t_send,
        "baseline_window_s": (b1 - b0) + (a1 - a0), "baseline": bs, "during_prefill": ds,
        "baseline_before": stats(base_before), "baseline_after": stats(base_after),
        "stream_tokens_during_prefill": tokens_during,
        "streams_tok_s_during_prefill": tokens_during / (t_done - t_send),
        "streams_tok_s_baseline": bs["n"] / ((b1 - b0) + (a1 - a0)) if bs["n"] else None,
        "p99_ratio": ratio, "pass_3x": ratio is not None and ratio <= 3.0,
    }


def fmt(v, nd=1):
    return "—" if v is None else f"{v:.{nd}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--bin", type=Path, default=None)
    ap.add_argument("--prompt-tokens", type=int, default=16000, help="size of the big prompt")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--stream-max-tokens", type=int, default=5000,
                    help="max_tokens of each running stream (must outlast baseline + prefill)")
    ap.add_argument("--baseline-s", type=float, default=5.0)
    ap.add_argument("--warmup-tokens", type=int, default=16)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--prefill-cost-ratio", type=float, default=None, help="passed to the server (0: budget only)")
    ap.add_argument("--max-num-batched-tokens", type=int, default=None, help="passed to the server")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-model-len", type=int, default=20000)
    ap.add_argument("--ctx", type=int, default=40000)
    ap.add_argument("--server-arg", action="append", default=[], help="extra server flag (repeatable)")
    ap.add_argument("--seed", type=int, default=None, help="big prompt seed (default: time)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    # Every stream's KV plus the big prompt's must fit in -c, or the engine preempts.
    room = (args.ctx - args.prompt_tokens - 512) // args.streams - 64
    if room < 256:
        sys.exit(f"--ctx {args.ctx} leaves too little KV for {args.streams} streams beside the big prompt")
    args.stream_max_tokens = min(args.stream_max_tokens, args.max_model_len - 64, room)

    server_args = ["--max-model-len", str(args.max_model_len), "-c", str(args.ctx),
                   "--max-num-seqs", str(max(8, args.streams + 1))]
    if args.prefill_cost_ratio is not None:
        server_args += ["--prefill-cost-ratio", str(args.prefill_cost_ratio)]
    if args.max_num_batched_tokens is not None:
        server_args += ["--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    server_args += args.server_arg
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or ROOT / f"bench/results/fairness-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    srv = ServerProcess(server_args, binary=args.bin or hs_bin(), model=args.model, api_key=API_KEY,
                        served_model_name="hindsight-bench", threads=args.threads, log_dir=str(out.parent))
    print(f"[fairness] starting {' '.join(srv.cmd)}", file=sys.stderr)
    srv.start(timeout=300)
    trials = []
    try:
        seed = args.seed if args.seed is not None else int(time.time())
        for i in range(args.trials):
            prompt, n = make_prompt(srv, args.prompt_tokens, seed + i)  # a new prompt: no prefix-cache hits
            print(f"[fairness] trial {i}: big prompt {n} tokens", file=sys.stderr)
            trials.append(trial(srv, args, prompt, n, i))
    except Exception:
        print(srv.log_tail(30), file=sys.stderr)
        raise
    finally:
        srv.stop()

    result = {"target": "p99 ITL of running streams during a 16K prefill <= 3x their baseline p99",
              "model": str(args.model), "server_cmd": srv.cmd, "prefill_cost_ratio": args.prefill_cost_ratio,
              "streams": args.streams, "time": stamp, "trials": trials, "server_log": srv.log_path}
    out.write_text(json.dumps(result, indent=2) + "\n")

    ratio_s = "default" if args.prefill_cost_ratio is None else f"{args.prefill_cost_ratio:g}"
    print(f"\n### prefill fairness — {args.model.name}, {args.streams} streams, prefill-cost-ratio {ratio_s}\n")
    print("| trial | big prompt tok | big TTFT (s) | ITL baseline p50 / p90 / p99 / max (ms) | "
          "ITL during prefill p50 / p90 / p99 / max (ms) | p99 ratio | streams' tok/s (sum) base → during | ≤ 3x |")
    print("|" + "---|" * 8)
    for t in trials:
        b, d = t["baseline"], t["during_prefill"]
        q = lambda s: " / ".join(fmt(s[k]) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))  # noqa: E731
        print(f"| {t['trial']} | {t['big_prompt_tokens']} | {fmt(t['big_ttft_s'], 2)} | {q(b)} | {q(d)} | "
              f"{fmt(t['p99_ratio'], 2)} | {fmt(t['streams_tok_s_baseline'])} → {fmt(t['streams_tok_s_during_prefill'])} | "
              f"{'yes' if t['pass_3x'] else 'NO'} |")
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
