#!/usr/bin/env python3
"""Latency of requests with n choices of one prompt against a running `minigpt serve` (the prompt cache off, so
that every request evaluates its prompt), and the prompt tokens the server evaluated per request (/metrics).

REPS requests per n, each with CHARS characters of the corpus from a different place, MAX_TOKENS tokens per
choice, sampled (temperature 0.8). Prints, per n, the median seconds per request and the evaluated prompt tokens
per request.

Usage: bench/choices.py BASE_URL CORPUS [CHARS] [MAX_TOKENS] [REPS] [N,N,...]
  e.g. minigpt serve -m model.gguf -t 2 --parallel 4 -c 1024 --port 8392 &
       bench/choices.py http://127.0.0.1:8392 ../shared/data/tinyshakespeare.txt 2400 8 5 1,4
"""
import json
import statistics
import sys
import time
import urllib.request


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return 0


def main():
    base, corpus = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
    chars = int(sys.argv[3]) if len(sys.argv) > 3 else 2400
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    ns = [int(x) for x in (sys.argv[6] if len(sys.argv) > 6 else "1,4").split(",")]
    print("| n | requests | prompt tokens | evaluated prompt tokens per request | seconds per request (median) |")
    print("|---:|---:|---:|---:|---:|")
    for n in ns:
        times, evaluated, prompt_tokens = [], [], 0
        for r in range(reps):
            start = (r * 7919 * 13 + n * 1009) % (len(corpus) - chars)
            body = json.dumps({"prompt": corpus[start:start + chars], "n": n, "max_tokens": max_tokens,
                               "temperature": 0.8, "seed": r, "cache_prompt": False}).encode()
            req = urllib.request.Request(base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            before = metric(base, "minigpt_prompt_tokens_total")
            t0 = time.time()
            with urllib.request.urlopen(req, timeout=600) as res:
                out = json.loads(res.read())
            times.append(time.time() - t0)
            evaluated.append(metric(base, "minigpt_prompt_tokens_total") - before)
            prompt_tokens = out["usage"]["prompt_tokens"]
        print(f"| {n} | {reps} | {prompt_tokens} | {statistics.median(evaluated)} | {statistics.median(times):.3f} |")


if __name__ == "__main__":
    main()
