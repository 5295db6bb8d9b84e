"""What the Python package costs over the CLI, on a random GPT-2 of the 124M shape (F32), interleaved rounds.

    PYTHONPATH=build/python .venv/bin/python bench/python_overhead.py [--threads 2] [--rounds 3] [--cli build/minigpt]

Run it on a quiet machine (the figures are ratios of two timings taken a few seconds apart). It writes the model
(config.json of tests/fixtures/models/gpt2-124m-splitmix, seeded random weights, GPT-2's tokenizer) to a
temporary directory once, then in each round times, alternating CLI and Python:

- decode: `minigpt generate -n 128 --temperature 0 --ignore-eos` against m.generate(...) with the same prompt;
  both rates are (generated - 1) / decode time as the library times it, which for m.generate includes the
  binding's work between tokens (the GIL handed back and forth, the check for Ctrl-C);
- prefill: `minigpt bench -p 512` (one eval of 512 tokens, the last row's logits) against session.eval() of 512
  ids, the same work, timed around the Python call;
- all logits: m.logits() of 512 ids ([512, 50257] into a numpy array) against `minigpt perplexity -c 512`, the
  CLI's evaluation of every row (its rate also holds the scoring of each token, a few percent).

It prints one table: medians of the rounds, and Python / CLI for each (1.00 = no overhead). The issue's bars:
decode within 3%, m.logits of 512 tokens within 5% of the CLI's prefill.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import minigpt

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "fixtures" / "models" / "gpt2-124m-splitmix" / "config.json"
TOKENIZER = ROOT / "tests" / "fixtures" / "gpt2-tokenizer"
TEXT = ROOT / "tests" / "fixtures" / "data" / "tinyshakespeare.txt"
PROMPT = "ROMEO: But soft, what light through yonder window breaks?"


def write_model(out: Path) -> None:
    """A GPT-2 of config.json's shape with seeded N(0, 0.02) weights (unit norms), as transformers names them."""
    cfg = json.loads(CONFIG.read_text())
    C, V, S, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    rng = np.random.default_rng(124)
    shapes: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (S, C)}
    for i in range(L):
        p = f"transformer.h.{i}."
        shapes |= {p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                   p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                   p + "ln_2.weight": (C,), p + "ln_2.bias": (C,), p + "mlp.c_fc.weight": (C, 4 * C),
                   p + "mlp.c_fc.bias": (4 * C,), p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)}  # fmt: skip
    shapes |= {"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    header: dict[str, object] = {}
    offset = 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for name, shape in shapes.items():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                a = np.ones(shape, dtype=np.float32)
            else:
                a = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)
            f.write(a.tobytes())
    shutil.copy(CONFIG, out / "config.json")
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, out / name)


def cli(binary: str, *args: str) -> str:
    r = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cli", default=str(ROOT / "build" / "minigpt"))
    o = ap.parse_args()
    t = str(o.threads)
    with tempfile.TemporaryDirectory(prefix="minigpt-124m-") as tmp:
        d = Path(tmp)
        write_model(d)
        text_file = d / "text.txt"
        text_file.write_text(TEXT.read_text())
        m = minigpt.Model(str(d), threads=o.threads)
        n_vocab = int(m.config["n_vocab"])
        ids512 = np.random.default_rng(5).integers(0, n_vocab, 512).astype(np.int32)
        chunks = 2
        text_ids = m.tokenizer.encode(TEXT.read_text()[:20000])
        assert len(text_ids) >= 512 * chunks
        m.generate(PROMPT, 8, temperature=0)  # warm-up: pages, thread pool
        rates: dict[str, list[float]] = {k: [] for k in
                                         ("decode cli", "decode py", "prefill cli", "prefill py", "logits cli", "logits py")}  # fmt: skip
        for rnd in range(o.rounds):
            out = cli(o.cli, "generate", "-m", str(d), "-t", t, "-p", PROMPT, "-n", "128", "--temperature", "0",
                      "--ignore-eos", "--json")  # fmt: skip
            rates["decode cli"].append(json.loads(out.splitlines()[-1])["summary"]["decode_tok_s"])
            r = m.generate(PROMPT, 128, temperature=0, ignore_eos=True)
            rates["decode py"].append((len(r.ids) - 1) / r.decode_seconds)

            out = cli(o.cli, "bench", "-m", str(d), "-t", t, "-p", "512", "-n", "0", "-r", "3", "-o", "json")
            rates["prefill cli"].append(json.loads(out)["results"][0]["tok_s"])
            s = m.session()
            times = []
            for _ in range(4):  # one warm-up and 3 timed, as bench -r 3
                s.reset()
                t0 = time.perf_counter()
                s.eval(ids512)
                times.append(time.perf_counter() - t0)
            rates["prefill py"].append(512 / statistics.mean(times[1:]))

            out = cli(o.cli, "perplexity", "-m", str(d), "-t", t, "-f", str(text_file), "-c", "512", "--chunks",
                      str(chunks), "--json", "--no-progress")  # fmt: skip
            rates["logits cli"].append(json.loads(out)["tok_s"])
            t0 = time.perf_counter()
            for c in range(chunks):
                m.logits(text_ids[c * 512 : (c + 1) * 512])
            rates["logits py"].append(512 * chunks / (time.perf_counter() - t0))
            print(f"round {rnd + 1}/{o.rounds}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()),
                  file=sys.stderr)  # fmt: skip

    print(f"minigpt Python overhead: random gpt2 124M shape, F32, {o.threads} threads, median of {o.rounds} "
          "interleaved rounds (tok/s)\n")  # fmt: skip
    print("| test | CLI | Python | Python / CLI |")
    print("|---|---:|---:|---:|")
    for name, what in (("decode", "tg128: generate vs m.generate"), ("prefill", "pp512: bench vs session.eval"),
                       ("logits", "512 rows of logits: perplexity -c 512 vs m.logits")):  # fmt: skip
        cli_rate, py_rate = statistics.median(rates[name + " cli"]), statistics.median(rates[name + " py"])
        print(f"| {what} | {cli_rate:.1f} | {py_rate:.1f} | {py_rate / cli_rate:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
