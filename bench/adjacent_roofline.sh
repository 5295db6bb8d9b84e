#!/usr/bin/env bash
# Each engine's decode against the bandwidth read right beside it, minigpt and llama.cpp in turn.
#
# On a shared VM the read bandwidth moves within milliseconds and from minute to minute
# (bench/results/2026-11-29-paired-roofline.md), so a tok/s ratio between two engines run a few seconds apart
# carries the machine's drift. Here every decode run (one process, -r 1, N tokens) has build/bw_series read
# the bytes of one of its steps 8 times just before it and 8 times just after; the run's fraction of the
# roofline is its GB/s (tok/s x the step's bytes, minigpt's accounting for this file: weights + F16 KV cache
# at the mean position) over the mean of the two medians. Both engines are measured the same way, so their
# fractions compare the engines under the same conditions, and the ratio of fractions is the engines' speed
# ratio with the bandwidth's drift taken out.
# Usage: bench/adjacent_roofline.sh FILE.gguf [ROUNDS] [THREADS] [N]   (default 10 rounds, 2 threads, tg128)
# LLAMA_BENCH=PATH, PEER_ARGS="..." and PEER_NAME=NAME run another llama-bench (ik_llama.cpp's: PEER_ARGS="-rtr 1"
# PEER_NAME=ik_llama.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=$1
ROUNDS=${2:-10}
THREADS=${3:-2}
N=${4:-128}
PEER_DIR=${PEER_DIR:-$HOME/.cache/minigpt-peer}
MINIGPT=${MINIGPT:-build/minigpt}
BW=${BW:-build/bw_series}
LLAMA_BENCH=${LLAMA_BENCH:-$PEER_DIR/llama.cpp/build/bin/llama-bench}
read -r -a PEER_EXTRA <<< "${PEER_ARGS:-}"
PEER_NAME=${PEER_NAME:-llama.cpp}

bytes=$("$MINIGPT" bench -m "$FILE" -p 0 -n "$N" -r 1 -t "$THREADS" --cache-type f16 -o json |
  python3 -c 'import json, sys; print(int(json.load(sys.stdin)["results"][0]["bytes_per_token"]))')
mb=$(( (bytes + (1 << 20) - 1) >> 20 ))
read_gbs() {  # the median of 8 reads of one step's bytes
  "$BW" "$mb" 8 "$THREADS" | grep -v '^#' | tr ' ' '\n' | sort -n | sed -n 4,5p |
    awk '{ s += $1 } END { printf "%.2f", s / NR }'
}
run() {  # tok/s of one decode run
  if [ "$1" = minigpt ]; then
    "$MINIGPT" bench -m "$FILE" -p 0 -n "$N" -r 1 -t "$THREADS" --cache-type f16 -o json |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["results"][0]["tok_s"])'
  else
    "$LLAMA_BENCH" -m "$FILE" -p 0 -n "$N" -r 1 -t "$THREADS" -fa 1 -ctk f16 -ctv f16 \
      ${PEER_EXTRA[@]+"${PEER_EXTRA[@]}"} -o json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])'
  fi
}
echo "# $FILE, tg$N, $THREADS threads, $bytes bytes per step, reads of $mb MB"
echo "# round engine tok/s read_before read_after fraction"
out=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
  engines="minigpt peer"
  [ $((r % 2)) = 0 ] && engines="peer minigpt"
  for e in $engines; do
    b=$(read_gbs)
    t=$(run "$e")
    a=$(read_gbs)
    name=$e
    [ "$e" = peer ] && name=$PEER_NAME
    python3 -c "print($r, '$name', '%.1f' % $t, $b, $a, '%.3f' % ($t * $bytes / 1e9 / (($b + $a) / 2)))" | tee -a "$out"
  done
done
python3 - "$out" "$PEER_NAME" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
frac = {}
for r, e, t, b, a, f in rows:
    frac.setdefault(e, {})[int(r)] = (float(t), float(f))
for e, v in frac.items():
    fs = sorted(x[1] for x in v.values()); ts = sorted(x[0] for x in v.values())
    print(f"{e}: tok/s median {statistics.median(ts):.1f} ({ts[0]:.1f}-{ts[-1]:.1f}), "
          f"fraction of the adjacent read median {statistics.median(fs):.3f} ({fs[0]:.3f}-{fs[-1]:.3f})")
m, l = frac["minigpt"], frac[sys.argv[2]]
raw = sorted(m[r][0] / l[r][0] for r in m if r in l)
norm = sorted(m[r][1] / l[r][1] for r in m if r in l)
print(f"minigpt / {sys.argv[2]} per round: tok/s {statistics.median(raw):.3f} ({raw[0]:.3f}-{raw[-1]:.3f}), "
      f"bandwidth-normalized {statistics.median(norm):.3f} ({norm[0]:.3f}-{norm[-1]:.3f})")
PY
rm -f "$out"
