#!/usr/bin/env bash
# Fetches minja (Google's C++ Jinja engine for chat templates, MIT; what llama-server rendered templates with
# from January to October 2025) into third_party/minja/ (ignored by git), from the one place our package
# sources have it: the llama.cpp source vendored in the llama_cpp_python 0.3.16 sdist on PyPI (its newest
# with minja; later ones carry llama.cpp's own engine, which is not a separate library). Debian packages no
# C++ Jinja engine. The two headers are checked against their SHA-256 before use. minja.hpp then gets one
# patch of ours, scripts/minja_limits.patch: a bound on nested macro calls (a template's macro that
# recursed without end overflowed the stack and killed the server), on range() (a zero step looped
# forever; range(10**9) took ~100 GB), on one render's loop iterations and macro calls, and on the strings,
# lists and output it builds, and is checked again.
# Usage: scripts/fetch_minja.sh      (does nothing when the patched headers are already there)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.16
DEST=third_party/minja
declare -A SHA=(
  [minja.hpp]=abb5e1378834908ec8ae3035fae0a82b7b36e214f5808c7df50ccf0048acbcd1
  [chat-template.hpp]=e1a86f8f1cce246670ae02c126bd407d2cc0a30655ca1e65b0d52c6bd1b0eca6
)
PATCHED_MINJA=d8e73697229ad21e19b54d110dc5a90e5a04fe18835e259ccb3cc7f5241ea5ab
sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }
ok() {
  [ "$(sha "$DEST/include/minja/minja.hpp")" = "$PATCHED_MINJA" ] &&
    [ "$(sha "$DEST/include/minja/chat-template.hpp")" = "${SHA[chat-template.hpp]}" ]
}
# minja.hpp as downloaded + the patch -> checked
apply_patch() {
  git apply --unsafe-paths --directory="$DEST/include/minja" -p1 scripts/minja_limits.patch
  if ! ok; then
    echo "fetch_minja: error: minja.hpp after scripts/minja_limits.patch is not what it should be" >&2
    exit 1
  fi
}
ok && exit 0
if [ "$(sha "$DEST/include/minja/minja.hpp")" = "${SHA[minja.hpp]}" ] &&
  [ "$(sha "$DEST/include/minja/chat-template.hpp")" = "${SHA[chat-template.hpp]}" ]; then
  apply_patch  # fetched before the patch existed (headers with an older version of it are downloaded again)
  echo "fetch_minja: patched $DEST/include/minja/minja.hpp"
  exit 0
fi
echo "fetch_minja: downloading the llama_cpp_python $VERSION sdist from PyPI (50 MB) for minja"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Any python3 with pip will do (the project's .venv has one when python3-pip is not installed).
PY=python3
python3 -m pip --version > /dev/null 2>&1 || PY=.venv/bin/python
if ! "$PY" -m pip download -q --no-deps --no-binary :all: --disable-pip-version-check \
    "llama_cpp_python==$VERSION" -d "$tmp"; then
  echo "fetch_minja: error: could not download llama_cpp_python==$VERSION from PyPI" >&2
  exit 1
fi
src=llama_cpp_python-$VERSION/vendor/llama.cpp
tar -xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp" "$src/vendor/minja" "$src/LICENSE"
for f in "${!SHA[@]}"; do
  got=$(sha256sum "$tmp/$src/vendor/minja/$f" | cut -d' ' -f1)
  if [ "$got" != "${SHA[$f]}" ]; then
    echo "fetch_minja: error: $f has SHA-256 $got, expected ${SHA[$f]}" >&2
    exit 1
  fi
done
rm -rf "$DEST" && mkdir -p "$DEST/include/minja"
cp "$tmp/$src/vendor/minja/minja.hpp" "$tmp/$src/vendor/minja/chat-template.hpp" "$DEST/include/minja/"
apply_patch
# minja's own copyright line is in each header (Google LLC, MIT); llama.cpp's LICENSE is the MIT text it ships under.
cp "$tmp/$src/LICENSE" "$DEST/LICENSE"
echo "fetch_minja: minja headers in $DEST/include/minja"
