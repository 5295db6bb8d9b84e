#!/usr/bin/env bash
# llama.cpp's llama-completion, llama-quantize and llama-tokenize, for the tests that check minigpt's GGUF
# files against llama.cpp itself (tests/test_llama_cpp_interop.cpp). The source is the llama.cpp vendored in
# the llama_cpp_python 0.3.36 sdist on PyPI (checked against its SHA-256; the version the fixtures and
# bench/peer.sh's numbers come from), built once per machine into $PEER_DIR/llama.cpp (default
# ~/.cache/minigpt-peer, outside the clone), only those three tools (no tests, examples or server). A copy
# bench/peer.sh unpacked there is used as it is when its sources are this version's.
# Usage: scripts/llama_cpp_tools.sh    prints the folder holding the three binaries on stdout (messages go to
#                                      stderr); when they are already built it only prints it.
# Exit status: 0 done, 3 no network (one line on stderr; the tests skip), 1 any other failure.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
PEER_DIR=${PEER_DIR:-$HOME/.cache/minigpt-peer}
STAMP=llama_cpp_python-$VERSION  # written into SRC/.minigpt-source once SRC is known to be this version
TARGETS=(llama-completion llama-quantize llama-tokenize)

built() {  # built DIR: DIR is this version's source with the three tools built
  [ "$(cat "$1/.minigpt-source" 2> /dev/null)" = "$STAMP" ] || return 1
  for t in "${TARGETS[@]}"; do [ -x "$1/build/bin/$t" ] || return 1; done
}
for d in "$PEER_DIR/llama.cpp" "$PEER_DIR/llama.cpp-$VERSION"; do
  if built "$d"; then
    echo "$d/build/bin"
    exit 0
  fi
done

mkdir -p "$PEER_DIR/sdist"
exec 9> "$PEER_DIR/.llama_cpp_tools.lock"
flock 9  # one build at a time on this machine; a second caller waits, then finds it built
for d in "$PEER_DIR/llama.cpp" "$PEER_DIR/llama.cpp-$VERSION"; do
  if built "$d"; then
    echo "$d/build/bin"
    exit 0
  fi
done

sha() { sha256sum "$1" 2> /dev/null | cut -d' ' -f1; }
TARBALL=$PEER_DIR/sdist/llama_cpp_python-$VERSION.tar.gz
if [ "$(sha "$TARBALL")" != "$SHA" ]; then
  # Any python3 with pip will do (the project's .venv has one when python3-pip is not installed).
  PY=python3
  python3 -m pip --version > /dev/null 2>&1 || PY=.venv/bin/python
  INDEX=${PIP_INDEX_URL:-$("$PY" -m pip config get global.index-url 2> /dev/null || echo https://pypi.org/simple/)}
  if ! "$PY" - "${INDEX%/}/llama-cpp-python/" > /dev/null 2>&1 << 'EOF'; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=15).read(1)
EOF
    echo "llama_cpp_tools: no network: cannot reach the package index $INDEX for llama_cpp_python==$VERSION" >&2
    exit 3
  fi
  echo "llama_cpp_tools: downloading the llama_cpp_python $VERSION sdist from PyPI (~70 MB)" >&2
  rm -f "$TARBALL"
  "$PY" -m pip download -q --no-deps --no-binary :all: --disable-pip-version-check \
    "llama_cpp_python==$VERSION" -d "$PEER_DIR/sdist" >&2
  if [ "$(sha "$TARBALL")" != "$SHA" ]; then
    echo "llama_cpp_tools: error: $TARBALL has SHA-256 $(sha "$TARBALL"), expected $SHA" >&2
    exit 1
  fi
fi

# The source: bench/peer.sh's copy in $PEER_DIR/llama.cpp when it is this version's, else this script's own.
IN_TAR=llama_cpp_python-$VERSION/vendor/llama.cpp
SRC=$PEER_DIR/llama.cpp
if [ -d "$SRC" ] && [ "$(cat "$SRC/.minigpt-source" 2> /dev/null)" != "$STAMP" ]; then
  for f in CMakeLists.txt include/llama.h src/llama-quant.cpp ggml/src/ggml-quants.c \
    tools/completion/completion.cpp tools/quantize/quantize.cpp; do
    if ! tar -xzOf "$TARBALL" "$IN_TAR/$f" 2> /dev/null | cmp -s - "$SRC/$f"; then
      SRC=$PEER_DIR/llama.cpp-$VERSION
      break
    fi
  done
  if [ "$SRC" = "$PEER_DIR/llama.cpp" ]; then
    echo "$STAMP" > "$SRC/.minigpt-source"
    if built "$SRC"; then  # built there already, with bench/peer.sh's options: used as it is
      echo "$SRC/build/bin"
      exit 0
    fi
  fi
fi
if [ ! -d "$SRC" ]; then
  tmp=$(mktemp -d "$PEER_DIR/unpack.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$TARBALL" -C "$tmp" "$IN_TAR"
  echo "$STAMP" > "$tmp/$IN_TAR/.minigpt-source"
  mv "$tmp/$IN_TAR" "$SRC"
fi

echo "llama_cpp_tools: building ${TARGETS[*]} in $SRC/build" >&2
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > /dev/null
cmake --build "$SRC/build" -j"$(nproc)" --target "${TARGETS[@]}" > /dev/null
built "$SRC" || {
  echo "llama_cpp_tools: error: the build left no ${TARGETS[*]} in $SRC/build/bin" >&2
  exit 1
}
echo "$SRC/build/bin"
