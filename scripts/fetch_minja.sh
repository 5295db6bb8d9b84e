#!/usr/bin/env bash
# Fetches minja (the chat templates' Jinja engine) into third_party/minja/, checked by SHA-256 and patched:
# scripts/fetch_minja.cmake does it (CMakeLists.txt runs the same file at configure time, so a build fetches
# it too). Does nothing when the patched headers are already there.
# Usage: scripts/fetch_minja.sh      (offline: MINIGPT_MINJA_SDIST=llama_cpp_python-0.3.16.tar.gz scripts/fetch_minja.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cmake -P scripts/fetch_minja.cmake
