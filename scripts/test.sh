#!/usr/bin/env bash
# Builds minigpt (if needed) and runs the whole test suite through ctest.
# Usage: scripts/test.sh [ctest args...]   (BUILD_DIR=build-asan MINIGPT_SANITIZE=address,undefined for the
# sanitizer build, which is also the portable one)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
extra=()
if [ -n "${MINIGPT_SANITIZE:-}" ]; then
  # No CUDA in the sanitizer build: nvcc is slow, and the normal build already compiles the backend.
  # and the portable variant (no -march=native): the kernels a distribution package would ship, chosen at
  # run time like every build's.
  # -Og -g1 (line tables and function names: what a sanitizer's report shows): -O2 -g took 2.4x as long to
  # compile the test files under ASan as -O1, and -O1 1.6x as long as -Og (2 cores: the whole build 834 s
  # against 516 s; the suite ran in 287 s and 276 s).
  extra+=("-DMINIGPT_SANITIZE=${MINIGPT_SANITIZE}" "-DCMAKE_BUILD_TYPE=RelWithDebInfo" "-DMINIGPT_CUDA=OFF"
          "-DMINIGPT_NATIVE=OFF" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-Og -g1 -DNDEBUG")
  # Leaks are errors; UBSan stops at the first report, with a stack.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
fi
bash scripts/fetch_minja.sh  # the chat templates' engine (setup.sh fetches it too; nothing to do when there)
bash scripts/fetch_xgrammar.sh  # the structured-output engine (as fetch_minja.sh: nothing to do when there)
# .venv: the openai client tests' and the Python package's (nanobind, which the build looks for, numpy, pytest,
# mypy); setup.sh made it, and this is cheap when it is there.
bash scripts/venv.sh
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  BUILD_DIR="$BUILD_DIR" bash scripts/setup.sh "${extra[@]}"
else
  cmake --build "$BUILD_DIR" -j"$(nproc)"
fi
cd "$BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" "$@"
