#!/usr/bin/env bash
# Before / after of a CUDA kernel change on the lent GPU machine: the same minigpt binary runs with the CUDA
# module built from an older src/cuda/ (A) and from the current one (B), chosen by MINIGPT_CUDA_MODULE, in
# interleaved rounds. Only src/cuda/ may differ between the two.
# Here:  rm -rf .gpu/old-cuda && mkdir -p .gpu/old-cuda && git archive REV src/cuda | tar -x -C .gpu/old-cuda
# There: bash scripts/gpu_check.sh build && bash bench/cuda_ab.sh .gpu/old-cuda [ROUNDS] [bench flags...]
#        (AB_BUILT=1: the modules the last run built, for another set of flags)
#        (default flags: --random gpt2 --dtype f16 -p 0 -n 128 -d 0,512,768 -r 5)
set -uo pipefail
OLD=${1:?usage: bench/cuda_ab.sh OLD_TREE [ROUNDS] [minigpt bench flags]}
ROUNDS=${2:-3}
shift $(($# < 2 ? $# : 2))
FLAGS=("$@")
# shellcheck disable=SC2054 # the commas are minigpt bench list values
[ ${#FLAGS[@]} -gt 0 ] || FLAGS=(--random gpt2 --dtype f16 -p 0 -n 128 -d 0,512,768 -r 5)
B=${BUILD:-/tmp/gpu-build} L=/opt/dep/usr/lib/x86_64-linux-gnu W=/tmp/cuda-ab
export LD_LIBRARY_PATH=$L:$L/openblas-pthread:${LD_LIBRARY_PATH:-}
[ -x "$B"/minigpt ] || { echo "no $B/minigpt: run scripts/gpu_check.sh build first"; exit 1; }
[ -d "$OLD/src/cuda" ] || { echo "no $OLD/src/cuda"; exit 1; }
mkdir -p $W
if [ "${AB_BUILT:-0}" = 1 ] && [ -f $W/A.so ] && [ -f $W/B.so ]; then
  echo "(A and B as the last run built them)"
else
  cp "$B"/libminigpt-cuda.so $W/B.so
  rm -rf $W/cuda-now && cp -r src/cuda $W/cuda-now
  # Build A in the same build tree with the old sources, then put the current ones (and module) back.
  cp "$OLD"/src/cuda/* src/cuda/
  cmake --build "$B" --target minigpt_cuda > $W/build-A.txt 2>&1 || { tail -20 $W/build-A.txt; }
  cp "$B"/libminigpt-cuda.so $W/A.so
  rm -rf src/cuda && cp -r $W/cuda-now src/cuda
  cmake --build "$B" --target minigpt_cuda > $W/build-B.txt 2>&1 || { tail -20 $W/build-B.txt; }
  cmp -s $W/A.so $W/B.so && echo "(A and B are the same module)"
fi
for r in $(seq "$ROUNDS"); do
  for v in A B; do
    echo "=== round $r: $v"
    MINIGPT_CUDA_MODULE=$W/$v.so timeout 200 "$B"/minigpt bench --backend cuda "${FLAGS[@]}" 2>&1 | grep -E '^\| '
  done
done
