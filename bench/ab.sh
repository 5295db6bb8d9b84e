#!/usr/bin/env bash
# Compares two minigpt binaries on the rows of scripts/bench.sh (GPT-2 124M shape, random weights), in one
# interleaved run: for every dtype and thread count, A and B take turns (the order alternating from round to
# round), so that both see the machine in the same states. Prints a Markdown table of the median tok/s
# over the rounds and the ratio B / A.
# Usage: bench/ab.sh A_BINARY B_BINARY [rounds] [dtypes] [threads] [extra bench args...]
#   e.g. bench/ab.sh /tmp/before/build/minigpt build/minigpt 3 f32,bf16,f16 1,2
# MODEL=FILE runs that model (-m FILE) instead of the random GPT-2 shape; its dtype `stored` keeps its blocks:
#   MODEL=~/.cache/minigpt-peer/smollm2-135m-q4_k_m.gguf bench/ab.sh A B 3 stored 2
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-3} DTYPES=${4:-f32,bf16,f16} THREADS=${5:-1,2}
shift $(( $# < 5 ? $# : 5 ))
SRC=(--random gpt2)
[ -n "${MODEL:-}" ] && SRC=(-m "$MODEL")
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for dt in ${DTYPES//,/ }; do
  for t in ${THREADS//,/ }; do
    for r in $(seq 1 "$ROUNDS"); do
      order="A B"
      [ $((r % 2)) -eq 0 ] && order="B A"
      for which in $order; do
        bin=$A
        [ "$which" = B ] && bin=$B
        "$bin" bench "${SRC[@]}" -p 512 -n 128 -d 0,512 -t "$t" --dtype "$dt" -r 3 -o json "$@" \
          > "$OUT/$which-$dt-$t-$r.json"
      done
    done
  done
done
python3 - "$OUT" "$A" "$B" <<'PY'
import glob, json, os, statistics, sys
out, a, b = sys.argv[1:4]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    which, dt, t, _ = os.path.basename(f)[:-5].split("-")
    for r in json.load(open(f))["results"]:
        rows.setdefault((dt, int(t), r["test"]), {}).setdefault(which, []).append(r["tok_s"])
print(f"A = {a}\nB = {b}\n")
print("| dtype | threads | test | A tok/s | B tok/s | B / A |")
print("|---|---:|---|---:|---:|---:|")
for (dt, t, test), v in sorted(rows.items()):
    ma, mb = statistics.median(v["A"]), statistics.median(v["B"])
    print(f"| {dt} | {t} | {test} | {ma:.1f} | {mb:.1f} | {mb / ma:.3f} |")
PY
