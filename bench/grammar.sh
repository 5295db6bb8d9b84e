#!/usr/bin/env bash
# The constraint engines on real vocabularies (docs/structured-output.md): xgrammar through its C++ core as
# minigpt builds it (build/bench_grammar), llguidance through its PyPI wheel in a scratch venv (its Rust core;
# crates.io is out of reach here, so its C API cannot be built from source). Same vocabulary bytes, same
# schema (bench/grammar/schema.json), same token ids of the same JSON text (bench/grammar/sample.json,
# tokenized by minigpt). Writes the raw output to bench/results/grammar-engines.txt.
# Usage: bench/grammar.sh [BUILD_DIR]   (SMOLLM2_GGUF=path overrides the SmolLM2 file, LLAMA_CPP_GRAMMARS
# the folder of llama.cpp's grammars)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SMOL=${SMOLLM2_GGUF:-$HOME/.cache/minigpt-models/SmolLM2-135M-Instruct.Q4_1.gguf}
VENV=${LLG_VENV:-/tmp/llguidance-venv}
GRAMMARS=${LLAMA_CPP_GRAMMARS:-$HOME/.cache/minigpt-peer/llama.cpp/grammars}  # llama.cpp's grammars/
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "llguidance==1.9.1" numpy
fi
out=bench/results/grammar-engines.txt
mkdir -p bench/results
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# bench/grammar.sh, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: other builds ran beside)"
  for vocab in tests/fixtures/ggml-vocab/ggml-vocab-qwen2.gguf "$SMOL"; do
    echo
    echo "## $(basename "$vocab")"
    "$BUILD/bench_grammar" "$vocab" bench/grammar/schema.json bench/grammar/sample.json --repeat 5 --dump "$tmp/d"
    "$VENV/bin/python" bench/grammar_llguidance.py "$tmp/d" bench/grammar/schema.json --repeat 5
  done
  echo
  echo "## llama.cpp's GBNF grammars ($GRAMMARS) through xgrammar's EBNF reader"
  "$BUILD/bench_grammar" --parse-gbnf "$GRAMMARS"/*.gbnf | sed "s|$GRAMMARS/||"
} 2>&1 | tee "$out"
