#!/usr/bin/env bash
# Compares two bench_attention binaries (a decode step's attention alone, see bench/bench_attention.cpp) in
# one interleaved run: for every shape and cache type, A and B take turns (the order alternating from round
# to round), so that both see the machine in the same states. Prints a Markdown table of the medians over
# the rounds of the wall and the CPU time per token (one thread on a shared machine: compare the CPU
# times) and the ratio A / B of each (above 1: B faster).
# Usage: bench/ab_attention.sh A_BINARY B_BINARY [rounds] [shapes] [caches] [threads] [depths] [tokens]
#   e.g. bench/ab_attention.sh /tmp/before/build/bench_attention build/bench_attention 5 gpt2,smollm2 f32,f16 1
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-5} SHAPES=${4:-gpt2,smollm2} CACHES=${5:-f32,f16} THREADS=${6:-1} DEPTHS=${7:-0,512,896}
TOKENS=${8:-32}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for shape in ${SHAPES//,/ }; do
  for c in ${CACHES//,/ }; do
    for r in $(seq 1 "$ROUNDS"); do
      order="A B"
      [ $((r % 2)) -eq 0 ] && order="B A"
      for which in $order; do
        bin=$A
        [ "$which" = B ] && bin=$B
        "$bin" "$shape" "$c" "$THREADS" "$DEPTHS" "$TOKENS" > "$OUT/$which-$shape-$c-$r.txt"
      done
    done
  done
done
python3 - "$OUT" "$A" "$B" "$THREADS" <<'PY'
import glob, os, statistics, sys
out, a, b, threads = sys.argv[1:5]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "*.txt"))):
    which, shape, c, _ = os.path.basename(f)[:-4].split("-")
    for line in open(f).read().splitlines()[2:]:
        depth, wall, cpu = line.split()[:3]
        rows.setdefault((shape, c, int(depth)), {}).setdefault(which, []).append((float(wall), float(cpu)))
print(f"A = {a}\nB = {b}\nthreads = {threads}\n")
print("| shape | cache | depth | A us/token (cpu) | B us/token (cpu) | A / B wall | A / B cpu |")
print("|---|---|---:|---:|---:|---:|---:|")
for (shape, c, d), v in sorted(rows.items()):
    aw, ac = (statistics.median(x[i] for x in v["A"]) for i in (0, 1))
    bw, bc = (statistics.median(x[i] for x in v["B"]) for i in (0, 1))
    print(f"| {shape} | {c} | {d} | {aw:.0f} ({ac:.0f}) | {bw:.0f} ({bc:.0f}) | {aw / bw:.2f} | {ac / bc:.2f} |")
PY
