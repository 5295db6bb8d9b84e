"""session.eval of 512 ids against `minigpt bench -p 512`, each in a fresh process, alternating (random GPT-2 124M,
F32, 2 threads): the Python package's prefill with nothing run before it in its process, as the CLI's is.

    PYTHONPATH=build/python .venv/bin/python bench/python_prefill_alone.py [--rounds 6] [--cli build/minigpt]

Each round starts one `minigpt bench -m DIR -p 512 -n 0 -r 3` and one Python process that loads the model and
times 3 evals of the same 512 ids after a warm-up (the median), in an order that alternates by round. It prints
each round and the medians. bench/python_overhead.py measures the same pair inside one long-lived process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import statistics, sys, time
import numpy as np
import minigpt
m = minigpt.Model(sys.argv[1], threads=int(sys.argv[2]))
ids = np.random.default_rng(5).integers(0, int(m.config["n_vocab"]), 512).astype(np.int32)
s = m.session()
times = []
for _ in range(4):
    s.reset()
    t0 = time.perf_counter()
    s.eval(ids)
    times.append(time.perf_counter() - t0)
print(512 / statistics.median(times[1:]))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cli", default=str(ROOT / "build" / "minigpt"))
    o = ap.parse_args()
    spec = importlib.util.spec_from_file_location("python_overhead", ROOT / "bench" / "python_overhead.py")
    assert spec is not None and spec.loader is not None
    po = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(po)
    t = str(o.threads)
    cli: list[float] = []
    py: list[float] = []
    with tempfile.TemporaryDirectory(prefix="minigpt-124m-") as tmp:
        po.write_model(Path(tmp))
        for r in range(o.rounds):
            for which in ("cli", "py") if r % 2 == 0 else ("py", "cli"):
                if which == "cli":
                    out = subprocess.run([o.cli, "bench", "-m", tmp, "-t", t, "-p", "512", "-n", "0", "-r", "3", "-o", "json"],
                                         capture_output=True, text=True, check=True).stdout  # fmt: skip
                    cli.append(float(json.loads(out)["results"][0]["tok_s"]))
                else:
                    out = subprocess.run([sys.executable, "-c", CHILD, tmp, t], capture_output=True, text=True,
                                         check=True).stdout  # fmt: skip
                    py.append(float(out.strip().splitlines()[-1]))
            print(f"round {r + 1}/{o.rounds}: cli {cli[-1]:.1f}, py {py[-1]:.1f} tok/s", flush=True)
    c, p = statistics.median(cli), statistics.median(py)
    print(f"pp512, F32, {o.threads} threads, fresh processes, median of {o.rounds} rounds: bench {c:.1f}, "
          f"session.eval {p:.1f}, Python / CLI {p / c:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
