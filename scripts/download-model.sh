#!/usr/bin/env bash
# Downloads a GPT-2-family checkpoint from the Hugging Face hub (plain HTTPS, for a connected machine)
# into models/NAME, ready for `minigpt generate -m models/NAME`.
# Usage: scripts/download-model.sh gpt2|gpt2-medium|gpt2-large|gpt2-xl|distilgpt2|OWNER/REPO [DEST]
set -euo pipefail
cd "$(dirname "$0")/.."

repo=${1:?usage: scripts/download-model.sh REPO [DEST]   (e.g. gpt2, distilgpt2, openai-community/gpt2-medium)}
dest=${2:-models/$(basename "$repo")}
base=${HF_ENDPOINT:-https://huggingface.co}/$repo/resolve/${REVISION:-main}
command -v curl >/dev/null || { echo "download-model: curl is needed (apt-get install curl)" >&2; exit 1; }

# Everything lands in a temporary folder first: a failed download leaves nothing half-written in $dest.
tmp="$dest.part"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

fetch() {  # fetch FILE [optional]
  local code
  code=$(curl -sSL --retry 3 -w '%{http_code}' -o "$tmp/$1" "$base/$1" || true)
  if [ "$code" = "200" ]; then echo "  $1 ($(du -h "$tmp/$1" | cut -f1))"; return 0; fi
  rm -f "$tmp/$1"
  [ "${2:-}" = optional ] && return 1
  echo "download-model: $base/$1: HTTP $code" >&2
  exit 1
}

echo "download-model: $repo -> $dest"
fetch config.json
for f in vocab.json merges.txt tokenizer.json generation_config.json; do fetch "$f" optional || true; done
if ! fetch model.safetensors optional; then
  # Large checkpoints come in shards listed by an index.
  fetch model.safetensors.index.json
  python3 - "$tmp/model.safetensors.index.json" > "$tmp/shards.txt" <<'PY' || { echo "download-model: cannot read the shard index" >&2; exit 1; }
import json, sys
print("\n".join(sorted(set(json.load(open(sys.argv[1]))["weight_map"].values()))))
PY
  while read -r shard; do fetch "$shard"; done < "$tmp/shards.txt"
  rm -f "$tmp/shards.txt"
fi
[ -f "$tmp/tokenizer.json" ] || [ -f "$tmp/vocab.json" ] || echo "download-model: warning: no tokenizer files in $repo" >&2

rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "download-model: done. Try: build/minigpt generate -m $dest -p \"Hello, I'm a language model,\""
