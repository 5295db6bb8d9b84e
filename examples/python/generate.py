"""Generate text with minigpt from Python: streamed, then greedy with log-probabilities.

    PYTHONPATH=build/python .venv/bin/python examples/python/generate.py [MODEL] [PROMPT]

(or `pip install .` and plain `python`). MODEL is any path `minigpt -m` takes; default the shipped model.
"""

from __future__ import annotations

import math
import sys

import minigpt


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else "models/shakespeare-char"
    prompt = argv[2] if len(argv) > 2 else "ROMEO:"
    try:
        m = minigpt.Model(path, threads=2)
    except minigpt.Error as e:  # one line naming the file, as the CLI prints it
        print(f"error: {e}", file=sys.stderr)
        return 1

    # Sampled, streamed as it comes (Ctrl-C stops it within a token).
    print(prompt, end="", flush=True)
    stream = m.generate(prompt, max_new_tokens=120, temperature=0.8, top_k=40, seed=1, stream=True)
    for piece in stream:
        print(piece, end="", flush=True)
    print()
    result = stream.result
    if result is not None:
        n = len(result.ids)
        rate = (n - 1) / result.decode_seconds if n > 1 and result.decode_seconds > 0 else 0.0
        print(f"[{n} tokens, {rate:.0f} tok/s, stop: {result.stop_reason}, seed {result.seed}]", file=sys.stderr)

    # Greedy, with each token's probability and the runner-up's (the two most likely: the token is the first).
    out = m.generate(prompt, max_new_tokens=12, temperature=0, logprobs=2)
    for tok in out.tokens:
        alt_id, alt_lp = tok.top_logprobs[1]
        p = math.exp(tok.logprob or 0.0)
        print(f"{tok.text!r:6} p={p:.3f}   runner-up {m.tokenizer.decode([alt_id])!r:6} p={math.exp(alt_lp):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
