#!/usr/bin/env python3
"""Golden perplexities for minigpt's tests, computed from transformers' logits.

Two recipes, as their users run them (see include/minigpt/perplexity.h):
  chunks  llama.cpp's llama-perplexity: consecutive chunks of n_ctx tokens, each from an empty cache; the
          logits of positions n_ctx/2 .. n_ctx-2 score the next token (BOS replacement: none of these
          tokenizers adds one).
  stride  transformers' "Perplexity of fixed-length models" loop (docs/source/en/perplexity.md): for
          begin in range(0, n, stride), end = min(begin + n_ctx, n), labels = input_ids with all but the
          last (end - prev_end) set to -100, loss = model(input_ids, labels=labels).loss. Here the loss is
          summed over the tokens actually scored (the model's shift drops the window's first position) rather
          than averaged per window and re-weighted by the label count, which the documentation does and
          which miscounts one token per window.
Each case records the tokens scored, the summed NLL, ppl = exp(mean NLL), and llama.cpp's error estimate.

Models and texts:
  shakespeare-char  models/shakespeare-char (the shipped model), the text = bytes [offset, offset + length)
                    of tests/fixtures/data/tinyshakespeare.txt in its validation split (token = byte). Also
                    `validation`: the whole validation split (bytes [int(0.9 n), n)), for the README (the
                    tests run the 3000-byte cases; the validation figures are compared by hand there).
  tiny              tests/fixtures/models/tiny (random GPT-2, vocab 320, 64 positions), random token ids.

Re-run from the repository root (deterministic; needs torch, transformers, numpy):

    python3 tools/reference/make_perplexity_reference.py     # writes tests/fixtures/perplexity/reference.json
"""

import json
import math
import os

import numpy as np
import torch
import transformers
from transformers import GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "perplexity", "reference.json")
TEXT = os.path.join(ROOT, "tests", "fixtures", "data", "tinyshakespeare.txt")

torch.set_num_threads(2)


def load(path):
    model = GPT2LMHeadModel.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


@torch.no_grad()
def logprobs(model, ids):
    """log softmax of the logits of every position of one window, float64 [T, V]."""
    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    return torch.log_softmax(logits.double(), dim=-1)


def chunks(model, ids, n_ctx, max_chunks=0):
    n_chunks = len(ids) // n_ctx
    if max_chunks:
        n_chunks = min(n_chunks, max_chunks)
    nll = []
    for c in range(n_chunks):
        w = ids[c * n_ctx:(c + 1) * n_ctx]
        lp = logprobs(model, w)
        for j in range(n_ctx // 2, n_ctx - 1):
            nll.append(-lp[j, w[j + 1]].item())
    return nll, n_chunks


def stride(model, ids, n_ctx, stride_):
    """transformers' loop, with the loss of each window summed over its scored labels."""
    nll, windows, prev_end = [], 0, 0
    n = len(ids)
    for begin in range(0, n, stride_):
        end = min(begin + n_ctx, n)
        trg_len = end - prev_end
        input_ids = torch.tensor([ids[begin:end]])
        labels = input_ids.clone()
        labels[:, :-trg_len] = -100
        with torch.no_grad():
            logits = model(input_ids=input_ids, use_cache=False).logits
        # what GPT2LMHeadModel's loss does: shift, cross-entropy over labels != -100 (here per token)
        shift_logits = logits[0, :-1].double()
        shift_labels = labels[0, 1:]
        per_token = torch.nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=-100,
                                                      reduction="none")
        nll.extend(per_token[shift_labels != -100].tolist())
        windows += 1
        prev_end = end
        if end == n:
            break
    return nll, windows


def summary(nll):
    a = np.array(nll, dtype=np.float64)
    n = len(a)
    mean = a.mean()
    var = (a * a).mean() - mean * mean  # llama.cpp's estimate
    stderr = math.sqrt(var / (n - 1)) if n > 1 and var > 0 else 0.0
    return {"scored": n, "nll_sum": float(a.sum()), "nll_mean": float(mean), "nll_stderr": stderr,
            "ppl": math.exp(mean), "ppl_error": math.exp(mean) * stderr}


def main():
    data = open(TEXT, "rb").read()
    val0 = int(0.9 * len(data))
    cases = []

    char = load(os.path.join(ROOT, "models", "shakespeare-char"))
    offset, length = val0, 3000
    ids = list(data[offset:offset + length])
    base = {"model": "shakespeare-char", "text_offset": offset, "text_length": length, "tokens": len(ids)}
    for n_ctx, max_chunks in [(128, 0), (100, 0), (128, 5)]:
        nll, w = chunks(char, ids, n_ctx, max_chunks)
        cases.append({**base, "recipe": "chunks", "n_ctx": n_ctx, "max_chunks": max_chunks, "windows": w,
                      **summary(nll)})
    for n_ctx, s in [(128, 64), (128, 128), (128, 100), (96, 1)]:
        nll, w = stride(char, ids if s > 1 else ids[:100], n_ctx, s)
        extra = {"text_length": 100, "tokens": 100} if s == 1 else {}
        cases.append({**base, **extra, "recipe": "stride", "n_ctx": n_ctx, "stride": s, "windows": w,
                      **summary(nll)})
    # The whole validation split (README figure): both recipes at the model's context.
    val = list(data[val0:])
    for recipe in ["chunks", "stride"]:
        nll, w = chunks(char, val, 128) if recipe == "chunks" else stride(char, val, 128, 64)
        cases.append({"model": "shakespeare-char", "name": "validation", "text_offset": val0,
                      "text_length": len(val), "tokens": len(val), "recipe": recipe, "n_ctx": 128,
                      **({"stride": 64} if recipe == "stride" else {"max_chunks": 0}), "windows": w,
                      **summary(nll)})

    tiny = load(os.path.join(ROOT, "tests", "fixtures", "models", "tiny"))
    rng = np.random.default_rng(20261123)
    tiny_ids = [int(x) for x in rng.integers(0, tiny.config.vocab_size, size=500)]
    for recipe, n_ctx, s in [("chunks", 64, 0), ("chunks", 40, 0), ("stride", 64, 32), ("stride", 64, 64),
                             ("stride", 50, 17)]:
        if recipe == "chunks":
            nll, w = chunks(tiny, tiny_ids, n_ctx)
            extra = {"max_chunks": 0}
        else:
            nll, w = stride(tiny, tiny_ids, n_ctx, s)
            extra = {"stride": s}
        cases.append({"model": "tiny", "ids": tiny_ids, "tokens": len(tiny_ids), "recipe": recipe,
                      "n_ctx": n_ctx, **extra, "windows": w, **summary(nll)})

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    meta = {"generator": "tools/reference/make_perplexity_reference.py", "transformers": transformers.__version__,
            "torch": torch.__version__.split("+")[0]}
    with open(OUT, "w") as f:
        json.dump({"metadata": meta, "cases": cases}, f, indent=1)
    for c in cases:
        print(f"{c['model']:17s} {c.get('name', ''):10s} {c['recipe']:6s} n_ctx {c['n_ctx']:3d} "
              f"stride {c.get('stride', '-')!s:4s} tokens {c['tokens']:6d} scored {c['scored']:6d} "
              f"ppl {c['ppl']:.6f} +/- {c['ppl_error']:.5f}")


if __name__ == "__main__":
    main()
