#!/usr/bin/env bash
# Downloads a GPT-2-family checkpoint from the Hugging Face hub (plain HTTPS, for a connected machine)
# into models/NAME, ready for `minigpt generate -m models/NAME`.
# Usage: scripts/download-model.sh gpt2|gpt2-medium|gpt2-large|gpt2-xl|distilgpt2|OWNER/REPO [DEST]
# Environment: HF_ENDPOINT (default https://huggingface.co), REVISION (default main),
#              DOWNLOAD_RETRIES (default 3: how often curl retries a timeout or an HTTP 408/429/5xx).
#
# It never deletes what it did not create: an existing DEST is refused, the download goes to DEST.part/
# (created here, marked with .minigpt-download so that a later run knows it may remove it), and DEST.part
# is renamed to DEST only when every file arrived whole: curl succeeded, HTTP 200, size = Content-Length,
# and every *.safetensors file is as long as its own header says.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "download-model: $*" >&2; exit 1; }

repo=${1:?usage: scripts/download-model.sh REPO [DEST]   (e.g. gpt2, distilgpt2, openai-community/gpt2-medium)}
# The name goes into a URL and, by default, a path: hub names are letters, digits, '.', '_', '-'.
if ! [[ $repo =~ ^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$ ]] || [[ $repo == *..* ]]; then
  die "'$repo' is not a hub repository name (OWNER/NAME or NAME)"
fi
dest=${2:-models/$(basename "$repo")}
# "models/x/" must mean models/x, not a .part folder inside it.
while [[ $dest == */ && $dest != / ]]; do dest=${dest%/}; done
endpoint=${HF_ENDPOINT:-https://huggingface.co}
base=${endpoint%/}/$repo/resolve/${REVISION:-main}
retries=${DOWNLOAD_RETRIES:-3}
[[ $retries =~ ^[0-9]+$ ]] || die "DOWNLOAD_RETRIES must be a number, not '$retries'"
command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
command -v python3 >/dev/null || die "python3 is needed to check the safetensors files (apt-get install python3)"

tmp="$dest.part"
marker=.minigpt-download
# -L too: a dangling symlink is something of the user's as well.
if [ -e "$dest" ] || [ -L "$dest" ]; then
  die "$dest already exists; not touching it (remove it yourself, or give another DEST)"
fi
if [ -e "$tmp" ] || [ -L "$tmp" ]; then
  # Only a folder this script made (it holds the marker) is ours to remove; anything else is the user's.
  if [ -d "$tmp" ] && [ ! -L "$tmp" ] && [ -f "$tmp/$marker" ] && [ ! -L "$tmp/$marker" ]; then
    echo "download-model: removing $tmp, left by an earlier unfinished download" >&2
    rm -rf -- "$tmp"
  else
    die "$tmp exists and was not made by this script; not touching it (remove it yourself, or give another DEST)"
  fi
fi

# Everything lands in $tmp first: a failed download leaves nothing half-written in $dest.
mkdir -p -- "$(dirname -- "$dest")"
own_tmp=0
cleanup() { if [ "$own_tmp" = 1 ]; then rm -rf -- "$tmp"; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Plain mkdir, not -p: if $tmp appeared since the check above (another run), it is not ours.
mkdir -- "$tmp" 2>/dev/null || die "cannot create $tmp"
own_tmp=1
: > "$tmp/$marker"

# The value of the last header NAME in a curl -D file: with -L and --retry the file holds one block per
# response, and only the last block is the response whose body we kept.
last_header() {  # last_header FILE NAME
  tr -d '\r' < "$1" | awk -v name="$2" '
    BEGIN { name = tolower(name) }
    /^HTTP\// { value = "" }
    { i = index($0, ":"); if (i > 0 && tolower(substr($0, 1, i - 1)) == name) { value = substr($0, i + 1); sub(/^[ \t]+/, "", value); sub(/[ \t]+$/, "", value) } }
    END { print value }'
}

# Checks that a safetensors file is as long as its header says: 8-byte little-endian header length N,
# N bytes of JSON, then exactly as many data bytes as the largest data_offsets end.
check_safetensors() {  # check_safetensors FILE -> nothing, or one line saying what is wrong
  python3 - "$1" <<'PY'
import json, os, struct, sys
path = sys.argv[1]
size = os.path.getsize(path)
def bad(why):
    print(why)
    sys.exit(1)
with open(path, "rb") as f:
    head = f.read(8)
    if len(head) < 8:
        bad(f"{size} bytes, too short for a safetensors header")
    n = struct.unpack("<Q", head)[0]
    if n > size - 8:
        bad(f"header length {n} but the file has {size} bytes")
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        bad(f"header is not JSON ({e})")
if not isinstance(header, dict):
    bad("header is not a JSON object")
end = 0
for name, t in header.items():
    if name == "__metadata__":
        continue
    offs = t.get("data_offsets") if isinstance(t, dict) else None
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int and o >= 0 for o in offs)
            and offs[0] <= offs[1]):
        bad(f"tensor {name!r} has no valid data_offsets")
    end = max(end, offs[1])
if size != 8 + n + end:
    bad(f"header says {8 + n + end} bytes (8 + {n} + {end}), the file has {size}")
PY
}

fetch() {  # fetch FILE [optional] -> 0 downloaded and checked, 1 optional and absent (404); else exits
  local file=$1 url=$base/$1 out rc=0 code got want why
  out=$(curl -sSL --retry "$retries" --connect-timeout 30 --speed-limit 1 --speed-time 120 \
             -D "$tmp/.headers" -o "$tmp/$file" -w '%{http_code}' "$url" 2>"$tmp/.curl-err") || rc=$?
  code=${out:-000}
  if [ "$rc" != 0 ]; then
    # curl's own words (timeout, connection reset, "transfer closed with N bytes remaining"...).
    why=$(grep -v '^[[:space:]]*$' "$tmp/.curl-err" | tail -n 1 | tr -d '[:cntrl:]')
    die "$url: transfer failed (${why:-curl exit status $rc}; HTTP $code)"
  fi
  if [ "$code" != 200 ]; then
    rm -f -- "$tmp/$file"
    # Only "not there" makes an optional file optional; a 500 or a 403 is an error, whatever the file.
    [ "$code" = 404 ] && [ "${2:-}" = optional ] && return 1
    why=$(last_header "$tmp/.headers" X-Error-Message | tr -d '[:cntrl:]' | cut -c1-200)
    die "$url: HTTP $code${why:+ ($why)}"
  fi
  got=$(wc -c < "$tmp/$file" | tr -d ' ')
  want=$(last_header "$tmp/.headers" Content-Length)
  if [ -n "$want" ] && [ "$got" != "$want" ]; then
    die "$url: got $got bytes, the server announced $want (Content-Length)"
  fi
  if [[ $file == *.safetensors ]]; then
    why=$(check_safetensors "$tmp/$file") || die "$url: not a whole safetensors file: ${why:-unreadable}"
  fi
  echo "  $file ($(du -h "$tmp/$file" | cut -f1))"
}

echo "download-model: $repo -> $dest"
fetch config.json
for f in vocab.json merges.txt tokenizer.json generation_config.json; do fetch "$f" optional || true; done
if ! fetch model.safetensors optional; then
  # Large checkpoints come in shards listed by an index (this branch only on a 404 of the single file).
  fetch model.safetensors.index.json
  # Shard names become paths under $tmp: plain file names only, nothing that could climb out of it.
  shards=$(python3 - "$tmp/model.safetensors.index.json" <<'PY'
import json, re, sys
try:
    names = set(json.load(open(sys.argv[1]))["weight_map"].values())
except Exception as e:
    print(f"no weight_map ({e.__class__.__name__})")
    sys.exit(1)
for n in names:
    if not (isinstance(n, str) and re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*\.safetensors", n)):
        print(f"bad shard name {n!r}")
        sys.exit(1)
if not names:
    print("no shards listed")
    sys.exit(1)
print("\n".join(sorted(names)))
PY
) || die "$base/model.safetensors.index.json: cannot read the shard index: $shards"
  while read -r shard; do fetch "$shard"; done <<< "$shards"
fi
[ -f "$tmp/tokenizer.json" ] || [ -f "$tmp/vocab.json" ] || echo "download-model: warning: no tokenizer files in $repo" >&2

rm -f -- "$tmp/.headers" "$tmp/.curl-err" "$tmp/$marker"
# -T: never move $tmp *into* a $dest that appeared meanwhile; -n: never replace one either (mv -n skips
# quietly in some coreutils versions, hence the check that $tmp is really gone).
if [ -e "$dest" ] || [ -L "$dest" ] || ! mv -n -T -- "$tmp" "$dest" || [ -e "$tmp" ]; then
  die "$dest appeared during the download; not replacing it"
fi
own_tmp=0
trap - EXIT
echo "download-model: done. Try: build/minigpt generate -m $dest -p \"Hello, I'm a language model,\""
