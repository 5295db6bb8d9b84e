"""llguidance's cost on the same vocabulary and tokens as bench_grammar (bench/grammar.sh runs both).

Reads what `bench_grammar ... --dump DIR` wrote (each id's bytes in hex, "-" for a special token; the text's
ids; the end-of-text id) and times, through llguidance's Python package (its Rust core; each call crosses
from Python, about a microsecond of the figures): the tokenizer table, the schema's compile (the LLMatcher's
construction, which compiles the grammar; a fresh tokenizer-side cache each time is not possible, so the
repeats after the first may reuse llguidance's lexer caches: the first is reported too), and the per-token
mask (fill_next_token_bitmask) along the text, accepting each of its tokens.

Usage: grammar_llguidance.py DUMP_DIR SCHEMA.json [--repeat N]
"""
import argparse
import importlib.metadata
import statistics
import time

import llguidance
import llguidance.numpy
import numpy as np


class Vocab:
    """What llguidance.TokenizerWrapper wants: tokens as bytes, the ids of special tokens, eos/bos, and an
    encoder. llguidance encodes the grammar's forced strings with it; a greedy longest match over the same
    vocabulary stands in for minigpt's BPE there (the mask does not depend on it)."""

    def __init__(self, tokens, special, eos):
        self.tokens = tokens
        self.special_token_ids = special
        self.eos_token_id = eos
        self.bos_token_id = None
        skip = set(special)
        self._ids = {t: i for i, t in enumerate(tokens) if i not in skip}
        self._longest = max(len(t) for t in self._ids)

    def __call__(self, s):
        b = s.encode("utf-8") if isinstance(s, str) else s
        out, i = [], 0
        while i < len(b):
            for n in range(min(self._longest, len(b) - i), 0, -1):
                if b[i:i + n] in self._ids:
                    out.append(self._ids[b[i:i + n]])
                    i += n
                    break
            else:
                raise ValueError(f"no token for byte {b[i]}")
        return out


def quantile(v, q):
    v = sorted(v)
    return v[int(q * (len(v) - 1) + 0.5)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("schema")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    tokens, special = [], []
    with open(f"{a.dump}/vocab.txt") as f:
        for i, line in enumerate(f):
            line = line.strip()
            if line == "-":
                tokens.append(b"")
                special.append(i)
            else:
                tokens.append(bytes.fromhex(line))
    ids = [int(x) for x in open(f"{a.dump}/ids.txt").read().split()]
    eos = [int(x) for x in open(f"{a.dump}/eos.txt").read().split()]
    # llguidance wants a non-empty byte string for every token: a special one is named as its "\xff[...]"
    # marker (toktrie's convention), which no text can produce.
    for i in special:
        tokens[i] = b"\xff[special_%d]" % i
    schema = open(a.schema).read()

    t = time.perf_counter()
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocab(tokens, special, eos[0] if eos else special[0])))
    table_ms = (time.perf_counter() - t) * 1000
    print(f"llguidance {importlib.metadata.version('llguidance')}: vocabulary "
          f"{len(tokens)} ids; text {len(ids)} tokens")
    print(f"llguidance tokenizer table: {table_ms:.1f} ms")

    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    bitmask = llguidance.numpy.allocate_token_bitmask(1, tok.vocab_size)
    compile_ms, first_us, mask_us = [], [], []
    for r in range(a.repeat):
        t = time.perf_counter()
        m = llguidance.LLMatcher(tok, grammar, log_level=1)
        compile_ms.append((time.perf_counter() - t) * 1000)
        if m.is_error():
            raise SystemExit(f"llguidance: {m.get_error()}")
        for i in range(len(ids) + 1):
            t = time.perf_counter_ns()
            llguidance.numpy.fill_next_token_bitmask(m, bitmask, 0)
            us = (time.perf_counter_ns() - t) / 1000
            if i == 0:
                first_us.append(us)
            mask_us.append(us)
            nxt = ids[i] if i < len(ids) else (eos[0] if eos else None)
            if nxt is None:
                break
            if not m.consume_token(nxt):
                raise SystemExit(f"llguidance refused token {i} (id {nxt}): {m.get_error()}")
        if not m.is_stopped() and not m.is_accepting():
            raise SystemExit("llguidance: the text did not end the grammar")
    print(f"llguidance schema compile: median {statistics.median(compile_ms):.1f} ms, first {compile_ms[0]:.1f}, "
          f"min {min(compile_ms):.1f}, max {max(compile_ms):.1f} ({a.repeat} runs)")
    print(f"llguidance first mask: median {statistics.median(first_us):.1f} us")
    print(f"llguidance mask per token: median {quantile(mask_us, 0.5):.1f} us, "
          f"mean {statistics.mean(mask_us):.1f}, p90 {quantile(mask_us, 0.9):.1f}, "
          f"p99 {quantile(mask_us, 0.99):.1f}, max {quantile(mask_us, 1):.1f} ({len(mask_us)} masks: "
          f"{sum(mask_us) / 1000 / a.repeat:.1f} ms per text)")


if __name__ == "__main__":
    main()
