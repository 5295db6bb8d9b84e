#!/usr/bin/env bash
# The Python package as a user gets it: `pip wheel .` builds the wheel (scikit-build-core runs CMakeLists.txt in
# a build directory of its own, so the library is compiled again: through ccache when it is installed), a fresh
# virtual environment installs it (and numpy from PyPI), and a smoke test runs there, outside the source tree:
# import, load the shipped model, generate, logits, an error with the CLI's message.
# Usage: scripts/python_wheel.sh [WORK_DIR]   (default: a temporary directory, removed at the end)
#        MINIGPT_CUDA=OFF scripts/python_wheel.sh   (the CUDA module is built into the wheel where nvcc is found,
#        as in every build (AUTO); OFF leaves it out, and nvcc's minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ $# -gt 0 ]; then
  work=$1
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
args=(-Ccmake.define.MINIGPT_CUDA="${MINIGPT_CUDA:-AUTO}")
if command -v ccache > /dev/null; then
  args+=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -Ccmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
bash scripts/fetch_minja.sh  # CMakeLists.txt wants it at configure time
bash scripts/fetch_xgrammar.sh  # likewise
start=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip wheel . --no-deps -q --disable-pip-version-check \
  -w "$work/dist" -Cbuild-dir="$work/build" "${args[@]}"
built=$(date +%s)
wheel=$(ls "$work"/dist/minigpt-*.whl)
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
cd "$work"
"$work/venv/bin/python" - "$root" <<'PY'
import sys
from pathlib import Path

import numpy as np

import minigpt

root = Path(sys.argv[1])
assert "site-packages" in minigpt.__file__, minigpt.__file__
m = minigpt.Model(str(root / "models" / "shakespeare-char"), threads=2)
r = m.generate("ROMEO:", max_new_tokens=40, temperature=0)
# transformers' greedy continuation (tests/fixtures/shakespeare-char/greedy.json)
assert r.text == "\nI will not thee the to the county of the sea\nThat the seat of t"[:40], repr(r.text)
x = m.logits(m.tokenizer.encode("ROMEO:"))
assert x.shape == (6, 256) and x.dtype == np.float32
try:
    minigpt.Model("/nonexistent")
    raise AssertionError("no error")
except minigpt.IoError as e:
    assert str(e) == "model directory '/nonexistent' does not exist", e
print(f"wheel smoke test: ok ({Path(minigpt.__file__).parent})")
PY
end=$(date +%s)
echo "python_wheel: $(basename "$wheel"): built in $((built - start)) s, installed and tested in $((end - built)) s"
