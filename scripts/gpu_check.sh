#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, as one script for the lent GPU machine (nvcc, CMake, ninja, Python with
# torch; no package registry). Here, first: scripts/gpu_prepare.sh (fills the ignored .gpu/ and third_party/).
# There, from the project root, with .gpu and third_party carried (.gpu/dep.tar.xz: the Debian packages, unpacked):
#   bash scripts/gpu_check.sh [build] [test] [greedy] [bench] [serve] [sanitize] [peer]   (default: all but peer)
#   build   : minigpt, minigpt_tests and the CUDA module for sm_${ARCH:-90} against .gpu/dep.tar.xz (unpacked to /opt/dep)
#             (TARGETS: other build targets, e.g. "minigpt minigpt_cuda" when no test runs)
#   test    : every Cuda* test (minigpt_tests --gtest_filter='Cuda*'), with the [ measured ] lines
#   greedy  : greedy text, CPU == CUDA, on the shipped model and on a random GPT-2 124M (stored F32)
#   ab      : bench/cuda_ab.sh: the CUDA module built from .gpu/old-cuda/src/cuda (an older revision, put there
#             here with `git archive REV src/cuda | tar -x -C .gpu/old-cuda`) against this one, same binary,
#             AB_ROUNDS (3) interleaved rounds of decode on the random 124M at F16 and its Q8_0 file
#   bench   : minigpt bench --backend cuda: --random gpt2 at F32/F16/BF16, and Q8_0/Q4_0/Q4_K_M GGUF files
#             that minigpt quantize made from the same random 124M
#   sanitize: compute-sanitizer memcheck over the CUDA tests, racecheck over the op tests
#   serve   : minigpt serve --backend cpu and --backend cuda on the shipped model, compared by
#             tools/serve_check.py (greedy text, n > 1 choices sharing a prompt, the prompt cache)
#   peer    : llama.cpp built with CUDA from .gpu/llama.tgz (scripts/gpu_prepare.sh peer) in the background from
#             the start; the random 124M converted by its convert_hf_to_gguf.py (F16, BF16) and llama-quantize
#             (Q8_0, Q4_0, Q4_K_M); llama-bench (-fa PEER_FA, default 0,1) and minigpt bench on each of those
#             same files, pp512 and tg128 at depths 0 and 512, PEER_ROUNDS (1) interleaved rounds of PEER_TYPES
# Logs under $OUT (or .gpu/out): log.txt plus one file per step, 8 files at most.
O=${OUT:-.gpu/out}
mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
steps=${*:-build test greedy bench serve sanitize}
has() { [[ " $steps " == *" $1 "* ]]; }
T0=$(date +%s)
el() { echo "=== [$(($(date +%s) - T0))s] $*"; }
# BUDGET (seconds, default 600): the peer and sanitizer steps take what is left of it, so the script ends
# inside a device call.
left() { echo $((${BUDGET:-600} - ($(date +%s) - T0) - ${1:-0})); }
R=$PWD G=$PWD/.gpu W=/tmp/gpu-work B=/tmp/gpu-build ARCH=${ARCH:-90}
mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1
D=/opt/dep L=/opt/dep/usr/lib/x86_64-linux-gnu
J=$(nproc)
# (A llama.cpp this machine built already, or is building, in $W/lb is used as it is.)
if has peer && [ ! -f $W/llama.started ]; then
  touch $W/llama.started
  el "llama.cpp CUDA build (background)"
  J=4
  rm -rf $W/llama.cpp && tar -xzf "$G/llama.tgz" -C $W
  (cmake -S $W/llama.cpp -B $W/lb -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_COMMIT="$(cat "$G/llama.commit" 2> /dev/null || echo unknown)" \
    > $W/llama-cmake.txt 2>&1 &&
    nice cmake --build $W/lb -j12 --target llama-bench llama-quantize > $W/llama-build.txt 2>&1
  echo "rc $?" > $W/llama.done) &
fi
export LD_LIBRARY_PATH=$L:$L/openblas-pthread:${LD_LIBRARY_PATH:-}
if has build; then
  el "unpack the packages"
  mkdir -p $D
  tar -C $D -xJf "$G/dep.tar.xz"
  ln -sf pkgconf $D/usr/bin/pkg-config
  export PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_LIBDIR=$L/openblas-pthread/pkgconfig:$L/pkgconfig:$D/usr/share/pkgconfig
  el "configure + build (CUDA sm_$ARCH)"
  cmake -S "$R" -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINIGPT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DCMAKE_CUDA_FLAGS=-lineinfo \
    -DCMAKE_PREFIX_PATH=$D/usr -DPKG_CONFIG_EXECUTABLE=$D/usr/bin/pkgconf > "$O/build.txt" 2>&1 ||
    {
      tail -30 "$O/build.txt"
      exit 1
    }
  cmake --build $B -j"$J" --target ${TARGETS:-minigpt minigpt_tests minigpt_cuda} >> "$O/build.txt" 2>&1 ||
    {
      grep -m5 -A12 'error' "$O/build.txt"
      exit 1
    }
  grep -c 'warning:' "$O/build.txt" | sed 's/^/build warnings: /'
fi
if has test; then
  el "CUDA tests"
  timeout 200 $B/minigpt_tests --gtest_filter='Cuda*' > "$O/cuda-tests.txt" 2>&1
  echo "rc $?"
  grep -E '^\[ measured \]|FAILED|Failure|^\[  PASSED|^\[  SKIPPED|error' "$O/cuda-tests.txt" | head -80
fi
if has greedy || has bench || has peer || has ab; then
  [ -d $W/gpt2-rand ] || python3 "$G/make_weights.py" $W/gpt2-rand tests/fixtures/gpt2-tokenizer --seed 1234 > /dev/null
fi
if has greedy; then
  el "greedy cpu == cuda"
  for m in models/shakespeare-char $W/gpt2-rand; do
    p="ROMEO:"
    [ "$m" = models/shakespeare-char ] || p="The meaning of life is"
    for be in cpu cuda; do
      timeout 120 $B/minigpt generate -m $m -p "$p" --temperature 0 --max-new-tokens 100 --backend $be \
        > $W/greedy-$be.txt 2> $W/greedy-$be.err || {
        echo "$m $be failed:"
        cat $W/greedy-$be.err
      }
    done
    cmp -s $W/greedy-cpu.txt $W/greedy-cuda.txt && echo "greedy $m: identical ($(wc -c < $W/greedy-cpu.txt) bytes)" ||
      {
        echo "greedy $m: DIFFERENT"
        head -c 400 $W/greedy-cpu.txt
        echo
        head -c 400 $W/greedy-cuda.txt
        echo
      }
  done
fi
if has ab; then
  el "A/B: .gpu/old-cuda's CUDA module against this one"
  [ -f $W/gpt2-q8_0.gguf ] || $B/minigpt quantize $W/gpt2-rand $W/gpt2-q8_0.gguf --type q8_0 > /dev/null
  {
    BUILD=$B bash bench/cuda_ab.sh "$G/old-cuda" "${AB_ROUNDS:-3}" --random gpt2 --dtype f16 -p 0 -n 128 -d 0,512 -r 5
    AB_BUILT=1 BUILD=$B bash bench/cuda_ab.sh "$G/old-cuda" "${AB_ROUNDS:-3}" -m $W/gpt2-q8_0.gguf -p 0 -n 128 -d 0,512 -r 5
  } 2>&1 | tee "$O/ab.md"
fi
if has bench; then
  el "bench"
  timeout 200 $B/minigpt bench --random gpt2 --backend cuda --dtype "${BENCH_DTYPES:-f32,f16,bf16}" -p 512 -n 128 -d 0,512 -r 5 |
    tee "$O/bench.md"
  for t in q8_0 q4_0 q4_k_m; do
    $B/minigpt quantize $W/gpt2-rand $W/gpt2-$t.gguf --type $t > /dev/null || echo "quantize $t failed"
    timeout 100 $B/minigpt bench -m $W/gpt2-$t.gguf --backend cuda -p 512 -n 128 -d 0,512 -r 3 2>&1
  done | tee "$O/bench-quant.md"
fi
if has serve; then
  el "serve: cpu against cuda"
  $B/minigpt serve -m models/shakespeare-char --backend cpu --parallel 4 --port 8401 > $W/serve-cpu.txt 2>&1 &
  p1=$!
  $B/minigpt serve -m models/shakespeare-char --backend cuda --parallel 4 --port 8402 > $W/serve-cuda.txt 2>&1 &
  p2=$!
  for i in $(seq 60); do
    curl -sf localhost:8401/health > /dev/null && curl -sf localhost:8402/health > /dev/null && break
    sleep 0.5
  done
  timeout 120 python3 tools/serve_check.py http://127.0.0.1:8401 http://127.0.0.1:8402
  echo "rc $?"
  kill $p1 $p2 2> /dev/null
  tail -3 $W/serve-cuda.txt
fi
if has sanitize && command -v compute-sanitizer > /dev/null && [ "$(left 40)" -gt 30 ]; then
  el "compute-sanitizer memcheck"
  timeout "$(left 40)" compute-sanitizer --tool memcheck --print-limit 20 $B/minigpt_tests \
    --gtest_filter='CudaOps.*:CudaBackend.*:CudaModel.QuantizedBlocks*:CudaModel.KeepingAPrefix*:CudaModel.GraphPath*:CudaModel.ThreeSequences*' \
    > "$O/sanitizer.txt" 2>&1
  echo "rc $?"
  tail -4 "$O/sanitizer.txt"
  el "compute-sanitizer racecheck"
  timeout "$(left 5)" compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 10 $B/minigpt_tests \
    --gtest_filter='CudaOps.*' > "$O/racecheck.txt" 2>&1
  echo "rc $?"
  grep -m12 -A3 -E '^========= (Error|Warning)' "$O/racecheck.txt"
  tail -2 "$O/racecheck.txt"
fi
if has peer; then
  el "waiting for llama.cpp"
  while [ ! -f $W/llama.done ] && [ "$(left 150)" -gt 0 ]; do sleep 2; done
  if grep -q 'rc 0' $W/llama.done 2> /dev/null; then
    el "same weights for both: llama.cpp's converter and llama-quantize"
    export PYTHONPATH=$W/llama.cpp/gguf-py
    for t in f16 bf16; do
      python3 $W/llama.cpp/convert_hf_to_gguf.py $W/gpt2-rand --outtype $t --outfile $W/g-$t.gguf > $W/convert-$t.txt 2>&1 ||
        {
          tail -3 $W/convert-$t.txt
          echo "(llama.cpp's converter failed: $t from minigpt quantize instead)"
          $B/minigpt quantize $W/gpt2-rand $W/g-$t.gguf --type $t > /dev/null
        }
    done
    for t in q8_0 q4_0 q4_k_m; do $W/lb/bin/llama-quantize $W/g-f16.gguf $W/g-$t.gguf $t > /dev/null 2>&1; done
    el "llama-bench and minigpt bench, file by file, PEER_ROUNDS (1) rounds"
    for r in $(seq "${PEER_ROUNDS:-1}"); do
      for t in ${PEER_TYPES:-f16 bf16 q8_0 q4_0 q4_k_m}; do
        [ "$(left 30)" -gt 0 ] || break
        echo "=== round $r: $t"
        timeout 60 $W/lb/bin/llama-bench -m $W/g-$t.gguf -ngl 99 -p 512 -n 128 -d 0,512 -fa "${PEER_FA:-0,1}" -r 5 \
          -o md 2> /dev/null | grep -E '^\| gpt2'
        timeout 60 $B/minigpt bench -m $W/g-$t.gguf --backend cuda -p 512 -n 128 -d 0,512 -r 5 2>&1 | grep -E '^\| /'
      done
    done | tee "$O/peer.md"
  else
    echo "llama.cpp did not build in time: $(cat $W/llama.done 2> /dev/null || echo still building)"
    tail -5 $W/llama-build.txt
  fi
fi
el done
