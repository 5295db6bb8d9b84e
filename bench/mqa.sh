#!/usr/bin/env bash
# Multi-query against multi-head attention at long context: decode tok/s of the tiny_starcoder shape
# (gpt_bigcode, 20 layers, 12 heads of 64, random weights held in BF16) with one KV head (multi_query) and
# with 12, at KV-cache depth DEPTH, in one run that alternates the two ROUNDS times; prints each side's
# median and their ratio. Usage: bench/mqa.sh [DEPTH=2048] [ROUNDS=3] [THREADS=all cores]
set -euo pipefail
cd "$(dirname "$0")/.."
DEPTH=${1:-2048}
ROUNDS=${2:-3}
THREADS=${3:-$(nproc)}
BIN=${MINIGPT:-build/minigpt}
[ -x "$BIN" ] || { echo "mqa.sh: $BIN not built (scripts/setup.sh)" >&2; exit 1; }
declare -A runs
for r in $(seq "$ROUNDS"); do
  for shape in mqa mha; do
    out=$("$BIN" bench --random "bench/shapes/tiny-starcoder-$shape.json" --dtype bf16 -p 0 -n 32 \
      -d "$DEPTH" -t "$THREADS" -r 3 -o json)
    tok=$(printf '%s' "$out" | python3 -c 'import json,sys; r=json.load(sys.stdin)["results"]; print([x for x in r if x["test"].startswith("tg")][0]["tok_s"])')
    kv=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["kv_bytes_per_token"])')
    echo "round $r: $shape tg32 @ depth $DEPTH: $tok tok/s (KV cache $kv bytes per token)"
    runs[$shape]="${runs[$shape]:-} $tok"
  done
done
python3 - "${runs[mqa]}" "${runs[mha]}" <<'PY'
import statistics, sys
mqa = statistics.median(map(float, sys.argv[1].split()))
mha = statistics.median(map(float, sys.argv[2].split()))
print(f"median: multi-query {mqa:.2f} tok/s, multi-head {mha:.2f} tok/s, ratio {mqa / mha:.2f}x")
PY
