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
# 3. for each type, ROUNDS rounds alternating which engine goes first: minigpt bench on the GGUF file and
#    llama-bench on the same file, pp512 and tg128 at THREADS threads; the median of each is printed as a
#    Markdown table with minigpt / llama.cpp.
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
    (cd "$PEER_DIR" && pip download --no-deps --no-binary :all: llama_cpp_python -d sdist >/dev/null)
    tar xzf "$PEER_DIR"/sdist/llama_cpp_python-*.tar.gz -C "$PEER_DIR"
    mv "$PEER_DIR"/llama_cpp_python-*/vendor/llama.cpp "$PEER_DIR/llama.cpp"
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
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for t in ${TYPES//,/ }; do
  f="$PEER_DIR/$NAME-$t.gguf"
  for r in $(seq 1 "$ROUNDS"); do
    order="minigpt llama"
    [ $((r % 2)) -eq 0 ] && order="llama minigpt"
    for e in $order; do
      if [ "$e" = minigpt ]; then
        "$MINIGPT" bench -m "$f" -p 512 -n 128 -t "$THREADS" -r 3 -o json > "$OUT/minigpt-$t-$r.json"
      else
        "$LLAMA/build/bin/llama-bench" -m "$f" -p 512 -n 128 -t "$THREADS" -r 3 -o json > "$OUT/llama-$t-$r.json" 2>/dev/null
      fi
    done
  done
done
python3 - "$OUT" "$TYPES" "$THREADS" <<'PY'
import glob, json, os, statistics, sys
out, types, threads = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
def minigpt_rows(path):
    d = json.load(open(path))
    rows = d["results"] if isinstance(d, dict) and "results" in d else d
    return {r["test"]: r["tok_s"] for r in rows}
def llama_rows(path):
    d = json.load(open(path))
    res = {}
    for r in d:
        name = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        res[name] = r["avg_ts"]
    return res
def rounds(kind, t):  # in round order (sorted as numbers: round 10 after round 9)
    paths = glob.glob(f"{out}/{kind}-{t}-*.json")
    return sorted(paths, key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
print(f"| type | test | minigpt tok/s | llama.cpp tok/s | minigpt / llama.cpp | each round: minigpt / llama.cpp |  ({threads} threads, median of rounds)")
print("|---|---|---:|---:|---:|---|")
for t in types:
    m = [minigpt_rows(p) for p in rounds("minigpt", t)]
    l = [llama_rows(p) for p in rounds("llama", t)]
    for test in ["pp512", "tg128"]:
        a = statistics.median(x[test] for x in m if test in x)
        b = statistics.median(x[test] for x in l if test in x)
        each = ", ".join(f"{x[test]:.0f}/{y[test]:.0f}" for x, y in zip(m, l) if test in x and test in y)
        print(f"| {t} | {test} | {a:.1f} | {b:.1f} | {a / b:.2f} | {each} |")
PY
