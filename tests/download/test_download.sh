#!/usr/bin/env bash
# Tests scripts/download-model.sh against tests/download/fake_hub.py (a local fake of the hub: no
# internet needed): it must never delete what it did not create, and must install a model only when
# every file arrived whole, reporting the real cause (HTTP status, curl's error, the safetensors check).
# DOWNLOAD_SCRIPT=path runs these checks against another version of the script (e.g. the old one).
# Prints one line per check and "N passed, M failed"; exits non-zero if any check failed.
# The checks are single-quoted on purpose: eval expands them when they run.
# shellcheck disable=SC2016
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=${DOWNLOAD_SCRIPT:-$here/../../scripts/download-model.sh}
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "test_download: $tool is needed (apt-get install $tool)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/minigpt-download-test.XXXXXX")
hub_pid=
cleanup() {
  if [ -n "$hub_pid" ]; then kill "$hub_pid" 2>/dev/null || true; wait "$hub_pid" 2>/dev/null || true; fi
  rm -rf -- "$work"
}
trap cleanup EXIT

python3 "$here/fake_hub.py" --port-file "$work/port" &
hub_pid=$!
# The hub writes its port once it listens; 60 s only bounds a hang.
for _ in $(seq 600); do [ -s "$work/port" ] || ! kill -0 "$hub_pid" 2>/dev/null && break; sleep 0.1; done
[ -s "$work/port" ] || { echo "test_download: the fake hub did not start" >&2; exit 1; }
HF_ENDPOINT="http://127.0.0.1:$(cat "$work/port")"
export HF_ENDPOINT
# One retry keeps curl's retry path (and its repeated header blocks) exercised without waiting long on 500s.
export DOWNLOAD_RETRIES=1

passed=0 failed=0
check() {  # check DESCRIPTION COMMAND... : one line per check
  # In a subshell: a check may "exit 1" early without ending the test.
  if ( "$@" ); then echo "ok   - $desc"; passed=$((passed + 1)); else echo "FAIL - $desc"; failed=$((failed + 1)); fi
}
t() { desc=$1; shift; check "$@"; }

# run REPO DEST: runs the script, keeping its exit status, stdout and stderr for the checks.
run() {
  rc=0
  bash "$script" "$1" "$2" > "$work/out" 2> "$work/err" || rc=$?
}
failed_run() { [ "$rc" != 0 ]; }
ok_run() { [ "$rc" = 0 ]; }
err_has() { grep -qF -- "$1" "$work/err"; }
err_lacks() { ! grep -qF -- "$1" "$work/err"; }
err_one_line() { [ "$(wc -l < "$work/err")" = 1 ] && grep -q '^download-model: ' "$work/err"; }
absent() { [ ! -e "$1" ] && [ ! -L "$1" ]; }
# A fingerprint of a tree: every path, its type, and the content of every file.
tree_sum() { (cd "$1" && find . -printf '%y %p\n' | sort && find . -type f -print0 | sort -z | xargs -0r sha256sum); }
same_as() { [ "$(tree_sum "$1")" = "$(cat "$2")" ]; }
# The files the hub serves, fetched here independently, to compare the installed ones byte for byte.
same_file_as_hub() { curl -sSfL "$HF_ENDPOINT/$2/resolve/main/$3" | cmp -s - "$1/$3"; }

out="$work/out.d"  # the DESTs of the runs go in here
mkdir -p "$out"

# --- things of the user's, which every run must leave exactly as they are ---------------------------
user="$work/user"
mkdir -p "$user/notes" "$user/copy-of-models"
printf 'my notes\n' > "$user/notes/todo.txt"
printf 'keep me\n' > "$user/notes/.hidden"
cp -r "$here/../../models/shakespeare-char/." "$user/copy-of-models/"
[ "$(find "$user/copy-of-models" -type f | wc -l)" -ge 3 ] || { echo "test_download: no shipped model to copy" >&2; exit 1; }
mkdir -p "$out/foreign.part"
printf 'not the script'"'"'s\n' > "$out/foreign.part/data.bin"
printf 'sentinel\n' > "$out/sentinel.txt"
tree_sum "$work/user" > "$work/user.sum"
tree_sum "$out" | sort > "$work/out-before.sum"

run good/model "$user/notes"
t "existing DEST with user files: refused (non-zero)" failed_run
t "existing DEST: one line on stderr naming it" eval 'err_one_line && err_has "$user/notes"'
t "existing DEST: no .part made next to it" absent "$user/notes.part"
t "existing DEST: the user's files are byte-identical" same_as "$work/user" "$work/user.sum"

run good/model "$user/copy-of-models"
t "DEST = copy of a model folder (several files): refused (non-zero)" failed_run
t "DEST = copy of a model folder: one line on stderr naming it" eval 'err_one_line && err_has "$user/copy-of-models"'
t "DEST = copy of a model folder: every file byte-identical" same_as "$work/user" "$work/user.sum"

run good/model "$user/notes/todo.txt"
t "DEST = an existing file: refused, file byte-identical" eval 'failed_run && same_as "$work/user" "$work/user.sum"'

run good/model "$out/foreign"
t "foreign DEST.part (no marker): refused (non-zero)" failed_run
t "foreign DEST.part: one line on stderr naming it" eval 'err_one_line && err_has "$out/foreign.part"'
t "foreign DEST.part: untouched, DEST not made" eval 'absent "$out/foreign" && [ "$(cat "$out/foreign.part/data.bin")" = "not the script'"'"'s" ]'

# --- installs ---------------------------------------------------------------------------------------
run good/model "$out/good"
t "good repo: installs (exit 0)" ok_run
t "good repo: config.json, vocab.json, merges.txt, model.safetensors byte-equal to the hub's" eval '
  for f in config.json vocab.json merges.txt model.safetensors; do same_file_as_hub "$out/good" good/model $f || exit 1; done'
t "good repo: only the served files, no marker or scratch files, no .part left" eval '
  [ "$(cd "$out/good" && ls -A | tr "\n" " ")" = "config.json merges.txt model.safetensors vocab.json " ] && absent "$out/good.part"'

run redirect/model "$out/redirect"
t "weights behind a 302 (as the hub's LFS files): installs, byte-equal" eval '
  ok_run && same_file_as_hub "$out/redirect" good/model model.safetensors && absent "$out/redirect.part"'

run sharded/model "$out/sharded"
t "sharded repo: installs the index and both shards, no .part left" eval '
  ok_run && for f in model.safetensors.index.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
    same_file_as_hub "$out/sharded" sharded/model $f || exit 1; done && absent "$out/sharded.part" && absent "$out/sharded/model.safetensors"'

# A .part left by an earlier run of the script (killed half-way) is the script's own: it may go.
mkdir -p "$out/stale.part" && : > "$out/stale.part/.minigpt-download" && printf 'half' > "$out/stale.part/model.safetensors"
run good/model "$out/stale"
t "its own earlier DEST.part (marker): replaced, model installs" eval '
  ok_run && same_file_as_hub "$out/stale" good/model model.safetensors && absent "$out/stale.part"'

# --- failures: non-zero, one line naming the file and the real cause, nothing installed or left -----
gone() { absent "$out/$1" && absent "$out/$1.part"; }

run cut/model "$out/cut"
t "transfer cut half-way: fails (non-zero)" failed_run
t "transfer cut half-way: one line naming model.safetensors and curl's error" eval '
  err_one_line && err_has "/cut/model/resolve/main/model.safetensors" && grep -qiE "curl: \(18\)|transfer closed" "$work/err"'
t "transfer cut half-way: not reported as done" eval '! grep -q "done" "$work/out"'
t "transfer cut half-way: DEST not made, no .part left" gone cut

run err500/model "$out/err500"
t "HTTP 500 for model.safetensors: fails (non-zero)" failed_run
t "HTTP 500: one line saying HTTP 500 of model.safetensors" eval '
  err_one_line && err_has "/err500/model/resolve/main/model.safetensors: HTTP 500"'
t "HTTP 500: not reported as a 404 of the shard index" eval 'err_lacks "HTTP 404" && err_lacks "index.json"'  # not bare 404: the random port may hold it
t "HTTP 500: DEST not made, no .part left" gone err500

run opt500/model "$out/opt500"
t "HTTP 500 for an optional file (vocab.json): an error, not skipped" eval '
  failed_run && err_one_line && err_has "/opt500/model/resolve/main/vocab.json: HTTP 500"'
t "HTTP 500 for an optional file: DEST not made, no .part left" gone opt500

run badheader/model "$out/badheader"
t "safetensors shorter than its header says (Content-Length right): refused" eval '
  failed_run && err_one_line && err_has "model.safetensors"'
t "bad safetensors header: DEST not made, no .part left" gone badheader

run evilshard/model "$out/evil/dest"
t "shard index naming ../escape.safetensors: refused" failed_run
t "shard index naming ../escape.safetensors: nothing written outside, no .part left" eval '
  absent "$out/evil/escape.safetensors" && absent "$out/escape.safetensors" && absent "$out/evil/dest" && absent "$out/evil/dest.part"'

run nosuch/model "$out/nosuch"
t "unknown repo: one line saying HTTP 404 of config.json" eval '
  failed_run && err_one_line && err_has "/nosuch/model/resolve/main/config.json: HTTP 404" && gone nosuch'

# --- nothing outside its own .part was ever deleted or changed --------------------------------------
t "after all runs: the user's files are byte-identical" same_as "$work/user" "$work/user.sum"
t "after all runs: every path that existed in the output folder is still there, unchanged" eval '
  [ -z "$(comm -23 "$work/out-before.sum" <(tree_sum "$out" | sort))" ]'

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
