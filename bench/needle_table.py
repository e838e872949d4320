#!/usr/bin/env python3
"""bench/needle_table.py JSON... — the recall table of docs/benchmarks.md from `hindsight eval needle --json` files.

One row per (haystack, context): dense correct, then for each sparse configuration its correct count,
same answer / same number as dense, mean mass recall over layers (min layer), the exact best-selection
ceiling of the same budget (oracle mass rule, mean over layers) and the device-tier hit rate.
"""
import json
import sys


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def main():
    print("| haystack | context | dense correct | configuration | correct | same answer as dense | same number as dense "
          "| mean mass recall (min layer) | best-selection ceiling | device-tier hit rate | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sys.argv[1:]:
        d = json.load(open(path))
        for c in d["contexts"]:
            dense = next(r for r in c["configs"] if r["config"] == "dense")
            for r in c["configs"]:
                if r["config"] == "dense":
                    continue
                rec = r["mass_recall_per_layer"]
                tier = r.get("device_tier")
                hit = f"{100 * tier['hits'] / (tier['hits'] + tier['misses']):.1f} %" if tier and tier["hits"] + tier["misses"] else "-"
                print(f"| {c['haystack']} | {c['context']:,} | {dense['correct']}/{dense['total']} | {r['config']} | "
                      f"{r['correct']}/{r['total']} | {r['same_as_dense']}/{r['total']} | {r['same_number_as_dense']}/{r['total']} | "
                      f"{mean(rec):.3f} ({min(rec):.3f}) | {mean(r['oracle_mass_recall_per_layer']):.3f} | {hit} | {r['seconds']:.0f} |")


if __name__ == "__main__":
    main()
