#!/usr/bin/env bash
# Tokenizer throughput on tinyshakespeare.txt: minigpt (release build, 1 thread) vs HF tokenizers
# and tiktoken (when installed), median of several runs each, in MB/s.
# Usage: scripts/bench_tokenizer.sh [RUNS]    (BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
RUNS=${1:-9}
cmake --build "$BUILD_DIR" --target bench_tokenizer -j2 >/dev/null
echo "minigpt:        $("$BUILD_DIR"/bench_tokenizer tests/fixtures/gpt2-tokenizer tests/fixtures/data/tinyshakespeare.txt "$RUNS")"
RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 - "$RUNS" <<'PY'
import os, statistics, sys, time
runs = int(sys.argv[1])
tokdir, path = "tests/fixtures/gpt2-tokenizer", "tests/fixtures/data/tinyshakespeare.txt"
text = open(path, encoding="utf-8").read()
mb = len(text.encode("utf-8")) / 1e6

def bench(name, fn):
    times = []
    for _ in range(runs):
        t = time.perf_counter(); ids = fn(); times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(f"{name:15} {len(ids)} ids; encode median {med*1e3:.2f} ms = {mb/med:.1f} MB/s (best {mb/min(times):.1f})")

try:
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    # One call on the whole text: a single sequence, so HF's batch parallelism does not apply.
    bench("hf tokenizers:", lambda: hf.encode(text).ids)
except ImportError:
    print("hf tokenizers:  not installed")
try:
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(tokdir, "merges.txt"), os.path.join(tokdir, "vocab.json"))
    tk = tiktoken.Encoding("gpt2-local", pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                           mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
    bench("tiktoken:", lambda: tk.encode_ordinary(text))
except ImportError:
    print("tiktoken:       not installed (pip install tiktoken)")
PY
