#!/usr/bin/env bash
# Compares two minigpt binaries on the rows of scripts/bench.sh (GPT-2 124M shape, random weights), in one
# interleaved run: for every dtype and thread count, A and B take turns (the order rotating from round to
# round), so that both see the machine in the same states. Prints a Markdown table of the median tok/s
# over the rounds and the ratio B / A, with the range of the rounds' own ratios.
# CONTROL=1 runs A a second time as a third engine, A2: the same code, so A2 / A is what the machine alone
# moves a row by in this run (on the 2-vCPU VM of bench/results/2026-11-29-layout-ab-self-control.md, up to
# 13% in 5 rounds); a B / A inside that spread is not a difference the run can show.
# Usage: bench/ab.sh A_BINARY B_BINARY [rounds] [dtypes] [threads] [extra bench args...]
#   e.g. bench/ab.sh /tmp/before/build/minigpt build/minigpt 3 f32,bf16,f16 1,2
# MODEL=FILE runs that model (-m FILE) instead of the random GPT-2 shape; its dtype `stored` keeps its blocks:
#   MODEL=~/.cache/minigpt-peer/smollm2-135m-q4_k_m.gguf bench/ab.sh A B 3 stored 2
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-3} DTYPES=${4:-f32,bf16,f16} THREADS=${5:-1,2}
shift $(( $# < 5 ? $# : 5 ))
SRC=(--random gpt2)
[ -n "${MODEL:-}" ] && SRC=(-m "$MODEL")
ENGINES=(A B)
[ "${CONTROL:-0}" = 1 ] && ENGINES=(A A2 B)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for dt in ${DTYPES//,/ }; do
  for t in ${THREADS//,/ }; do
    for r in $(seq 1 "$ROUNDS"); do
      # round r starts with engine (r - 1) mod n: each engine runs first, second, ... in turn
      n=${#ENGINES[@]}
      for i in $(seq 0 $((n - 1))); do
        which=${ENGINES[$(( (r - 1 + i) % n ))]}
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
    which, dt, t, r = os.path.basename(f)[:-5].split("-")
    for x in json.load(open(f))["results"]:
        rows.setdefault((dt, int(t), x["test"]), {}).setdefault(which, {})[int(r)] = x["tok_s"]
control = any("A2" in v for v in rows.values())
print(f"A = {a}\nB = {b}" + ("\nA2 = A run again (the control)" if control else "") + "\n")
def ratio(v, num):  # ratio of medians, and the min-max of the rounds' own ratios
    rs = sorted(set(v[num]) & set(v["A"]))
    per = [v[num][r] / v["A"][r] for r in rs]
    m = statistics.median(v[num].values()) / statistics.median(v["A"].values())
    return f"{m:.3f} ({min(per):.2f}-{max(per):.2f})"
head = "| dtype | threads | test | A tok/s | B tok/s | B / A (rounds) |"
rule = "|---|---:|---|---:|---:|---|"
if control:
    head = "| dtype | threads | test | A tok/s | A2 tok/s | B tok/s | A2 / A (rounds) | B / A (rounds) |"
    rule = "|---|---:|---|---:|---:|---:|---|---|"
print(head)
print(rule)
for (dt, t, test), v in sorted(rows.items()):
    med = {k: statistics.median(v[k].values()) for k in v}
    if control:
        print(f"| {dt} | {t} | {test} | {med['A']:.1f} | {med['A2']:.1f} | {med['B']:.1f} | "
              f"{ratio(v, 'A2')} | {ratio(v, 'B')} |")
    else:
        print(f"| {dt} | {t} | {test} | {med['A']:.1f} | {med['B']:.1f} | {ratio(v, 'B')} |")
PY
