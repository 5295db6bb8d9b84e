#!/usr/bin/env python3
"""Reference data from llama.cpp for the real Gemma 3 270M model (Q4_K_M GGUF), for minigpt's tests.

Runs llama.cpp's own binaries (llama-tokenize, llama-completion, llama-perplexity) on the GGUF that
scripts/fetch_gemma3.sh fetches, and writes two small fixtures:

  tests/fixtures/real/gemma3-270m/reference.json  greedy continuations of 6 prompts (prompt token ids as
      llama-tokenize gives them, generated text), llama-perplexity on tinyshakespeare (args, per-chunk and
      final values, its method), and where they came from (llama.cpp build, command lines, CPU, date, sha256);
  tests/fixtures/real/gemma3-270m/metadata.json   the GGUF's metadata (every key; arrays as their length and
      first 5 items; the chat template), and its tensors outside the blocks and those of block 0.

Python 3 standard library only (the GGUF header is read here, not with gguf-py). Re-runnable; takes a few
minutes on 2 cores (the perplexity run dominates).

Usage: tools/reference/make_gemma3_real_reference.py [--llama-build DIR] [--gguf FILE] [--data FILE]
       (or the environment: LLAMA_CPP_BUILD, MINIGPT_GEMMA3_GGUF, MINIGPT_SHAKESPEARE)
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import re
import struct
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPECTED_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
N_PREDICT = 40

# A mix: an English sentence to continue, a short factual question, a code start, a list, a Shakespeare
# line, and non-ASCII text (French). Newlines here are real newlines (--no-escape).
PROMPTS = [
    ("english", "The old lighthouse keeper climbed the stairs every evening, and"),
    ("question", "Question: What is the capital of Japan?\nAnswer:"),
    ("code", "def fibonacci(n):"),
    ("list", "Things to pack for a beach trip:\n1. Sunscreen\n2."),
    ("shakespeare", "To be, or not to be, that is the question:"),
    ("french", "Il était une fois, dans un petit château près de la forêt, une princesse qui"),
]

# --- GGUF metadata (the format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) ----------------

GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
    11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
    19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
    27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    """Returns (version, kv: {key: value}, tensors: [(name, type name, shape)]) from a GGUF file's header."""
    with open(path, "rb") as f:
        def take(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(take("<Q")).decode("utf-8", errors="surrogateescape")

        def value(t):
            if t in SCALARS:
                return take(SCALARS[t])
            if t == 8:
                return string()
            if t == 9:
                et, n = take("<I"), take("<Q")
                return [value(et) for _ in range(n)]
            raise ValueError(f"{path}: unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
        kv = {}
        for _ in range(n_kv):
            key = string()
            kv[key] = value(take("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = string()
            shape = [take("<Q") for _ in range(take("<I"))]
            t = take("<I")
            take("<Q")  # offset
            tensors.append((name, GGML_TYPES.get(t, str(t)), shape))
    return version, kv, tensors


def dumps(o, indent=0):
    """JSON with one item a line, except that a list of scalars stays on one line."""
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(o, dict) and o:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1)}" for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, list) and any(isinstance(x, (dict, list)) for x in o):
        return "[\n" + ",\n".join(inner + dumps(x, indent + 1) for x in o) + "\n" + pad + "]"
    return json.dumps(o, ensure_ascii=False)


def summarize(value):
    """An array as its length and first 5 items; anything else as it is."""
    if isinstance(value, list):
        return {"array_length": len(value), "first_5": value[:5]}
    return value


# --- running llama.cpp -----------------------------------------------------------------------------------

def run(cmd, stdin=None):
    """Runs cmd; returns (stdout bytes, stderr text without the log lines' "0.01.302.780 I " prefixes).
    Fails loudly on a non-zero exit."""
    p = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = re.sub(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ", "", p.stderr.decode("utf-8", errors="replace"), flags=re.M)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited with {p.returncode}:\n{err[-3000:]}")
    return p.stdout, err


def shown(cmd, gguf):
    """A command line for the json: the binary's and the model's directories left out."""
    out = []
    for a in cmd:
        if a == gguf:
            a = os.path.basename(gguf)
        elif os.path.isabs(a) and os.path.basename(a).startswith("llama-"):
            a = os.path.basename(a)
        out.append(a)
    return out


def tokenize(bindir, gguf, text):
    cmd = [f"{bindir}/llama-tokenize", "-m", gguf, "--stdin", "--no-escape", "--ids", "--log-disable"]
    out, _ = run(cmd, stdin=text.encode("utf-8"))
    return json.loads(out.decode()), cmd


def llama_version(bindir):
    _, err = run([f"{bindir}/llama-completion", "--version"])
    # "version: 0.5.0-dev (build 0, commit unknown)": an sdist has no .git, so no build number or commit
    m = re.search(r"version: (\S+) \(build (\S+), commit (\S+)\)", err)
    ver = {"version": m.group(1), "build_number": m.group(2), "commit": m.group(3)} if m else {}
    return ver, " ".join(err.split())


def cpu_model():
    """lscpu's model name, family/model/stepping and the SIMD extensions that matter to ggml's CPU kernels."""
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
    except OSError:
        return platform.processor() or "unknown"
    f = dict(re.findall(r"^([^:\n]+):\s*(.*)$", out, re.M))
    flags = f.get("Flags", "").split()
    simd = [x for x in ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16") if x in flags]
    simd.append("AMX" if "amx_tile" in flags else "no AMX")
    return (f"{f.get('Model name', '?')} (vendor {f.get('Vendor ID', '?')}, family {f.get('CPU family', '?')} "
            f"model {f.get('Model', '?')} stepping {f.get('Stepping', '?')}; {f.get('CPU(s)', '?')} CPUs; "
            f"hypervisor {f.get('Hypervisor vendor', 'none')}; {', '.join(simd)})")


# llama.cpp's attention settings: its CPU default here (flash attention, F16 cache: Q rounded to F16 and V
# accumulated in F16 by its kernel) and its exact path (no flash attention, F32 cache), minigpt's default.
ATTENTION = {"fa_on_f16": ["-fa", "on", "-ctk", "f16", "-ctv", "f16"],
             "fa_off_f32": ["-fa", "off", "-ctk", "f32", "-ctv", "f32"]}


def generate(bindir, gguf, threads, prompt, attention="fa_on_f16"):
    cmd = [f"{bindir}/llama-completion", "-m", gguf, "-p", prompt, "--no-escape", "-n", str(N_PREDICT),
           "--temp", "0", "--top-k", "1", "--seed", "0", "-no-cnv", "--no-display-prompt", "--verbose-prompt",
           "-t", str(threads), "-c", "1024"] + ATTENTION[attention]
    out, err = run(cmd, stdin=b"")
    # stdout: the generated pieces (llama_token_to_piece, special tokens shown as ""), then " [end of text]\n"
    # when an end-of-generation token stopped it, then "\n\n"; everything else goes to stderr.
    if not out.endswith(b"\n\n"):
        sys.exit(f"error: unexpected llama-completion output {out!r}")
    out = out[:-2]
    eog = out.endswith(b" [end of text]\n")
    if eog:
        out = out[: -len(b" [end of text]\n")]
    # --verbose-prompt lists the prompt's tokens on stderr: "     2 -> '<bos>'"
    # (a piece can hold a newline, so: the first N such lines after the count)
    m = re.search(r"number of tokens in prompt = (\d+)\n", err)
    seen = None
    if m:
        seen = [int(x) for x in re.findall(r"^\s*(-?\d+) -> '", err[m.end():], re.M)][: int(m.group(1))]
    return out, eog, seen, cmd


def perplexity(bindir, gguf, data, threads, n_ctx, chunks, attention="fa_on_f16"):
    cmd = [f"{bindir}/llama-perplexity", "-m", gguf, "-f", data, "-c", str(n_ctx), "-b", str(n_ctx),
           "--chunks", str(chunks), "-t", str(threads), "--seed", "0"] + ATTENTION[attention]
    out, err = run(cmd)
    text = out.decode("utf-8", errors="replace") + "\n" + err
    cumulative = [float(v) for v in re.findall(r"\[\d+\](\d+\.\d+),", text)]
    final = re.search(r"Final estimate: PPL = (\d+\.\d+) \+/- (\d+\.\d+)", text)
    info = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+), batch_size=(\d+), n_seq=(\d+)", text)
    if not final or not info or len(cumulative) != chunks:
        sys.exit(f"error: could not read llama-perplexity's output:\n{text[-3000:]}")
    return cmd, cumulative, float(final.group(1)), float(final.group(2)), info.groups()


PPL_METHOD = (
    "llama-perplexity (tools/perplexity/perplexity.cpp, perplexity()), without --ppl-stride: the file is read "
    "whole and ONE trailing newline is removed (common -f handling; no escape processing), then tokenized once "
    "with common_tokenize(text, add_special=true, parse_special=false), so token 0 is BOS (id 2) because "
    "tokenizer.ggml.add_bos_token is true. The token stream is cut into n_chunk = min(--chunks, "
    "n_tokens / n_ctx) consecutive, non-overlapping chunks of exactly n_ctx tokens: chunk i is tokens[i*n_ctx "
    ".. (i+1)*n_ctx - 1]; the rest is unused. For each chunk the KV cache is cleared and the chunk's FIRST "
    "token is REPLACED by BOS (not inserted: the chunk stays n_ctx tokens; for chunk 0 it is already BOS), "
    "and the chunk is evaluated at positions 0 .. n_ctx-1. Only the second half is scored: with first = "
    "n_ctx/2, the logits at positions j = first .. n_ctx-2 predict the tokens at positions j+1 = first+1 .. "
    "n_ctx-1, i.e. n_ctx - first - 1 = n_ctx/2 - 1 tokens per chunk (255 for n_ctx=512). Each scored token's "
    "negative log-likelihood is -log_softmax(logits)[token] over the full vocabulary (computed in double from "
    "float logits, max subtracted). PPL = exp(sum of NLL / count) over all scored tokens of all chunks so far; "
    "the value printed after chunk k ('[k]x,', stored as cumulative_ppl) is this running value over chunks "
    "1..k, not chunk k alone. The +/- is exp-scaled standard error: sqrt((mean(nll^2) - mean(nll)^2)/"
    "(count-1)) * PPL. With -b equal to -c each chunk is one sequence in one batch (n_seq = 1). Gemma 3's "
    "sliding-window layers (window gemma3.attention.sliding_window) mask nothing within a chunk when n_ctx <= "
    "that window."
)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-build", default=os.environ.get(
        "LLAMA_CPP_BUILD", os.path.expanduser("~/.cache/minigpt-peer/llama.cpp/build")),
        help="llama.cpp's build directory (binaries in bin/)")
    ap.add_argument("--gguf", default=os.environ.get("MINIGPT_GEMMA3_GGUF", os.path.join(
        os.environ.get("MINIGPT_MODEL_CACHE", os.path.expanduser("~/.cache/minigpt-models")),
        "gemma-3-270m-q4_k_m.gguf")), help="the GGUF (scripts/fetch_gemma3.sh)")
    ap.add_argument("--data", default=os.environ.get("MINIGPT_SHAKESPEARE", os.path.join(
        os.path.dirname(REPO), "shared", "data", "tinyshakespeare.txt")), help="tinyshakespeare.txt")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "real", "gemma3-270m"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ppl-ctx", type=int, default=512)
    ap.add_argument("--ppl-chunks", type=int, default=20)  # ~2 minutes on 2 threads
    args = ap.parse_args()

    bindir = os.path.join(args.llama_build, "bin")
    gguf = os.path.abspath(args.gguf)
    for p in (gguf, args.data, f"{bindir}/llama-completion"):
        if not os.path.exists(p):
            sys.exit(f"error: {p} not found")
    h = hashlib.sha256()
    with open(gguf, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    sha = h.hexdigest()
    if sha != EXPECTED_SHA256:
        sys.exit(f"error: {gguf} has sha256 {sha}, expected {EXPECTED_SHA256} (scripts/fetch_gemma3.sh)")

    version, kv, tensors = read_gguf(gguf)
    arch = kv["general.architecture"]
    ver, ver_raw = llama_version(bindir)
    print(f"llama.cpp {ver_raw}; {arch}; {len(tensors)} tensors", file=sys.stderr)

    # --- metadata.json
    meta = {
        "file": os.path.basename(gguf),
        "sha256": sha,
        "gguf_version": version,
        "n_tensors": len(tensors),
        "metadata": {k: summarize(v) for k, v in kv.items()},
        "chat_template": kv.get("tokenizer.chat_template"),  # None: this file has no tokenizer.chat_template
        "tensors_outside_blocks_and_block_0": [
            {"name": n, "type": t, "shape": s} for n, t, s in tensors if not n.startswith("blk.") or
            n.startswith("blk.0.")],
        "tensor_types_count": {},
    }
    for _, t, _ in tensors:
        meta["tensor_types_count"][t] = meta["tensor_types_count"].get(t, 0) + 1

    # --- greedy continuations
    gens = []
    for name, prompt in PROMPTS:
        ids, tok_cmd = tokenize(bindir, gguf, prompt)
        out, eog, seen, cmd = generate(bindir, gguf, args.threads, prompt)
        if seen != ids:
            sys.exit(f"error: llama-tokenize gives {ids} for {prompt!r}, llama-completion used {seen}")
        try:
            text, valid = out.decode("utf-8"), True
        except UnicodeDecodeError:
            text, valid = out.decode("utf-8", errors="replace"), False
        g = {"name": name, "prompt": prompt, "prompt_ids": ids, "generated_text": text,
             "stopped_at_end_of_generation": eog}
        out2, _, _, _ = generate(bindir, gguf, args.threads, prompt, "fa_off_f32")
        g["generated_text_fa_off_f32"] = out2.decode("utf-8", errors="replace")
        if not valid:
            g["generated_bytes_hex"] = out.hex()  # 40 tokens can end inside a UTF-8 sequence
        gens.append(g)
        print(f"[{name}] {prompt!r} -> {text!r}", file=sys.stderr)

    # --- perplexity
    with open(args.data, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    if text.endswith("\n"):
        text = text[:-1]  # as llama-perplexity's -f does
    t0 = time.time()
    file_ids, _ = tokenize(bindir, gguf, text)
    print(f"tokenized {args.data}: {len(file_ids)} tokens, {time.time() - t0:.0f} s", file=sys.stderr)
    t0 = time.time()
    ppl_cmd, cumulative, ppl, ppl_err, (n_chunk, n_ctx, n_batch, n_seq) = perplexity(
        bindir, gguf, args.data, args.threads, args.ppl_ctx, args.ppl_chunks)
    print(f"llama-perplexity: PPL {ppl} after {n_chunk} chunks, {time.time() - t0:.0f} s", file=sys.stderr)
    ppl_cmd_exact, cumulative_exact, ppl_exact, _, _ = perplexity(
        bindir, gguf, args.data, args.threads, args.ppl_ctx, args.ppl_chunks, "fa_off_f32")
    per_token = args.ppl_ctx - args.ppl_ctx // 2 - 1
    # chunk k's own PPL from the running values (which are printed to 4 decimals, so these are approximate)
    per_chunk, prev = [], 0.0
    for k, c in enumerate(cumulative, 1):
        total = k * per_token * math.log(c)
        per_chunk.append(round(math.exp((total - prev) / per_token), 4))
        prev = total

    ref = {
        "description": "llama.cpp reference outputs for the real Gemma 3 270M Q4_K_M GGUF "
                       "(tools/reference/make_gemma3_real_reference.py; the GGUF: scripts/fetch_gemma3.sh)",
        "model": {
            "file": os.path.basename(gguf), "sha256": sha, "general.architecture": arch,
            **{k: v for k, v in kv.items() if k.startswith(arch + ".")},
            "tokenizer": {k: summarize(kv.get(k)) for k in (
                "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id") if k in kv},
            "vocab_size": len(kv.get("tokenizer.ggml.tokens", [])),
        },
        "llama_cpp": {
            **ver, "version_output": ver_raw,
            "source": "vendor/llama.cpp of the llama_cpp_python 0.3.36 sdist on PyPI "
                      "(its CHANGELOG: ggml-org/llama.cpp@0c1e57098)",
            "build": "cmake -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF "
                     "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF (as bench/peer.sh)",
        },
        "cpu": cpu_model(),
        "threads": args.threads,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generation": {
            "tool": "llama-completion",
            "command": shown(cmd, gguf)[:4] + ["PROMPT"] + shown(cmd, gguf)[5:],
            "tokenize_command": shown(tok_cmd, gguf) + ["(prompt on stdin)"],
            "n_predict": N_PREDICT,
            "sampling": "greedy: --temp 0 (keeps only the largest logit) and --top-k 1; no repetition penalty "
                        "(llama.cpp's default repeat_penalty 1.0)",
            "context": "n_ctx 1024 (prompt + 40 tokens stay inside gemma3.attention.sliding_window = 512, so the "
                       "sliding-window layers mask nothing), flash attention on and an F16 KV cache (both "
                       "llama.cpp's CPU defaults here: -fa auto resolves to on), n_batch 1024, n_ubatch 512; "
                       "layers 5, 11, 17 are global (rope base 1e6), the other 15 sliding-window (rope base 1e4)",
            "adds_bos": bool(kv.get("tokenizer.ggml.add_bos_token")),
            "notes": "prompt_ids: llama-tokenize --ids of the prompt (BOS added as llama.cpp adds it, special "
                     "tokens parsed), checked equal to the prompt tokens llama-completion printed with "
                     "--verbose-prompt. generated_text: llama-completion's stdout without the prompt (the "
                     "concatenated pieces of the 40 generated tokens, special tokens as empty strings) with its "
                     "trailing \"\\n\\n\" (and \" [end of text]\\n\" when an end-of-generation token stopped it) "
                     "removed. No llama.cpp tool built here prints the generated token ids, so they are not "
                     "stored (tokenizing prompt + text is not the same thing).",
            "prompts": gens,
        },
        "perplexity": {
            "tool": "llama-perplexity",
            "data": "tinyshakespeare.txt (" + os.path.relpath(args.data, REPO) + ")",
            "data_sha256": hashlib.sha256(raw).hexdigest(),
            "data_bytes": len(raw),
            "command": shown(ppl_cmd, gguf)[:4] + ["tinyshakespeare.txt"] + shown(ppl_cmd, gguf)[5:],
            "n_ctx": int(n_ctx), "n_batch": int(n_batch), "n_seq": int(n_seq), "n_chunks": int(n_chunk),
            "n_tokens_file": len(file_ids),
            "first_32_token_ids_of_file": file_ids[:32],
            "n_tokens_evaluated": int(n_chunk) * int(n_ctx),
            "n_tokens_scored": int(n_chunk) * per_token,
            "final_ppl": ppl, "final_ppl_error": ppl_err,
            "cumulative_ppl": cumulative,
            "fa_off_f32": {"command": shown(ppl_cmd_exact, gguf)[:4] + ["tinyshakespeare.txt"] + shown(ppl_cmd_exact, gguf)[5:], "final_ppl": ppl_exact,
                           "cumulative_ppl": cumulative_exact},
            "per_chunk_ppl_approx": per_chunk,
            "method": PPL_METHOD,
        },
    }
    os.makedirs(args.out, exist_ok=True)
    for name, obj in (("reference.json", ref), ("metadata.json", meta)):
        path = os.path.join(args.out, name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(dumps(obj) + "\n")
        os.replace(path + ".tmp", path)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
