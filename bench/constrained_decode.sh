#!/usr/bin/env bash
# Constrained decoding against plain decoding on the same model, prompt and length (issue: structured output
# at >= 0.9x plain tg128): `minigpt generate -n 128` with and without a JSON Schema that cannot end inside 128
# tokens (an array of at least 200 strings), greedy, runs interleaved, the decode speed of each run from
# generate's --json summary (decode_tok_s), then the medians and their ratio.
# Usage: bench/constrained_decode.sh MODEL [RUNS (default 5)] [THREADS (default: all cores)]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$1
RUNS=${2:-5}
THREADS=${3:-$(nproc)}
CLI=${MINIGPT_CLI:-build/minigpt}
SCHEMA='{"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 200}'
PROMPT='Fruits, as a JSON array of names:'
speed() { "$CLI" generate -m "$MODEL" -p "$PROMPT" -n 128 --temperature 0 -t "$THREADS" --json "$@" 2>/dev/null |
  tail -1 | python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print(s["decode_tok_s"], s["generated_tokens"])'; }
echo "model $MODEL, threads $THREADS, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
plain=() constrained=()
for i in $(seq "$RUNS"); do
  read -r p n1 < <(speed --ignore-eos)
  read -r c n2 < <(speed --ignore-eos --json-schema "$SCHEMA")
  echo "run $i: plain $p tok/s ($n1 tokens), constrained $c tok/s ($n2 tokens)"
  plain+=("$p") constrained+=("$c")
done
python3 - "${plain[*]}" "${constrained[*]}" <<'PY'
import statistics, sys
p = [float(x) for x in sys.argv[1].split()]
c = [float(x) for x in sys.argv[2].split()]
mp, mc = statistics.median(p), statistics.median(c)
print(f"median: plain {mp:.2f} tok/s, constrained {mc:.2f} tok/s, ratio {mc / mp:.3f}")
PY
