#!/usr/bin/env bash
# The standard benchmark table: GPT-2 124M shape with random weights, prefill of 512 tokens, decode of 128
# tokens from an empty cache and after a 512-token prefill, F32/BF16/F16 weights, 1 and 2 threads.
# Extra arguments go to `minigpt bench` (e.g. -o json, -r 10).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/minigpt ] || bash scripts/setup.sh >/dev/null
echo "minigpt bench, $(date -u +%Y-%m-%d), $(nproc) cores"
exec build/minigpt bench --random gpt2 -p 512 -n 128 -d 0,512 -t 1,2 --dtype f32,bf16,f16 -r 5 "$@"
