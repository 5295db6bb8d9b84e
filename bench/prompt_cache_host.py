#!/usr/bin/env python3
"""Time to first token of a request sharing a long prefix with an earlier one, from the slot's own cache and
from the host prompt cache (--cache-ram) after the slot went to another request, against the first (cold)
request's. Starts `minigpt serve` itself with one slot (-np 1), once with the host cache and once with
--cache-ram 0, on the same model and prompts.

Per repetition, each with its own places of the corpus: A = prefix P + question 1 (cold); A' = P + question 2
(the slot holds P); B = another prefix Q (cold, takes the slot); A'' = P + question 3 (P is in no slot: from the
host cache, or evaluated again with --cache-ram 0). Every request is streamed, greedy, 4 tokens; the time to its
first chunk is taken. Prints each request and the medians, with the ratio to the cold request's.

Usage: bench/prompt_cache_host.py MINIGPT MODEL CORPUS [PREFIX_CHARS] [REPS] [THREADS]
  e.g. bench/prompt_cache_host.py build/minigpt ~/.cache/minigpt-models/SmolLM2-135M-Instruct.Q4_1.gguf \\
           ../shared/data/tinyshakespeare.txt 7200 3 2
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request


def request(base, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "stream": True, "temperature": 0,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, usage, text = None, None, ""
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if first is None and j["choices"]:
                first = time.perf_counter() - t0
            if j["choices"]:
                text += j["choices"][0].get("text", "")
            if j.get("usage"):
                usage = j["usage"]
    return {"ttft": first, "prompt_tokens": usage["prompt_tokens"],
            "cached": usage["prompt_tokens_details"]["cached_tokens"], "text": text}


def serve(minigpt, model, threads, cache_ram):
    p = subprocess.Popen([minigpt, "serve", "-m", model, "-t", str(threads), "--parallel", "1", "-c", "4096",
                          "--port", "0", "--cache-ram", str(cache_ram)],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        sys.stderr.write("  " + line)
        m = re.search(r"serving .* at (http://[^/]+)/v1", line)
        if m:
            return p, m.group(1)
    sys.exit("minigpt serve ended before it listened")


def main():
    minigpt, model, corpus_path = sys.argv[1], sys.argv[2], sys.argv[3]
    chars = int(sys.argv[4]) if len(sys.argv) > 4 else 7200
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    threads = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    corpus = open(corpus_path, encoding="utf-8").read()
    questions = ["\n\nQuestion: who speaks first?\nAnswer:", "\n\nQuestion: where are they?\nAnswer:",
                 "\n\nQuestion: what happens next?\nAnswer:"]
    print("# %s, %s, %d threads, -np 1, prefixes of %d characters, %d repetitions" % (
        os.path.basename(model), os.uname().nodename, threads, chars, reps))
    summary = {}
    texts = {}
    for cache_ram in (8192, 0):
        srv, base = serve(minigpt, model, threads, cache_ram)
        try:
            request(base, "Warm up.")  # the first request's one-off costs (pages of the weights) out of the way
            rows = {"cold": [], "slot": [], "evicting": [], "host": []}
            for rep in range(reps):
                p = corpus[2 * rep * chars:(2 * rep + 1) * chars]
                q = corpus[(2 * rep + 1) * chars:(2 * rep + 2) * chars]
                for name, prompt in (("cold", p + questions[0]), ("slot", p + questions[1]),
                                     ("evicting", q + questions[0]), ("host", p + questions[2])):
                    r = request(base, prompt)
                    rows[name].append(r)
                    texts.setdefault((rep, name), {})[cache_ram] = r["text"]
                    print("--cache-ram %-4d rep %d %-8s prompt %5d tokens, cached %5d, TTFT %7.1f ms" % (
                        cache_ram, rep, name, r["prompt_tokens"], r["cached"], 1000 * r["ttft"]))
            summary[cache_ram] = rows
            metrics = urllib.request.urlopen(base + "/metrics", timeout=60).read().decode()
            for line in metrics.splitlines():
                if line.startswith("minigpt_prompt_cache_") or line.startswith("minigpt_prompt_tokens_cached"):
                    print("  --cache-ram %d: %s" % (cache_ram, line))
        finally:
            srv.terminate()
            srv.wait()
    print()
    print("| --cache-ram | request | cached tokens | TTFT median (ms) | / cold |")
    print("|---|---|---:|---:|---:|")
    for cache_ram, rows in summary.items():
        cold = statistics.median(r["ttft"] for r in rows["cold"])
        for name in ("cold", "slot", "evicting", "host"):
            t = statistics.median(r["ttft"] for r in rows[name])
            print("| %d | %s | %s | %.1f | %.3f |" % (
                cache_ram, name, "-".join(str(x) for x in sorted({r["cached"] for r in rows[name]})), 1000 * t,
                t / cold))
    same = all(len(v) == 2 and v[8192] == v[0] for v in texts.values())
    print("\ngreedy text equal with and without the host cache: %s" % ("yes" if same else "NO"))


if __name__ == "__main__":
    main()
