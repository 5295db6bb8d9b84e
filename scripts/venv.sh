#!/usr/bin/env bash
# Makes .venv/ (the project's Python virtual environment) and installs into it tests/python/requirements.txt
# (the openai client, for minigpt serve's tests) and python/requirements.txt (nanobind, numpy, pytest, mypy: the
# Python package's build and tests); does nothing when it is already there with those requirements (a stamp
# holds the files' sha256). Used by scripts/setup.sh and scripts/test.sh. Usage: scripts/venv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REQS=(tests/python/requirements.txt python/requirements.txt)
VENV=${MINIGPT_VENV:-.venv}
want=$(cat "${REQS[@]}" | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "venv: installing ${REQS[*]} into $VENV"
if ! python3 -m venv "$VENV"; then
  echo "venv: error: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
args=()
for r in "${REQS[@]}"; do args+=(-r "$r"); done
if ! "$VENV/bin/pip" install -q --disable-pip-version-check "${args[@]}"; then
  echo "venv: error: pip could not install ${REQS[*]} into $VENV (is PyPI reachable?)" >&2
  exit 1
fi
echo "$want" > "$VENV/.requirements.sha256"
