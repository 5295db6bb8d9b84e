#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz/ and runs each for SECONDS (default 60)
# on a scratch copy of its seed corpus (tests/fuzz/corpus/<target>/, which stays small), FUZZ_PARALLEL
# targets at a time (default: the number of cores, at most 4; each campaign keeps one core busy).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]      (TARGET: fuzz_safetensors, fuzz_config, ...)
# Exits non-zero if any target crashes, times out, or reports; the input is kept in build-fuzz/artifacts/.
# Such an input goes into tests/fuzz/regressions/ with a test in tests/test_fuzz_regressions.cpp (ctest runs
# it) that fails until the parser is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
ALL=(fuzz_safetensors fuzz_config fuzz_tokenizer_load fuzz_encode fuzz_id_list fuzz_logits_file fuzz_gguf fuzz_llmc fuzz_llama2c fuzz_spm_files fuzz_server_request fuzz_chat_request fuzz_chat_template fuzz_grammar fuzz_prompt_file)
[ $# -gt 0 ] && TARGETS=("$@") || TARGETS=("${ALL[@]}")
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}

# The longest input worth trying per target: a few headers / files, a paragraph, a line of ids.
declare -A MAX_LEN=([fuzz_safetensors]=4096 [fuzz_config]=4096 [fuzz_tokenizer_load]=8192 [fuzz_encode]=1024
                    [fuzz_id_list]=256 [fuzz_logits_file]=4096 [fuzz_gguf]=4096
                    [fuzz_llmc]=2048 [fuzz_llama2c]=2048 [fuzz_spm_files]=32768 [fuzz_server_request]=2048
                    [fuzz_chat_request]=2048 [fuzz_chat_template]=4096 [fuzz_grammar]=2048 [fuzz_prompt_file]=1024)

if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: installing clang and libFuzzer"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q clang libclang-rt-14-dev
fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINIGPT_FUZZ=ON \
    -DMINIGPT_CUDA=OFF -DMINIGPT_NATIVE=OFF -DBUILD_TESTING=OFF
fi
cmake --build "$BUILD_DIR" -j"${FUZZ_JOBS:-2}" --target "${TARGETS[@]}"

# One campaign: its report goes to logs/<target>.out, printed once all have run, in order.
run_one() {
  local t=$1 corpus="$BUILD_DIR/corpus/$1" artifacts="$BUILD_DIR/artifacts/$1" log="$BUILD_DIR/logs/$1.log"
  local status=0
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $t for ${SECONDS_EACH}s (log: $log)"
  # -fork=1: the campaign goes on after a timeout (a shared machine stalls now and then, which libFuzzer's
  # wall-clock timer counts); every timeout input is run again below and must finish well inside the limit.
  # A crash or sanitizer report stops the campaign and fails.
  if "$BUILD_DIR/$t" "$corpus" -fork=1 -ignore_timeouts=1 -ignore_ooms=0 -ignore_crashes=0 \
      -max_total_time="$SECONDS_EACH" -max_len="${MAX_LEN[$t]}" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1; then
    grep -E '^#[0-9]+: cov:' "$log" | tail -1 || tail -1 "$log"
    # The corpus it grew, replayed in one process: libFuzzer's usual cov/ft figures.
    "$BUILD_DIR/$t" "$corpus" -runs=0 -max_len="${MAX_LEN[$t]}" 2>&1 | grep -E 'INITED|DONE' | tail -1 || true
  else
    echo "fuzz: $t FAILED; see $log and $artifacts/"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5 || true
    status=1
  fi
  for a in "$artifacts"/timeout-*; do
    [ -e "$a" ] || continue
    start=$(date +%s.%N)
    if timeout 10 "$BUILD_DIR/$t" "$a" >/dev/null 2>&1; then
      echo "fuzz: $t: $(basename "$a") reran in $(echo "$(date +%s.%N) - $start" | bc) s: a stall of the machine, not a hang"
    else
      echo "fuzz: $t: $(basename "$a") still times out or fails: a real hang"
      status=1
    fi
  done
  return $status
}

mkdir -p "$BUILD_DIR/logs"
cores=$(nproc)
PARALLEL=${FUZZ_PARALLEL:-$((cores < 4 ? cores : 4))}
status=0
running=0
for t in "${TARGETS[@]}"; do
  if [ "$running" -ge "$PARALLEL" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_one "$t" >"$BUILD_DIR/logs/$t.out" 2>&1 &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
for t in "${TARGETS[@]}"; do cat "$BUILD_DIR/logs/$t.out"; done
exit $status
