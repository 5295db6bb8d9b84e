"""BF16 prefill against PyTorch: transformers' forward of 512 tokens in bfloat16 and `minigpt bench -p 512
--dtype bf16`, on the same Hugging Face directory (the same weights, rounded to BF16 by both), the same
number of threads, in interleaved rounds (the order alternating), printing each round and the medians.

    python3 bench/torch_prefill.py MODEL_DIR [--threads 2] [--rounds 5] [--cli build/minigpt]

torch's CPU backend runs BF16 matrix products through oneDNN, which uses the CPU's BF16 dot products
(AVX-512 BF16, AMX) where it has them. Both rates are 512 / the time of one forward of 512 tokens: torch's
is the median of --reps timed calls after a warm-up (no KV cache kept; `logits_to_keep=1`: the last row's
logits, as `bench`'s prefill), minigpt's the tok/s `bench` reports (median of its -r repetitions).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def torch_rate(model: torch.nn.Module, ids: torch.Tensor, reps: int) -> float:
    times = []
    with torch.inference_mode():
        model(ids, use_cache=False, logits_to_keep=1)  # warm-up: oneDNN's kernels chosen, its buffers made
        for _ in range(reps):
            t0 = time.perf_counter()
            model(ids, use_cache=False, logits_to_keep=1)
            times.append(time.perf_counter() - t0)
    return ids.shape[1] / statistics.median(times)


def minigpt_rate(cli: str, model_dir: str, threads: int, reps: int) -> float:
    args = [cli, "bench", "-m", model_dir, "-p", "512", "-n", "0", "--dtype", "bf16", "-t", str(threads),
            "-r", str(reps), "-o", "json"]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)}: {r.stderr.strip()}")
    return float(json.loads(r.stdout)["results"][0]["tok_s"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cli", default="build/minigpt")
    o = ap.parse_args()
    torch.set_num_threads(o.threads)
    model = AutoModelForCausalLM.from_pretrained(o.model_dir, dtype=torch.bfloat16).eval()
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (1, 512), generator=torch.Generator().manual_seed(5))
    rates: dict[str, list[float]] = {"torch": [], "minigpt": []}
    for r in range(o.rounds):
        order = ["torch", "minigpt"] if r % 2 == 0 else ["minigpt", "torch"]
        for e in order:
            if e == "torch":
                rates[e].append(torch_rate(model, ids, o.reps))
            else:
                rates[e].append(minigpt_rate(o.cli, o.model_dir, o.threads, o.reps))
        print(f"round {r + 1}/{o.rounds}: torch {rates['torch'][-1]:.1f}, minigpt {rates['minigpt'][-1]:.1f} tok/s")
    each = [m / t for m, t in zip(rates["minigpt"], rates["torch"])]
    mt, mm = statistics.median(rates["torch"]), statistics.median(rates["minigpt"])
    print(f"\nBF16 pp512, {o.threads} threads, torch {torch.__version__}, median of {o.rounds} interleaved rounds:")
    print(f"torch {mt:.1f} ({min(rates['torch']):.0f}-{max(rates['torch']):.0f}) tok/s, minigpt {mm:.1f} "
          f"({min(rates['minigpt']):.0f}-{max(rates['minigpt']):.0f}) tok/s, minigpt / torch {mm / mt:.2f} "
          f"(rounds {min(each):.2f}-{max(each):.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
