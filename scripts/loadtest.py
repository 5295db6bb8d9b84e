#!/usr/bin/env python3
"""Load test for an OpenAI-compatible completions server (minigpt serve, llama-server): C concurrent clients
for D seconds, each sending streaming /v1/completions requests one after another with the official openai
client. Bounded: it stops after --duration seconds or --max-requests requests, whichever comes first, and
only talks to loopback addresses.

Prints requests ok / failed (by kind), aggregate completion tokens/s, requests/s, time to first token and
inter-token latency (p50 / p99); --json prints the same as one object. Exits 1 if any request failed.

Usage: .venv/bin/python scripts/loadtest.py --url http://127.0.0.1:8080/v1 [--clients 32] [--duration 60]
           [--max-requests 100000] [--max-tokens 64] [--prompts FILE] [--api-key KEY] [--json]
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse
from collections import Counter

import openai

PROMPTS = [
    "ROMEO:", "JULIET:\nO Romeo,", "First Citizen:\nBefore we proceed", "KING RICHARD III:\nNow is the",
    "The quick brown fox", "Once upon a time", "In the beginning", "HAMLET:\nTo be, or not to be,",
    "MENENIUS:\nI tell you, friends,", "It was the best of times,", "Hello, my name is", "The meaning of life is",
]


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def client_loop(cid, client, model, args, prompts, deadline, budget, stats):
    rng = random.Random(cid)
    while time.monotonic() < deadline:
        if budget["left"] <= 0:
            return
        budget["left"] -= 1
        prompt = rng.choice(prompts)
        t0 = time.monotonic()
        first = None
        last = None
        tokens = 0
        gaps = []
        try:
            stream = await client.completions.create(
                model=model, prompt=prompt, max_tokens=args.max_tokens, temperature=0.8,
                seed=rng.randrange(1 << 31), stream=True, stream_options={"include_usage": True},
                extra_body={"ignore_eos": True} if args.ignore_eos else None)
            chunks = 0
            usage = None
            async for chunk in stream:
                now = time.monotonic()
                if chunk.usage is not None:
                    usage = chunk.usage
                if any(c.text for c in chunk.choices):
                    chunks += 1
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last = now
            tokens = usage.completion_tokens if usage is not None else chunks
        except openai.APIStatusError as e:
            stats["errors"][f"HTTP {e.status_code}"] += 1
            continue
        except Exception as e:  # connection errors, timeouts, protocol errors
            stats["errors"][type(e).__name__] += 1
            if len(stats["examples"]) < 5:  # what the first failures said, and when
                cause = e.__cause__ or e.__context__
                stats["examples"].append(f"{time.monotonic() - (deadline - args.duration):.1f} s: {type(e).__name__}: {e}"
                                         + (f" ({type(cause).__name__}: {cause})" if cause else ""))
            continue
        stats["ok"] += 1
        stats["tokens"] += tokens
        if first is not None:
            stats["ttft"].append(first - t0)
        stats["itl"].extend(gaps)
        stats["end"] = max(stats["end"], time.monotonic())


async def main_async(args):
    host = urllib.parse.urlparse(args.url).hostname
    if host not in ("127.0.0.1", "::1", "localhost"):
        sys.exit(f"loadtest: error: {args.url}: only loopback servers (127.0.0.1, ::1, localhost)")
    prompts = PROMPTS
    if args.prompts:
        with open(args.prompts, encoding="utf-8") as f:
            prompts = [line.rstrip("\n") for line in f if line.strip()]
        if not prompts:
            sys.exit(f"loadtest: error: {args.prompts}: no prompts")
    client = openai.AsyncOpenAI(base_url=args.url, api_key=args.api_key, max_retries=0, timeout=args.timeout)
    try:
        model = (await client.models.list()).data[0].id
    except Exception as e:
        sys.exit(f"loadtest: error: {args.url}: cannot list the models: {e}")
    stats = {"ok": 0, "tokens": 0, "ttft": [], "itl": [], "errors": Counter(), "end": 0.0, "examples": []}
    budget = {"left": args.max_requests}
    start = time.monotonic()
    deadline = start + args.duration
    await asyncio.gather(*(client_loop(i, client, model, args, prompts, deadline, budget, stats)
                           for i in range(args.clients)))
    wall = max(stats["end"], time.monotonic()) - start
    await client.close()
    n_err = sum(stats["errors"].values())
    out = {
        "url": args.url, "model": model, "clients": args.clients, "max_tokens": args.max_tokens,
        "wall_s": round(wall, 2), "requests_ok": stats["ok"], "requests_failed": n_err,
        "errors": dict(stats["errors"]), "error_examples": stats["examples"], "completion_tokens": stats["tokens"],
        "tok_s": round(stats["tokens"] / wall, 2) if wall > 0 else 0.0,
        "req_s": round(stats["ok"] / wall, 3) if wall > 0 else 0.0,
        "ttft_p50_ms": round(percentile(stats["ttft"], 50) * 1e3, 1),
        "ttft_p99_ms": round(percentile(stats["ttft"], 99) * 1e3, 1),
        "itl_p50_ms": round(percentile(stats["itl"], 50) * 1e3, 2),
        "itl_p99_ms": round(percentile(stats["itl"], 99) * 1e3, 2),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['model']} at {out['url']}: {args.clients} clients, {out['wall_s']} s, max_tokens {args.max_tokens}")
        print(f"  requests: {out['requests_ok']} ok, {n_err} failed {dict(stats['errors']) if n_err else ''}")
        print(f"  throughput: {out['tok_s']} completion tok/s, {out['req_s']} req/s ({out['completion_tokens']} tokens)")
        print(f"  time to first token: p50 {out['ttft_p50_ms']} ms, p99 {out['ttft_p99_ms']} ms")
        print(f"  inter-token latency: p50 {out['itl_p50_ms']} ms, p99 {out['itl_p99_ms']} ms")
    return 1 if n_err else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080/v1", help="the server's /v1 base URL (loopback only)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds (at most 3600)")
    ap.add_argument("--max-requests", type=int, default=100000)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ignore-eos", action="store_true", help="ask every request for all its max_tokens")
    ap.add_argument("--prompts", help="a file with one prompt per line")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--timeout", type=float, default=300.0, help="per request, seconds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for name, v, lo, hi in [("--clients", args.clients, 1, 1024), ("--duration", args.duration, 0.1, 3600),
                            ("--max-requests", args.max_requests, 1, 10**7), ("--max-tokens", args.max_tokens, 1, 1 << 20)]:
        if not lo <= v <= hi:
            sys.exit(f"loadtest: error: {name} must be in [{lo}, {hi}], got {v}")
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
