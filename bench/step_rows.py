#!/usr/bin/env python3
"""What a forward step of r tokens costs after a prompt (a speculative step verifies r - 1 drafts): the
median of 15 timed steps of r = 1, 2, 4, 9, 16 tokens of one sequence, with the last row's logits only and
with every row's (as speculation needs), through the Python package (build/python).

Usage: PYTHONPATH=build/python .venv/bin/python bench/step_rows.py MODEL PROMPT_FILE [THREADS]
"""
import statistics
import sys
import time

import minigpt

model = minigpt.Model(sys.argv[1], threads=int(sys.argv[3]) if len(sys.argv) > 3 else 0)
ids = model.tokenizer.encode(open(sys.argv[2]).read(), special=True)
s = model.session()
s.eval(ids)
n0 = s.n_past
print(f"{sys.argv[1]}: steps after a prompt of {n0} tokens; median of 15, ms")


def timed(rows, all_logits):
    ts = []
    for _ in range(15):
        s.keep(n0)
        t = time.perf_counter()
        s.eval(ids[:rows], all_logits=all_logits)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


one = timed(1, False)
for rows in (1, 2, 4, 9, 16):
    last, every = timed(rows, False), timed(rows, True)
    print(f"rows {rows:2d}: last row's logits {last:6.1f} ms ({last / one:.2f}x one row), every row's {every:6.1f} ms "
          f"({every / one:.2f}x)")
