#!/usr/bin/env bash
# Peak memory of minigpt and llama.cpp on one GGUF file at a long context, against the bound
#   weights (the tensor data as loaded) + the caches of the layers without a window + SLACK MiB.
# Usage: bench/memory.sh [MODEL.gguf] [N_CTX]   (defaults: the real Gemma 3 270M Q4_K_M from
#        scripts/fetch_gemma3.sh, 32768); MINIGPT=path/to/minigpt, LLAMA=path/to/llama.cpp/build/bin,
#        SLACK (64), CACHE_TYPE (f16).
# Each engine generates 8 tokens after "Hello" with the whole context allocated; peak RSS is
# /usr/bin/time's maximum resident set size. The KV bytes per token of the global layers come from
# `minigpt info`, which prints them by layer kind in F32 (halved here for an F16 or BF16 cache).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:-${MINIGPT_MODELS:-$HOME/.cache/minigpt-models}/gemma-3-270m-q4_k_m.gguf}
N_CTX=${2:-32768}
MINIGPT=${MINIGPT:-$ROOT/build/minigpt}
LLAMA=${LLAMA:-${PEER_DIR:-$HOME/.cache/minigpt-peer}/llama.cpp/build/bin}
SLACK=${SLACK:-64}
CACHE_TYPE=${CACHE_TYPE:-f16}
[ -f "$MODEL" ] || { echo "memory.sh: no model at $MODEL (scripts/fetch_gemma3.sh fetches it)" >&2; exit 2; }

info=$("$MINIGPT" info -m "$MODEL")
echo "$info" | grep -E '^(model|architecture|kv cache|  local|  global|weights)'
# Weights: the sum of the "weights TYPE: N bytes" lines. Global caches: "global: L layers, B bytes per
# token" (or, with no windowed layers, the whole "kv cache: B bytes per token").
weights=$(echo "$info" | awk '/^weights /{for(i=1;i<=NF;i++) if($(i+1)=="bytes"){s+=$i}} END{print s+0}')
per_tok=$(echo "$info" | awk '/^  global:/{for(i=1;i<=NF;i++) if($(i+1)=="bytes"){print $i; exit}}')
[ -n "$per_tok" ] || per_tok=$(echo "$info" | awk '/^kv cache:/{print $3; exit}')
case $CACHE_TYPE in f16|bf16) per_tok=$((per_tok / 2)) ;; esac
mib() { awk -v b="$1" 'BEGIN{printf "%.1f", b / 1048576}'; }
bound=$(awk -v w="$weights" -v k="$per_tok" -v n="$N_CTX" -v s="$SLACK" 'BEGIN{printf "%.1f", (w + k * n) / 1048576 + s}')
echo "weights $(mib "$weights") MiB + unwindowed caches $(mib $((per_tok * N_CTX))) MiB ($per_tok bytes/token x $N_CTX) + $SLACK MiB = bound $bound MiB"

peak() {  # peak NAME COMMAND...: prints NAME's maximum RSS in MiB
  local name=$1 log
  shift
  log=$(mktemp)
  /usr/bin/time -f "maxrss_kb %M" "$@" > /dev/null 2> "$log" || { cat "$log" >&2; rm -f "$log"; return 1; }
  awk -v n="$name" '/^maxrss_kb/{printf "%s peak RSS %.1f MiB\n", n, $2 / 1024}' "$log"
  rm -f "$log"
}
peak minigpt "$MINIGPT" generate -m "$MODEL" -p Hello -n 8 -c "$N_CTX" --cache-type "$CACHE_TYPE" -t 2 --temp 0
if [ -x "$LLAMA/llama-completion" ]; then
  for fa in on off; do
    peak "llama.cpp -fa $fa" "$LLAMA/llama-completion" -m "$MODEL" -p Hello -n 8 -c "$N_CTX" -ctk "$CACHE_TYPE" \
      -ctv "$CACHE_TYPE" -t 2 --temp 0 -no-cnv -fa "$fa"
  done
else
  echo "llama.cpp: not built at $LLAMA (bench/peer.sh builds it)"
fi
