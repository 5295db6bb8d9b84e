#!/usr/bin/env python3
"""The prompt cache under load (issue: 32 clients x 60 s, 8 distinct system prompts, random user turns: no
failure, outputs equal to the uncached server's, the cache's memory within --cache-ram, the hit rate in
/metrics).

Starts `minigpt serve` twice on the same model: with the host prompt cache (-np 4, --cache-ram MIB, small
enough that blocks are evicted) and without any (--cache-ram 0, and every request cache_prompt false). 32
client threads send chat requests to the first for DURATION seconds: one of 8 system prompts (a few hundred
tokens each, from the corpus) and a user turn drawn from a seeded list; greedy, 12 tokens. /metrics is read
every half second (the cache's bytes against its limit). Then every distinct request seen is sent once to
the uncached server, one at a time, and the replies compared.

Usage: bench/prompt_cache_soak.py MINIGPT MODEL CORPUS [DURATION 60] [CACHE_MIB 64] [THREADS 2]
"""
import json
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request


def serve(minigpt, model, threads, cache_ram, parallel):
    p = subprocess.Popen([minigpt, "serve", "-m", model, "-t", str(threads), "--parallel", str(parallel), "-c",
                          "2048", "--port", "0", "--cache-ram", str(cache_ram)], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"serving .* at (http://[^/]+)/v1", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()  # drain the log
            return p, m.group(1)
    sys.exit("minigpt serve ended before it listened")


def chat(base, system, user, cache_prompt=True):
    body = json.dumps({"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                       "max_tokens": 12, "temperature": 0, "cache_prompt": cache_prompt}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        j = json.loads(r.read())
    return j["choices"][0]["message"]["content"], j["usage"]["prompt_tokens_details"]["cached_tokens"]


def metrics(base):
    text = urllib.request.urlopen(base + "/metrics", timeout=60).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(minigpt_\w+) ([0-9.e+-]+)$", text, re.M)}


def main():
    minigpt, model, corpus = sys.argv[1:4]
    duration = float(sys.argv[4]) if len(sys.argv) > 4 else 60
    cache_mib = int(sys.argv[5]) if len(sys.argv) > 5 else 64
    threads = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    text = open(corpus).read()
    rng = random.Random(7)
    systems = [f"You are assistant {i}. Answer in the style of this text:\n" + text[4000 * i: 4000 * i + 1200]
               for i in range(8)]
    users = [f"Question {i}: what does line {rng.randint(1, 99)} mean?" for i in range(40)]
    cached_srv, base = serve(minigpt, model, threads, cache_mib, 4)
    print(f"model {model}; 32 clients x {duration:.0f} s; 8 system prompts; serve -np 4 --cache-ram {cache_mib}")
    seen, failures, peak, answered = {}, [], [0.0], [0]
    lock = threading.Lock()
    stop = time.time() + duration

    def client(c):
        r = random.Random(c)
        while time.time() < stop:
            s, u = r.randrange(8), r.randrange(len(users))
            try:
                reply, _ = chat(base, systems[s], users[u])
            except Exception as e:  # noqa: BLE001 (any failure counts)
                with lock:
                    failures.append(repr(e))
                continue
            with lock:
                answered[0] += 1
                if (s, u) in seen and seen[(s, u)] != reply:
                    failures.append(f"two replies to system {s}, user {u} differ")
                seen[(s, u)] = reply

    def watch():
        while time.time() < stop:
            m = metrics(base)
            peak[0] = max(peak[0], m.get("minigpt_prompt_cache_bytes", 0))
            time.sleep(0.5)

    ts = [threading.Thread(target=client, args=(c,)) for c in range(32)] + [threading.Thread(target=watch)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    m = metrics(base)
    cached_srv.terminate()
    hits, misses = m.get("minigpt_prompt_cache_hits_total", 0), m.get("minigpt_prompt_cache_misses_total", 0)
    print(f"requests answered: {answered[0]} ({len(seen)} distinct); failures: {len(failures)}")
    print(f"host cache: peak {peak[0] / 2**20:.1f} MiB of {m.get('minigpt_prompt_cache_max_bytes', 0) / 2**20:.1f} "
          f"MiB; hits {hits:.0f}, misses {misses:.0f} (hit rate {hits / max(1, hits + misses):.0%}); prompt tokens "
          f"evaluated {m.get('minigpt_prompt_tokens_total', 0):.0f}, from a cache "
          f"{m.get('minigpt_prompt_tokens_cached_total', 0):.0f}")
    plain_srv, plain = serve(minigpt, model, threads, 0, 1)
    differ = 0
    for (s, u), reply in sorted(seen.items()):
        want, cached = chat(plain, systems[s], users[u], cache_prompt=False)
        assert cached == 0
        if want != reply:
            differ += 1
            print(f"DIFFERENT: system {s}, user {u}: {reply!r} against the uncached {want!r}")
    plain_srv.terminate()
    print(f"replies equal to the uncached server's: {len(seen) - differ} of {len(seen)}")
    for f in failures[:10]:
        print("failure:", f)
    sys.exit(1 if failures or differ or peak[0] > m.get("minigpt_prompt_cache_max_bytes", 0) else 0)


if __name__ == "__main__":
    main()
