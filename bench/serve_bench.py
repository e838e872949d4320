#!/usr/bin/env python3
"""Serving benchmark: start `hindsight serve`, drive it with NVIDIA aiperf at several
concurrencies, print a markdown table (TTFT, TPOT, ITL p50/p90/p99, throughput), write JSON.

aiperf (PyPI `aiperf`, run from .venv-bench; bench/serve.sh installs it) sends streaming chat
requests with synthetic prompts of --isl tokens and asks for --osl tokens each (ignore_eos, so
every request generates exactly --osl). Its tokenizer is rebuilt offline from the GGUF
(bench/hf_tokenizer.py). Per concurrency level it runs --requests-per-level x concurrency
requests after a warm-up of `concurrency` requests.

Metric names follow aiperf: TTFT = time to the first token; ITL = aiperf's inter_token_latency
= (request latency - TTFT) / (output tokens - 1) per request, which is vLLM's TPOT; "ICL" =
aiperf's inter_chunk_latency, the gap between consecutive streamed chunks (vLLM's ITL).

Usage: serve_bench.py [--model GGUF] [--concurrency 1,4,8,16] [--isl 256] [--osl 128] ...
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/e2e"))
from hs_server import DEFAULT_MODEL, ServerProcess, hs_bin  # noqa: E402

API_KEY = "bench-key"


def find_aiperf() -> str:
    here = Path(sys.executable).parent / "aiperf"
    if here.exists():
        return str(here)
    found = shutil.which("aiperf")
    if not found:
        sys.exit("aiperf not found: run bench/serve.sh (it installs aiperf into .venv-bench)")
    return found


def tokenizer_dir(model: Path) -> str:
    out = ROOT / ".cache/hf-tokenizer" / model.stem
    r = subprocess.run([sys.executable, str(ROOT / "bench/hf_tokenizer.py"), str(model), str(out)],
                       capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if r.returncode != 0:
        print(f"[bench] no HF tokenizer for {model.name} ({r.stderr.strip().splitlines()[-1:]}); "
              "aiperf uses its builtin tokenizer (token counts approximate)", file=sys.stderr)
        return "builtin"
    return str(out)


def metric(stats: dict, name: str) -> dict:
    """aiperf's summary entry for `name` ({"unit", "avg", "p50", "p90", "p99", ...}) or {}."""
    m = stats.get(name)
    if isinstance(m, dict):
        return m
    for rec in stats.get("records", []) if isinstance(stats.get("records"), list) else []:
        if rec.get("tag") == name:
            return rec
    return {}


def to_ms(m: dict, key: str):
    v = m.get(key)
    if v is None:
        return None
    unit = (m.get("unit") or "ms").lower()
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}.get(unit, 1.0)
    return v * scale


def run_level(args, aiperf: str, tok: str, srv: ServerProcess, conc: int, out_dir: Path) -> dict:
    art = out_dir / f"c{conc}"
    if art.exists():
        shutil.rmtree(art)
    n_requests = max(conc, args.requests_per_level * conc)
    cmd = [aiperf, "profile", "--model", srv.served_model_name, "--tokenizer", tok,
           "--url", srv.base_url, "--endpoint-type", args.endpoint_type, "--streaming",
           "--api-key", API_KEY, "--concurrency", str(conc), "--request-count", str(n_requests),
           "--warmup-request-count", str(conc),
           "--synthetic-input-tokens-mean", str(args.isl), "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", str(args.osl), "--output-tokens-stddev", "0",
           "--extra-inputs", json.dumps({"ignore_eos": True, "temperature": 0.7}),
           "--use-server-token-count", "--random-seed", "42",
           "--artifact-dir", str(art), "--ui-type", "none"]
    cmd += args.aiperf_arg
    print(f"[bench] concurrency {conc}: {n_requests} requests", file=sys.stderr)
    t0 = time.monotonic()
    with open(out_dir / f"aiperf-c{conc}.log", "w") as log:
        # not HF_HUB_OFFLINE: aiperf 0.13 then resolves even a local tokenizer dir in the hub cache
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        tail = (out_dir / f"aiperf-c{conc}.log").read_text(errors="replace").splitlines()[-30:]
        raise RuntimeError(f"aiperf failed ({r.returncode}) at concurrency {conc}:\n" + "\n".join(tail))
    summary = next(iter(sorted(art.rglob("profile_export_aiperf.json"))), None)
    if summary is None:
        summary = next(iter(sorted(art.rglob("*aiperf*.json"))), None)
    if summary is None:
        raise RuntimeError(f"no aiperf summary JSON under {art}")
    stats = json.loads(summary.read_text())
    ttft, itl = metric(stats, "time_to_first_token"), metric(stats, "inter_token_latency")
    icl = metric(stats, "inter_chunk_latency")
    done = metric(stats, "completed_request_count").get("avg") or metric(stats, "request_count").get("avg")
    row = {"concurrency": conc, "requests": int(done or 0), "wall_s": round(wall, 1),
           "prompt_tokens_avg": metric(stats, "usage_prompt_tokens").get("avg"),
           "output_tokens_avg": metric(stats, "usage_completion_tokens").get("avg"),
           "cached_prompt_pct": metric(stats, "overall_usage_prompt_cache_read_pct").get("avg")}
    for label, m in (("ttft", ttft), ("tpot", itl), ("icl", icl)):
        for p in ("avg", "p50", "p90", "p99"):
            v = to_ms(m, p)
            row[f"{label}_{p}_ms"] = None if v is None else round(v, 2)
    row["output_tok_s"] = metric(stats, "output_token_throughput").get("avg")
    row["request_s"] = metric(stats, "request_throughput").get("avg")
    errs = stats.get("error_summary") or []
    row["errors"] = (metric(stats, "error_request_count").get("avg")
                     or sum(int(e.get("count", 1)) for e in errs if isinstance(e, dict)) or len(errs))
    row["error_summary"] = errs
    row["summary_file"] = str(summary)
    return row


def fmt(v, nd=1):
    return "—" if v is None else f"{v:.{nd}f}"


def table(rows: list[dict]) -> str:
    head = ("| conc | requests | prompt tok (cached %) | TTFT p50 / p90 / p99 (ms) | TPOT p50 / p90 / p99 (ms) | "
            "ITL (chunk) p50 / p90 / p99 (ms) | output tok/s | req/s | errors |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        trip = lambda k: " / ".join(fmt(r.get(f"{k}_{p}_ms")) for p in ("p50", "p90", "p99"))  # noqa: E731
        lines.append(f"| {r['concurrency']} | {r['requests']} | {fmt(r['prompt_tokens_avg'], 0)} "
                     f"({fmt(r['cached_prompt_pct'], 0)}) | {trip('ttft')} | {trip('tpot')} | {trip('icl')} | "
                     f"{fmt(r['output_tok_s'])} | {fmt(r['request_s'], 2)} | {int(r['errors'] or 0)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--bin", type=Path, default=None, help="hindsight binary (default $HS_BIN or build/bin/hindsight)")
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--requests-per-level", type=int, default=4, help="requests = this x concurrency (min concurrency)")
    ap.add_argument("--isl", type=int, default=256, help="input tokens per request")
    ap.add_argument("--osl", type=int, default=128, help="output tokens per request")
    ap.add_argument("--endpoint-type", default="chat", choices=["chat", "completions"])
    ap.add_argument("--threads", type=int, default=0, help="server -t (0: its default)")
    ap.add_argument("--ctx", type=int, default=65536, help="server -c (KV tokens)")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--server-arg", action="append", default=[], help="extra server flag (repeatable)")
    ap.add_argument("--aiperf-arg", action="append", default=[], help="extra aiperf flag (repeatable)")
    ap.add_argument("--out", type=Path, default=None, help="JSON result (default bench/results/serve-<time>.json)")
    args = ap.parse_args()

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or ROOT / f"bench/results/serve-{stamp}.json"
    work = out.with_suffix("")
    work.mkdir(parents=True, exist_ok=True)
    aiperf = find_aiperf()
    tok = tokenizer_dir(args.model.resolve())
    levels = [int(c) for c in args.concurrency.split(",") if c]

    server_args = ["-c", str(args.ctx), "--max-model-len", str(args.max_model_len),
                   "--max-num-seqs", str(args.max_num_seqs), *args.server_arg]
    srv = ServerProcess(server_args, binary=args.bin or hs_bin(), model=args.model, api_key=API_KEY,
                        served_model_name="hindsight-bench", threads=args.threads, log_dir=str(work))
    print(f"[bench] starting {' '.join(srv.cmd)}", file=sys.stderr)
    srv.start(timeout=300)
    rows = []
    try:
        for c in levels:
            rows.append(run_level(args, aiperf, tok, srv, c, work))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr)
    except Exception:
        print(srv.log_tail(30), file=sys.stderr)
        raise
    finally:
        srv.stop()

    result = {"tool": "aiperf", "aiperf_version": _aiperf_version(aiperf), "model": str(args.model),
              "server_cmd": srv.cmd, "endpoint_type": args.endpoint_type, "isl": args.isl, "osl": args.osl,
              "host": platform.node(), "cpus": os.cpu_count(), "time": stamp, "levels": rows,
              "server_log": srv.log_path, "artifacts": str(work)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n### hindsight serve — {args.model.name}, {args.endpoint_type}, ISL {args.isl}, OSL {args.osl}\n")
    print(table(rows))
    print(f"\nJSON: {out}")
    return 0


def _aiperf_version(aiperf: str) -> str:
    try:
        from importlib.metadata import version
        return version("aiperf")
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    sys.exit(main())
