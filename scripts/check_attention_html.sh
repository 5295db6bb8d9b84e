#!/usr/bin/env bash
# Opens the page `minigpt attention -o X.html` writes in headless Chromium and runs its own self-test
# (the page's #selftest: click the last layer's last head, hover a cell and read the tooltip, hover a token
# of the head view and count its lines) and reads its verdict from the DOM. Not part of ctest (Chromium
# takes seconds to start and is a large package); the C++ tests check the page's content.
# Usage: scripts/check_attention_html.sh [BUILD_DIR]     (default build; needs Debian's `chromium`)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "check_attention_html: chromium not found (apt-get install chromium)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail=0
check() {  # check NAME PROMPT
  local page="$tmp/$1.html"
  "$BUILD_DIR/minigpt" attention -m models/shakespeare-char -p "$2" -o "$page" 2>/dev/null
  # --dump-dom prints the DOM after the page's scripts ran; the self-test leaves its verdict on <body>.
  local body
  body=$(timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile" \
           --dump-dom "file://$page#selftest" 2>"$tmp/chromium.log" | grep -o '<body[^>]*>' || true)
  if [[ "$body" == *'data-ready="1"'* && "$body" == *'data-selftest="pass '* ]]; then
    echo "check_attention_html: $1: ${body}"
  else
    echo "check_attention_html: $1: FAILED: ${body:-no <body> in the DOM}" >&2
    grep -i "console\|error" "$tmp/chromium.log" | grep -v dbus | head -5 >&2 || true
    fail=1
  fi
}
check short "ROMEO:"
check markup 'a</script><!-- "quotes" & <b>tags</b> @DATA@'
check long "$(printf 'ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun.')"
exit $fail
