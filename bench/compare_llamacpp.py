"""Side-by-side table of `hindsight bench --json` and `llama-bench -o json` results.

Matches tests by (kind, n_tokens, depth): pp = n_prompt>0, tg = n_gen>0. Prints a markdown
table with both tokens/s (mean ± std) and the ratio hindsight / llama.cpp, then the same as
JSON. Usage: compare_llamacpp.py HINDSIGHT.json LLAMACPP.json MODEL [HINDSIGHT_SPARSE.json]
The first file must be a dense run (--sparse off): its rows are compared with llama.cpp's
(dense) ones. The optional sparse run's decode rows follow, labelled "sparse": hindsight's
sparse path against llama.cpp's dense attention at the same depth, never mixed into the
dense rows.
"""
import datetime
import json
import platform
import sys


def main() -> None:
    hs_path, lc_path, model = sys.argv[1:4]
    sparse_path = sys.argv[4] if len(sys.argv) > 4 else None
    hs = json.load(open(hs_path))
    if any(r.get("attention") not in (None, "", "dense") for r in hs["results"]):
        sys.exit(f"{hs_path}: not a dense run (use hindsight bench --sparse off)")
    lc = json.load(open(lc_path))
    ours = {}
    for r in hs["results"]:
        kind = "pp" if r["test"].startswith("pp") else "tg"
        ours[(kind, r["n_tokens"], r["depth"])] = (r["tokens_per_second"], r["stddev"])
    theirs = {}
    build = ""
    for r in lc:
        kind = "pp" if r["n_prompt"] > 0 else "tg"
        n = r["n_prompt"] if kind == "pp" else r["n_gen"]
        theirs[(kind, n, r.get("n_depth", 0))] = (r["avg_ts"], r["stddev_ts"])
        build = f'{r.get("build_commit", "?")} ({r.get("build_number", "?")})'
        threads = r.get("n_threads")
    rows = []
    print(f"\nmodel: {model}; threads: {threads}; llama.cpp build {build}; hindsight simd {hs['simd']}; "
          f"{platform.processor() or platform.machine()}; {datetime.date.today()}\n")
    print("| test | hindsight t/s | llama.cpp t/s | ratio |")
    print("|---|---|---|---|")
    for key in sorted(set(ours) & set(theirs), key=lambda k: (k[0] != "pp", k[2], k[1])):
        (a, sa), (b, sb) = ours[key], theirs[key]
        name = f"{key[0]}{key[1]}" + (f" @ d{key[2]}" if key[2] else "")
        print(f"| {name} | {a:.2f} ± {sa:.2f} | {b:.2f} ± {sb:.2f} | {a / b:.2f}x |")
        rows.append({"test": name, "hindsight_tps": a, "llamacpp_tps": b, "ratio": a / b})
    if sparse_path:
        for r in json.load(open(sparse_path))["results"]:
            if not r["test"].startswith("tg") or r.get("attention") in (None, "", "dense"):
                continue
            key = ("tg", r["n_tokens"], r["depth"])
            if key not in theirs:
                continue
            a, sa = r["tokens_per_second"], r["stddev"]
            b, sb = theirs[key]
            name = f"tg{key[1]}" + (f" @ d{key[2]}" if key[2] else "") + f" (hindsight sparse {r['attention']} vs llama.cpp dense)"
            print(f"| {name} | {a:.2f} ± {sa:.2f} | {b:.2f} ± {sb:.2f} | {a / b:.2f}x |")
            rows.append({"test": name, "hindsight_tps": a, "llamacpp_tps": b, "ratio": a / b, "hindsight_attention": r["attention"]})
    print()
    print(json.dumps({"model": model, "llamacpp_build": build, "rows": rows}))


if __name__ == "__main__":
    main()
