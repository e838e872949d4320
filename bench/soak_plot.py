#!/usr/bin/env python3
"""Draws bench/soak.py's samples: RSS, open fds, threads, the pools and the machine's load
average over time, one panel each, with the summary (requests by kind, failed valid requests) as the title.
Usage: soak_plot.py samples.jsonl out.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows, summary = [], {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "summary" in d:
        summary = d
    else:
        rows.append(d)
t = [r["t"] / 60 for r in rows]
panels = [("rss_kb", "RSS (MB)", 1 / 1024), ("fds", "open fds", 1), ("threads", "threads", 1),
          ("num_requests_running", "running / waiting", 1), ("kv_pages_used", "KV pages used / cached", 1),
          ("http_requests_active", "HTTP requests active", 1)]
if any("load1" in r for r in rows):
    panels.append(("load1", "machine load (1 min)", 1))  # other work on the machine shows here
fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.0 * len(panels)), sharex=True)
for ax, (key, label, scale) in zip(axes, panels):
    ax.plot(t, [r.get(key, float("nan")) * scale for r in rows], marker=".")
    if key == "num_requests_running":
        ax.plot(t, [r.get("num_requests_waiting", float("nan")) for r in rows], marker=".")
    if key == "kv_pages_used":
        ax.plot(t, [r.get("kv_pages_cached", float("nan")) for r in rows], marker=".")
    ax.set_ylabel(label, fontsize=8)
    ax.grid(alpha=0.3)
axes[-1].set_xlabel("minutes")
ok = sum(v for k, v in summary.get("summary", {}).items() if k.endswith(":ok"))
fig.suptitle(f"hindsight soak: {ok} requests answered as expected, {summary.get('valid_failed', '?')} valid failed",
             fontsize=10)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=90)
