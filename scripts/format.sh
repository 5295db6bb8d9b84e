#!/usr/bin/env bash
# Applies .clang-format to every C++ and CUDA source of the project (the files git tracks).
# Usage: scripts/format.sh            format in place
#        scripts/format.sh --check    change nothing; list the files that differ and exit 1 if any (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
CF=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$CF" ] || { echo "format: clang-format not found (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' '*.inc')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$CF" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format ($("$CF" --version | head -1)):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "run scripts/format.sh to fix them" >&2
    exit 1
  fi
  echo "format: all ${#files[@]} files match .clang-format"
else
  "$CF" --style=file -i "${files[@]}"
fi
