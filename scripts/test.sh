#!/usr/bin/env bash
# Builds minigpt (if needed) and runs the whole test suite through ctest.
# Usage: scripts/test.sh [ctest args...]   (BUILD_DIR=build-asan MINIGPT_SANITIZE=address,undefined for the sanitizer build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
extra=()
[ -n "${MINIGPT_SANITIZE:-}" ] && extra+=("-DMINIGPT_SANITIZE=${MINIGPT_SANITIZE}" "-DCMAKE_BUILD_TYPE=RelWithDebInfo")
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  BUILD_DIR="$BUILD_DIR" bash scripts/setup.sh "${extra[@]}"
else
  cmake --build "$BUILD_DIR" -j"$(nproc)"
fi
cd "$BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" "$@"
