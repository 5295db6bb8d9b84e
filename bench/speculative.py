#!/usr/bin/env python3
"""Speculative decoding against plain decoding, on the same model, prompts and length (issue: prompt lookup at
>= 1.8x plain decoding on input-grounded work; a Q4_0 draft at >= 1.4x its F16 target).

Each round runs every prompt plain, then with speculation (interleaved), `minigpt generate --temperature 0
--json`, and checks that the two texts are the same. A round's speed is its tokens over its decode seconds,
summed over the prompts (decode_tok_s x its tokens); the table gives the medians over the rounds, the ratio,
the drafts' acceptance and the tokens per forward step of the model.

The prompts (bench/prompts/speculative/*.txt) are chat prompts already rendered in ChatML, SmolLM2-Instruct's
template: rewrite, edit or quote a 100-300-token snippet the prompt gives (the work prompt lookup is for), and
one that writes new code (tests.txt) for contrast.

With --peer, llama.cpp's own speculation runs on the same files and prompts in the same rounds (its decode
speed as it prints it: "decoded N tokens in S seconds"): `llama-lookup` (prompt lookup), or
`llama-speculative-simple -md DRAFT --spec-type draft-simple` (a draft model); -m, -f, -n, -t and --temp 0
are added.

Usage: bench/speculative.py MODEL [--spec "--prompt-lookup"] [--runs 3] [--threads N] [-n 256] [--peer CMD]
       bench/speculative.py F16.gguf --spec "--draft-model Q4_0.gguf" \
           --peer "llama-speculative-simple -md Q4_0.gguf --spec-type draft-simple"
"""
import argparse
import glob
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cli, model, prompt, n, threads, extra):
    cmd = [cli, "generate", "-m", model, "-f", prompt, "--special", "--temperature", "0", "-n", str(n),
           "-t", str(threads), "--json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    s = json.loads(out.strip().splitlines()[-1])["summary"]
    return s


def run_peer(peer, model, prompt, n, threads):
    cmd = shlex.split(peer) + ["-m", model, "-f", prompt, "-n", str(n), "-t", str(threads), "--temp", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds", out.stdout + out.stderr)
    if not m:
        sys.exit(f"no 'decoded N tokens' line from: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return int(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--spec", default="--prompt-lookup", help="the speculation flags")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--prompts", default=os.path.join(ROOT, "bench", "prompts", "speculative", "*.txt"))
    ap.add_argument("--peer", default="", help="llama.cpp's speculative tool and its flags")
    ap.add_argument("--cli", default=os.environ.get("MINIGPT_CLI", os.path.join(ROOT, "build", "minigpt")))
    a = ap.parse_args()
    prompts = sorted(glob.glob(a.prompts))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"model {a.model}; speculation: {a.spec}; threads {a.threads}; -n {a.n}; greedy; {cpu}")
    extra = shlex.split(a.spec)
    if a.peer:
        print(f"peer: {a.peer}")
    per = {os.path.basename(p): {"plain": [], "spec": [], "peer": []} for p in prompts}
    rounds = {"plain": [], "spec": [], "peer": []}
    for r in range(a.runs):
        tot = {"plain": [0, 0.0], "spec": [0, 0.0], "peer": [0, 0.0]}
        for p in prompts:
            name = os.path.basename(p)
            res = {}
            for mode, flags in (("plain", []), ("spec", extra)):
                s = run(a.cli, a.model, p, a.n, a.threads, flags)
                tokens = s["generated_tokens"] - 1  # the first comes from the prompt's step
                secs = tokens / s["decode_tok_s"] if s["decode_tok_s"] else 0.0
                tot[mode][0] += tokens
                tot[mode][1] += secs
                per[name][mode].append(s)
                res[mode] = s
            if a.peer:
                tokens, secs = run_peer(a.peer, a.model, p, a.n, a.threads)
                tot["peer"][0] += tokens
                tot["peer"][1] += secs
                per[name]["peer"].append(tokens / secs)
            if res["plain"]["text"] != res["spec"]["text"]:
                print(f"DIFFERENT TEXT: {name} round {r + 1}")
                sys.exit(1)
            sp = res["spec"]
            print(f"round {r + 1} {name}: plain {res['plain']['decode_tok_s']:.1f} tok/s, speculative "
                  f"{sp['decode_tok_s']:.1f} tok/s ({sp['generated_tokens']} tokens, {sp['decode_steps']} steps, "
                  f"{sp['accepted_tokens']}/{sp['drafted_tokens']} drafts kept), same text")
        for mode in tot:
            if tot[mode][1] > 0:
                rounds[mode].append(tot[mode][0] / tot[mode][1])
    print()
    peer_h = " llama.cpp's speculation tok/s | minigpt / llama.cpp |" if a.peer else ""
    print("| prompt | tokens | plain tok/s | speculative tok/s | speed-up | drafts kept | tokens per step |" + peer_h)
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if a.peer else ""))
    for name, d in per.items():
        mp = statistics.median(s["decode_tok_s"] for s in d["plain"])
        ms = statistics.median(s["decode_tok_s"] for s in d["spec"])
        s = d["spec"][0]
        kept = s["accepted_tokens"] / s["drafted_tokens"] if s["drafted_tokens"] else 0.0
        tps = (s["generated_tokens"] - 1) / s["decode_steps"] if s["decode_steps"] else 0.0
        peer = ""
        if a.peer:
            pp = statistics.median(d["peer"])
            peer = f" {pp:.1f} | {ms / pp:.2f}x |"
        print(f"| {name} | {s['generated_tokens']} | {mp:.1f} | {ms:.1f} | {ms / mp:.2f}x | {kept:.0%} | {tps:.2f} |"
              + peer)
    mp, ms = statistics.median(rounds["plain"]), statistics.median(rounds["spec"])
    peer = ""
    if a.peer:
        pp = statistics.median(rounds["peer"])
        peer = f" {pp:.1f} | {ms / pp:.2f}x |"
    print(f"| all ({a.runs} rounds, median) | | {mp:.1f} | {ms:.1f} | {ms / mp:.2f}x | | |" + peer)


if __name__ == "__main__":
    main()
