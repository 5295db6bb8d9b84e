#!/usr/bin/env python3
"""Time to first token of a conversation's follow-up turns against a running `minigpt serve`, with the prompt
cache on and off (the request's cache_prompt field).

Each conversation starts with CHARS characters of the corpus; each of TURNS follow-up turns sends the previous
prompt plus the next 200 characters (a new message), streamed, and the time to the first chunk is taken. REPS
conversations per setting, at different places of the corpus, alternating the settings. Prints the median
time to first token of the follow-up turns and the cached tokens the server reported.

Usage: bench/prompt_cache.py BASE_URL CORPUS [CHARS] [TURNS] [REPS]
  e.g. minigpt serve -m model.gguf -t 2 --parallel 2 -c 1024 --port 8391 &
       bench/prompt_cache.py http://127.0.0.1:8391 ../shared/data/tinyshakespeare.txt 2400 3 3
"""
import json
import statistics
import sys
import time
import urllib.request


def first_token(base, prompt, cache):
    body = json.dumps({"prompt": prompt, "max_tokens": 8, "stream": True, "temperature": 0,
                       "cache_prompt": cache, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    first, cached, prompt_tokens = None, None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if first is None and j["choices"]:
                first = time.time() - t0
            if j.get("usage"):
                cached = j["usage"]["prompt_tokens_details"]["cached_tokens"]
                prompt_tokens = j["usage"]["prompt_tokens"]
    return first, cached, prompt_tokens


def main():
    base, corpus_path = sys.argv[1], sys.argv[2]
    chars = int(sys.argv[3]) if len(sys.argv) > 3 else 2400
    turns = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    corpus = open(corpus_path, encoding="utf-8").read()
    need = chars + 200 * turns
    results = {True: [], False: []}
    for rep in range(reps):
        for cache in (True, False):
            start = (2 * rep + (0 if cache else 1)) * need
            if start + need > len(corpus):
                sys.exit("the corpus is too short for %d conversations of %d characters" % (2 * reps, need))
            prompt = corpus[start:start + chars]
            first_token(base, prompt, cache)  # the first turn fills a slot
            for t in range(turns):
                prompt += corpus[start + chars + 200 * t:start + chars + 200 * (t + 1)]
                results[cache].append(first_token(base, prompt, cache))
    print("| cache_prompt | follow-up turns | prompt tokens | cached tokens | TTFT median (ms) |")
    print("|---|---:|---:|---:|---:|")
    for cache in (True, False):
        r = results[cache]
        print("| %s | %d | %d-%d | %d-%d | %.0f |" % (
            "on" if cache else "off", len(r), min(x[2] for x in r), max(x[2] for x in r),
            min(x[1] for x in r), max(x[1] for x in r), 1000 * statistics.median(x[0] for x in r)))


if __name__ == "__main__":
    main()
