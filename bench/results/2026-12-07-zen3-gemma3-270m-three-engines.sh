#!/usr/bin/env bash
# Gemma 3 270M Q4_K_M in minigpt, llama.cpp (-fa 0,1) and ik_llama.cpp (-fa 0,1, -rtr 1), interleaved rounds.
set -u
cd "$(dirname "$0")/../.."
M=~/.cache/minigpt-models/gemma-3-270m-q4_k_m.gguf; L=~/.cache/minigpt-peer/llama.cpp/build/bin
IK=~/.cache/minigpt-peer/ik_llama.cpp/build/bin
for round in 1 2; do
  echo "=== round $round minigpt $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  build/minigpt bench -m $M -p 512 -n 128 -d 0,512,4096 -r 3 -t 2 --cache-type f16
  echo "=== round $round llama.cpp $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  $L/llama-bench -m $M -p 512 -n 128 -d 0,512,4096 -r 3 -t 2 -fa 0,1 2>/dev/null
  echo "=== round $round ik_llama.cpp $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  $IK/llama-bench -m $M -p 512 -n 128 -gp 512,128 -gp 4096,128 -r 3 -t 2 -fa 1 -rtr 1 2>/dev/null
done
echo "=== done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
