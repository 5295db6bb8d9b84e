#!/usr/bin/env python3
"""The table of bench/peer.sh: per type and test, each engine's median tok/s over the rounds with its
min-max, and minigpt's ratio to each peer (ratio of medians, and the min-max of the per-round ratios).

    python3 bench/peer_table.py OUT_DIR TYPES THREADS "minigpt llama ik" DEPTHS   (DEPTHS: 512 or 512,896)

OUT_DIR holds ENGINE-TYPE-ROUND-{0,d}.json: minigpt bench -o json, llama-bench -o json (llama.cpp's or
ik_llama.cpp's)."""
import glob
import json
import os
import statistics
import sys

out, types, threads, engines = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4].split()
depths = [int(d) for d in sys.argv[5].split(",") if int(d) > 0]
NAMES = {"minigpt": "minigpt", "llama": "llama.cpp", "ik": "ik_llama.cpp"}


def rows(engine, path):
    """{test name: tok/s} of one JSON file ({} when the run wrote nothing)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return {}
    d = json.load(open(path))
    if engine == "minigpt":
        return {r["test"]: r["tok_s"] for r in (d["results"] if isinstance(d, dict) else d)}
    res = {}
    for r in d:
        n_depth = r.get("n_depth", 0)
        if r["n_prompt"] and r["n_gen"]:  # ik_llama.cpp's -gp: tg after n_prompt tokens
            name = f"tg{r['n_gen']}@d{r['n_prompt']}"
        elif r["n_prompt"]:
            name = f"pp{r['n_prompt']}" + (f"@d{n_depth}" if n_depth else "")
        else:
            name = f"tg{r['n_gen']}" + (f"@d{n_depth}" if n_depth else "")
        res[name] = r["avg_ts"]
    return res


def rounds(engine, t):
    """[{test: tok/s}] in round order."""
    res = {}
    for p in glob.glob(f"{out}/{engine}-{t}-*-*.json"):
        r = int(p.rsplit("-", 2)[1])
        res.setdefault(r, {}).update(rows(engine, p))
    return [res[r] for r in sorted(res)]


tests = ["pp512", "tg128"] + [f"tg128@d{d}" for d in depths]
peers = [e for e in engines if e != "minigpt"]
head = "| type | test | minigpt tok/s | " + " | ".join(f"{NAMES[p]} tok/s | minigpt / {NAMES[p]}" for p in peers) + " |"
print(f"{threads} threads; tok/s: median over rounds (min-max); ratio: of medians (min-max of the rounds' ratios)")
print()
print(head)
print("|---|---|---:|" + "---:|---:|" * len(peers))
for t in types:
    data = {e: rounds(e, t) for e in engines}
    n = min(len(v) for v in data.values())
    for test in tests:
        def cell(e):
            v = [r[test] for r in data[e] if test in r]
            if not v:
                return "n/a", None
            return f"{statistics.median(v):.1f} ({min(v):.0f}-{max(v):.0f})", v
        mtext, mv = cell("minigpt")
        line = f"| {t} | {test} | {mtext} |"
        for p in peers:
            ptext, pv = cell(p)
            if mv and pv:
                each = [a[test] / b[test] for a, b in zip(data["minigpt"], data[p]) if test in a and test in b]
                ratio = f"**{statistics.median(mv) / statistics.median(pv):.2f}** ({min(each):.2f}-{max(each):.2f})"
            else:
                ratio = "n/a"
            line += f" {ptext} | {ratio} |"
        print(line)
print()
print(f"rounds per type: {n}")
