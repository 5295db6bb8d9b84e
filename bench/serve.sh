#!/usr/bin/env bash
# minigpt serve against llama.cpp's llama-server: the same GGUF file, the same -np and threads, the same load
# (scripts/loadtest.py: streaming /v1/completions, max_tokens 128 with ignore_eos, CLIENTS concurrent
# clients for SECONDS), ROUNDS rounds alternating which server goes first; plus minigpt with one slot and
# one client (a single stream), so that the aggregate-over-single ratio comes from the same run.
#
# llama.cpp and the model come from bench/peer.sh's recipe (the llama_cpp_python sdist from PyPI, built in
# $PEER_DIR outside the repository; a random GPT-2 124M with GPT-2's tokenizer converted by llama.cpp's own
# convert_hf_to_gguf.py); this script adds the llama-server target. Not run in CI. Needs .venv
# (scripts/setup.sh) for the load generator.
# Usage: bench/serve.sh [NP] [SECONDS] [ROUNDS] [TYPE] [CLIENTS]     e.g. bench/serve.sh 8 60 3 f32 32
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-8}
SECONDS_EACH=${2:-60}
ROUNDS=${3:-3}
TYPE=${4:-f32}
CLIENTS=${5:-$((NP * 4))}
THREADS=${THREADS:-2}
CTX=${CTX:-1024}  # positions per slot: minigpt's -c is per slot, llama-server's is divided among them
PEER_DIR=${PEER_DIR:-$HOME/.cache/minigpt-peer}
MINIGPT=${MINIGPT:-build/minigpt}
PY=${PY:-.venv/bin/python}
PORT=${PORT:-18080}

ROUNDS=0 bash bench/peer.sh "$TYPE" "$THREADS" 0 >&2  # builds llama.cpp and converts the model if needed
LLAMA="$PEER_DIR/llama.cpp"
if [ ! -x "$LLAMA/build/bin/llama-server" ]; then
  echo "serve: building llama-server in $LLAMA/build" >&2
  cmake -S "$LLAMA" -B "$LLAMA/build" -DLLAMA_BUILD_SERVER=ON -DLLAMA_OPENSSL=OFF >/dev/null
  cmake --build "$LLAMA/build" -j"$(nproc)" --target llama-server >/dev/null
fi
GGUF="$PEER_DIR/gpt2-124m-$TYPE.gguf"
[ -f "$GGUF" ] || { echo "serve: error: $GGUF was not made" >&2; exit 1; }

OUT=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT

wait_health() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "serve: error: the server exited:" >&2; cat "$OUT"/*.log >&2; return 1; }
    sleep 0.1
  done
  echo "serve: error: no /health after 60 s" >&2
  return 1
}
run() {  # run NAME NP CLIENTS CMD...: one server, one load run, its JSON into $OUT/NAME.N
  local name=$1 np=$2 clients=$3
  shift 3
  # (each run on its own port: a port just closed may still be in TIME_WAIT, which llama-server cannot bind)
  "$@" >"$OUT/$name.log" 2>&1 &
  SERVER_PID=$!
  wait_health
  "$PY" scripts/loadtest.py --url "http://127.0.0.1:$PORT/v1" --clients "$clients" --duration "$SECONDS_EACH" \
    --max-tokens 128 --ignore-eos --json >>"$OUT/$name.json" || echo "serve: $name: the load run had errors" >&2
  kill -TERM "$SERVER_PID" 2>/dev/null || { echo "serve: error: $name exited during the load run:" >&2; tail -5 "$OUT/$name.log" >&2; exit 1; }
  wait "$SERVER_PID" || true
  SERVER_PID=""
}
next_port() { PORT=$((PORT + 1)); }
minigpt_cmd() { echo "$MINIGPT" serve -m "$GGUF" --port "$PORT" -t "$THREADS" -c "$CTX" -np "$1"; }
llama_cmd() {
  echo "$LLAMA/build/bin/llama-server" -m "$GGUF" --port "$PORT" -t "$THREADS" -c $((CTX * $1)) -np "$1" \
    --no-webui
}

for r in $(seq 1 "$ROUNDS"); do
  echo "serve: round $r of $ROUNDS" >&2
  if [ $((r % 2)) -eq 1 ]; then
    next_port && run minigpt "$NP" "$CLIENTS" $(minigpt_cmd "$NP")
    next_port && run llama "$NP" "$CLIENTS" $(llama_cmd "$NP")
  else
    next_port && run llama "$NP" "$CLIENTS" $(llama_cmd "$NP")
    next_port && run minigpt "$NP" "$CLIENTS" $(minigpt_cmd "$NP")
  fi
  next_port && run single 1 1 $(minigpt_cmd 1)
done

"$PY" - "$OUT" "$NP" "$CLIENTS" "$TYPE" "$THREADS" "$SECONDS_EACH" <<'EOF'
import json, os, platform, statistics, subprocess, sys
out, np_, clients, dtype, threads, secs = sys.argv[1:]
def load(name):
    with open(os.path.join(out, name + ".json")) as f:
        return [json.loads(l) for l in f if l.strip()]
def med(rows, k):
    return statistics.median(r[k] for r in rows)
cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if l.startswith("Model name")), platform.processor())
rows = {"minigpt serve": load("minigpt"), "llama-server": load("llama"), "minigpt serve, 1 slot, 1 client": load("single")}
print(f"GPT-2 124M shape (random weights), {dtype.upper()} GGUF, {threads} threads, {cpu}; "
      f"loadtest: streaming, max_tokens 128 (ignore_eos), {secs} s per run; medians of {len(rows['minigpt serve'])} rounds\n")
print("| server | -np | clients | completion tok/s | TTFT p50 / p99 (ms) | inter-token p50 / p99 (ms) | failed |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, rs in rows.items():
    np_shown = "1" if "1 slot" in name else np_
    cl = "1" if "1 client" in name else clients
    print(f"| {name} | {np_shown} | {cl} | {med(rs, 'tok_s'):.1f} | {med(rs, 'ttft_p50_ms'):.0f} / {med(rs, 'ttft_p99_ms'):.0f} "
          f"| {med(rs, 'itl_p50_ms'):.1f} / {med(rs, 'itl_p99_ms'):.1f} | {sum(r['requests_failed'] for r in rs)} |")
m, l, s = (med(rows[k], "tok_s") for k in rows)
print(f"\nminigpt / llama-server aggregate: {m / l:.2f}x; minigpt -np {np_} over a single stream: {m / s:.2f}x")
if len(rows["minigpt serve"]) > 1:  # each round's own figures (the machine's speed moves between rounds)
    print("\n| round | minigpt tok/s | llama-server tok/s | single stream tok/s | minigpt / single | minigpt / llama-server |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i, (a, b, c) in enumerate(zip(*(rows[k] for k in rows)), 1):
        print(f"| {i} | {a['tok_s']:.1f} | {b['tok_s']:.1f} | {c['tok_s']:.1f} | {a['tok_s'] / c['tok_s']:.2f}x "
              f"| {a['tok_s'] / b['tok_s']:.2f}x |")
for name, rs in rows.items():
    for r in rs:
        if r["requests_failed"]:
            print(f"{name}: {r['requests_failed']} failed requests: {r['errors']}")
            for x in r.get("error_examples", []):
                print(f"  {x}")
EOF
