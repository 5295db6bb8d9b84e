#!/usr/bin/env bash
# minigpt against llama.cpp on the same machine, the same model, in one interleaved run.
#
# 1. llama.cpp's source from the llama_cpp_python sdist on PyPI (vendor/llama.cpp), built for this CPU into
#    $PEER_DIR (default ~/.cache/minigpt-peer, outside the repository; cached between runs);
# 2. a random GPT-2 of the 124M shape with GPT-2's tokenizer as a Hugging Face directory
#    (bench/make_peer_model.py), converted with llama.cpp's convert_hf_to_gguf.py to F32, F16 and BF16 GGUF
#    (and, with llama-quantize, to the quantized types given in QUANTS); SHAPE=bench/shapes/NAME.json takes
#    that shape instead (e.g. SHAPE=bench/shapes/smollm2-135m.json bench/peer.sh bf16,q8_0,q4_k_m 2 3: a
#    random Llama of SmolLM2-135M's shape with GPT-2's tokenizer, so vocabulary 50257);
# 3. for each type, ROUNDS rounds (at least 5 for a claim: the machine's bandwidth moves by tens of percent
#    within minutes), each round running every engine once in an order that rotates from round to round:
#    minigpt bench, llama.cpp's llama-bench (-fa 1) and, where it is built in $PEER_DIR/ik_llama.cpp/build
#    (or PEERS names it), ik_llama.cpp's llama-bench (-fa 1 -rtr 1), all on the same file at THREADS threads:
#    pp512, tg128 and tg128 after DEPTH tokens in the KV cache (DEPTH=512 by default, or a list: 512,896;
#    0 skips it; llama.cpp's -d, ik_llama.cpp's -gp), an engine's tg rows from one process. The table gives,
#    per test, each engine's median over the rounds, min-max, and the ratio of medians minigpt / peer with
#    the min-max of the per-round ratios.
#    Every engine's KV cache in CACHE_TYPE (f16 by default: llama.cpp's own default, so that a depth row
#    compares the same bytes per cached token; minigpt's CPU default is F32, twice the bytes; CACHE_TYPE=f32
#    runs every engine with an F32 cache).
# Not run in CI (it builds llama.cpp: ~10 minutes on 2 cores). Needs python3 with torch, transformers, gguf.
# Usage: bench/peer.sh [TYPES] [THREADS] [ROUNDS]      e.g. bench/peer.sh f32,f16,bf16 2 3
set -euo pipefail
cd "$(dirname "$0")/.."
TYPES=${1:-f32,f16,bf16}
THREADS=${2:-2}
ROUNDS=${3:-3}
PEER_DIR=${PEER_DIR:-$HOME/.cache/minigpt-peer}
MINIGPT=${MINIGPT:-build/minigpt}
mkdir -p "$PEER_DIR"

# --- llama.cpp ------------------------------------------------------------------------------------------
if [ ! -x "$PEER_DIR/llama.cpp/build/bin/llama-bench" ]; then
  if [ ! -d "$PEER_DIR/llama.cpp" ]; then
    # the version scripts/llama_cpp_tools.sh pins (it builds the test tools from the same copy)
    (cd "$PEER_DIR" && pip download --no-deps --no-binary :all: llama_cpp_python==0.3.36 -d sdist >/dev/null)
    tar xzf "$PEER_DIR"/sdist/llama_cpp_python-0.3.36.tar.gz -C "$PEER_DIR"
    mv "$PEER_DIR"/llama_cpp_python-0.3.36/vendor/llama.cpp "$PEER_DIR/llama.cpp"
  fi
  echo "peer: building llama.cpp in $PEER_DIR/llama.cpp/build" >&2
  cmake -S "$PEER_DIR/llama.cpp" -B "$PEER_DIR/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
  cmake --build "$PEER_DIR/llama.cpp/build" -j"$(nproc)" --target llama-bench llama-quantize llama-completion \
    llama-perplexity >/dev/null
fi
LLAMA="$PEER_DIR/llama.cpp"

# --- the model -------------------------------------------------------------------------------------------
SHAPE=${SHAPE:-}
NAME=gpt2-124m
[ -n "$SHAPE" ] && NAME=$(basename "$SHAPE" .json)
MODEL="$PEER_DIR/$NAME-random"
if [ ! -f "$MODEL/model.safetensors" ]; then
  python3 bench/make_peer_model.py "$MODEL" $SHAPE
fi
convert() {  # convert f32|f16|bf16: llama.cpp's own converter
  python3 "$LLAMA/convert_hf_to_gguf.py" "$MODEL" --outfile "$PEER_DIR/$NAME-$1.gguf" --outtype "$1" >/dev/null 2>&1
}
for t in ${TYPES//,/ }; do
  f="$PEER_DIR/$NAME-$t.gguf"
  [ -f "$f" ] && continue
  case $t in
    f32|f16|bf16) convert "$t" ;;
    *) [ -f "$PEER_DIR/$NAME-f32.gguf" ] || convert f32  # llama-quantize starts from the F32 file
       "$LLAMA/build/bin/llama-quantize" "$PEER_DIR/$NAME-f32.gguf" "$f" "${t^^}" >/dev/null 2>&1 ;;
  esac
done
[ "$ROUNDS" -gt 0 ] || exit 0

# --- interleaved runs ------------------------------------------------------------------------------------
DEPTH=${DEPTH:-512}
CACHE_TYPE=${CACHE_TYPE:-f16}
IK="$PEER_DIR/ik_llama.cpp"
if [ -z "${PEERS:-}" ]; then
  PEERS=llama
  [ -x "$IK/build/bin/llama-bench" ] && PEERS=llama,ik
fi
OUT=${KEEP_DIR:-$(mktemp -d)}
mkdir -p "$OUT"
[ -n "${KEEP_DIR:-}" ] || trap 'rm -rf "$OUT"' EXIT
run_engine() {  # run_engine ENGINE FILE OUT_PREFIX
  # pp512 from one run; tg128 and the depth rows from a second, back to back in one process, so that an
  # engine's depth rows and its tg128 see the same state of the machine (the VM's bandwidth moves between
  # runs seconds apart: bench/results/2026-11-29-gpt2-peer-depth.md).
  local e=$1 f=$2 o=$3 depths=0
  [ "$DEPTH" != 0 ] && depths="0,$DEPTH"
  case $e in
    minigpt)
      "$MINIGPT" bench -m "$f" -p 512 -n 0 -t "$THREADS" -r 3 --cache-type "$CACHE_TYPE" -o json > "$o-0.json"
      "$MINIGPT" bench -m "$f" -p 0 -n 128 -d "$depths" -t "$THREADS" -r 3 --cache-type "$CACHE_TYPE" -o json \
        > "$o-d.json" ;;
    llama)
      "$LLAMA/build/bin/llama-bench" -m "$f" -p 512 -n 0 -t "$THREADS" -r 3 -fa 1 -ctk "$CACHE_TYPE" -ctv "$CACHE_TYPE" \
        -o json > "$o-0.json" 2>/dev/null
      "$LLAMA/build/bin/llama-bench" -m "$f" -p 0 -n 128 -d "$depths" -t "$THREADS" -r 3 -fa 1 \
        -ctk "$CACHE_TYPE" -ctv "$CACHE_TYPE" -o json > "$o-d.json" 2>/dev/null ;;
    ik)
      "$IK/build/bin/llama-bench" -m "$f" -p 512 -n 0 -t "$THREADS" -r 3 -fa 1 -rtr 1 -ctk "$CACHE_TYPE" \
        -ctv "$CACHE_TYPE" -o json > "$o-0.json" 2>/dev/null
      local gp=()
      for d in ${DEPTH//,/ }; do
        if [ "$d" != 0 ]; then gp+=(-gp "$d,128"); fi
      done
      "$IK/build/bin/llama-bench" -m "$f" -p 0 -n 128 "${gp[@]}" -t "$THREADS" -r 3 -fa 1 \
        -rtr 1 -ctk "$CACHE_TYPE" -ctv "$CACHE_TYPE" -o json > "$o-d.json" 2>/dev/null ;;
  esac
  return 0
}
ENGINES="minigpt ${PEERS//,/ }"
read -r -a ENGINE_LIST <<< "$ENGINES"
for t in ${TYPES//,/ }; do
  f="$PEER_DIR/$NAME-$t.gguf"
  for r in $(seq 1 "$ROUNDS"); do
    n=${#ENGINE_LIST[@]}
    for i in $(seq 0 $((n - 1))); do  # round r starts with engine (r - 1) mod n
      e=${ENGINE_LIST[$(((r - 1 + i) % n))]}
      run_engine "$e" "$f" "$OUT/$e-$t-$r"
    done
  done
done
echo "KV cache: $CACHE_TYPE in every engine"
python3 bench/peer_table.py "$OUT" "$TYPES" "$THREADS" "$ENGINES" "$DEPTH"
