#!/usr/bin/env bash
# Runs the CPU kernel tests once per kernel level this binary holds and this CPU runs, with MINIGPT_CPU
# forcing the level (so the public cpu:: functions, and the backend, run that level's code too).
# Usage: scripts/test_kernel_levels.sh [BUILD_DIR]   (default: build)
set -euo pipefail
build=${1:-build}
tests="$build/minigpt_tests"
[[ -x "$tests" ]] || { echo "no $tests: build the minigpt_tests target first" >&2; exit 2; }
# The supported levels, as the binary reports them ("[ measured ] kernel level X; supported: a b; ...").
line=$(MINIGPT_CPU= "$tests" --gtest_filter='KernelLevels.ChosenLevelIsSupported' | grep 'supported:' || true)
[[ -n "$line" ]] || { echo "could not read the supported levels from $tests" >&2; exit 1; }
levels=$(sed -E 's/.*supported:([^;]*);.*/\1/' <<<"$line")
echo "$line"
status=0
for level in $levels; do
  echo "=== MINIGPT_CPU=$level"
  if MINIGPT_CPU=$level "$tests" --gtest_brief=1 --gtest_filter='*Kernels*:Half*:KernelLevels*:Batch*'; then
    echo "=== $level: passed"
  else
    echo "=== $level: FAILED"
    status=1
  fi
done
exit $status
