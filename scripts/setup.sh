#!/usr/bin/env bash
# Installs minigpt's system dependencies (Debian) and builds it in Release into build/.
# Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# `attention`'s heatmaps: cairo and Pango, DejaVu first, and Noto for the characters DejaVu lacks (most
# scripts, CJK, emoji: 78 MB of downloads, 144 MB installed; fonts-noto-extra's weights and widths are not
# needed).
PACKAGES=(cmake g++ make pkg-config libopenblas-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libicu-dev
          libgtest-dev googletest curl python3 clang-format libcairo2-dev libpango1.0-dev fonts-dejavu-core
          fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji libcpp-httplib-dev libedit-dev python3-venv
          python3-dev ccache clang libclang-rt-14-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# The project's virtual environment (.venv: the openai client for the server's tests; nanobind, numpy, pytest
# and mypy for the Python package, which the build below makes when .venv has nanobind).
bash scripts/venv.sh

# minja, the chat templates' Jinja engine (no Debian package): from PyPI into third_party/minja.
bash scripts/fetch_minja.sh
bash scripts/fetch_xgrammar.sh  # structured output's constraint engine (xgrammar): from PyPI into third_party/xgrammar

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@"
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup: built $BUILD_DIR/minigpt"
