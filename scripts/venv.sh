#!/usr/bin/env bash
# Makes .venv/ (the project's Python virtual environment) and installs tests/python/requirements.txt into it;
# does nothing when it is already there with those requirements (a stamp holds the file's sha256).
# Used by scripts/setup.sh and scripts/test.sh. Usage: scripts/venv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=tests/python/requirements.txt
VENV=${MINIGPT_VENV:-.venv}
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "venv: installing $REQ into $VENV"
if ! python3 -m venv "$VENV"; then
  echo "venv: error: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
if ! "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"; then
  echo "venv: error: pip could not install $REQ into $VENV (is PyPI reachable?)" >&2
  exit 1
fi
echo "$want" > "$VENV/.requirements.sha256"
