#!/usr/bin/env bash
# Fetches xgrammar (Apache-2.0, the MLC project's constrained-decoding engine: JSON Schema, EBNF/GBNF, regex
# to a per-token mask; docs/structured-output.md says why this one) into third_party/xgrammar/ (ignored by git),
# from its source distribution on PyPI, checked against its SHA-256. No Debian package holds it. Only what its
# C++ core needs is kept: include/, cpp/ (without cpp/tvm_ffi/, the Python bindings), and the two header-only
# libraries the core includes, picojson and dlpack, which the sdist carries in 3rdparty/. CMakeLists.txt
# compiles the core as a static library. Then one patch of ours, scripts/xgrammar_json_string.patch: a string
# with minLength/maxLength admitted raw control characters (U+0000 to U+001F), which JSON forbids unescaped
# (a constrained model wrote a vertical tab into one); the patched file is checked too.
# Usage: scripts/fetch_xgrammar.sh      (does nothing when the sources are already there)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.2.9
SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
URL=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$VERSION.tar.gz
DEST=third_party/xgrammar
PATCH=scripts/xgrammar_json_string.patch
PATCHED=cpp/json_schema_converter.cc
PATCHED_SHA256=2b60eb07c995641a1e7f2a1e3e7c53dce0b48d687271280623d44bdb4caf0773
STAMP=$DEST/VERSION
[ "$(cat "$STAMP" 2>/dev/null)" = "$VERSION $SHA256 $PATCHED_SHA256" ] && exit 0
echo "fetch_xgrammar: downloading the xgrammar $VERSION sdist from PyPI (2.7 MB)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! curl -fsSL --retry 3 -o "$tmp/xgrammar.tar.gz" "$URL"; then
  echo "fetch_xgrammar: error: could not download $URL" >&2
  exit 1
fi
got=$(sha256sum "$tmp/xgrammar.tar.gz" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  echo "fetch_xgrammar: error: xgrammar-$VERSION.tar.gz has SHA-256 $got, expected $SHA256" >&2
  exit 1
fi
src=xgrammar-$VERSION
# picojson (BSD-2-Clause) carries its licence in its header; dlpack (Apache-2.0) in its LICENSE.
tar -xzf "$tmp/xgrammar.tar.gz" -C "$tmp" "$src/include" "$src/cpp" "$src/3rdparty/picojson/picojson.h" \
  "$src/3rdparty/dlpack/include" "$src/3rdparty/dlpack/LICENSE" "$src/LICENSE" "$src/NOTICE"
rm -rf "$tmp/$src/cpp/tvm_ffi"
git apply --unsafe-paths --directory="$tmp/$src" -p1 "$PATCH"
got=$(sha256sum "$tmp/$src/$PATCHED" | cut -d' ' -f1)
if [ "$got" != "$PATCHED_SHA256" ]; then
  echo "fetch_xgrammar: error: $PATCHED after $PATCH has SHA-256 $got, expected $PATCHED_SHA256" >&2
  exit 1
fi
rm -rf "$DEST" && mkdir -p third_party
mv "$tmp/$src" "$DEST"
echo "$VERSION $SHA256 $PATCHED_SHA256" > "$STAMP"
echo "fetch_xgrammar: xgrammar $VERSION sources in $DEST"
