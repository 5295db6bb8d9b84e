#!/usr/bin/env python3
"""Generate the attention-map reference fixtures for minigpt's tests (tests/test_attention.cpp).

For each model below, runs Hugging Face transformers (float32, attn_implementation="eager",
output_attentions=True) on a fixed list of token ids and writes tests/fixtures/attention/<name>.json:

    {"generator", "transformers", "torch", "model": "<dir relative to the repository root>",
     "text": <the prompt, only for models with a tokenizer>, "ids": [...], "tokens": [...],
     "n_layer", "n_head", "attentions": [layer][head][query][key]}

`attentions` is transformers' own output (full square rows, zeros above the diagonal), each value the
float32 written as the shortest decimal that reads back to it. The fixture models are those of
tools/reference/make_reference.py (tests/fixtures/models/<name>): `tiny` (learned positions), `tiny-sinusoidal`
(transformers' GPT-2 has no sinusoidal positions: as make_reference.py does, the model is loaded and the
sinusoidal table copied into wpe), `tiny-untied` (3 heads, scale_attn_by_inverse_layer_idx) and
`tiny-relu-legacy` (scale_attn_weights=False, a legacy checkpoint). `shakespeare-char` is the shipped model
(models/shakespeare-char) on a text prompt, its ids from its tokenizer.json (`tokenizers`), for the CLI test.

Ids are drawn from a fixed seed per fixture, so re-runs are byte-identical for the same versions.
Re-run from the repository root (needs torch, transformers, tokenizers, numpy):

    python3 tools/reference/make_attention_reference.py          # all fixtures
    python3 tools/reference/make_attention_reference.py tiny     # only those whose name contains a word
"""

import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "attention")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from make_reference import sinusoidal_table  # noqa: E402  (the same table the fixture was made with)

torch.set_num_threads(1)

# name, model directory, seed of the ids (None: a text prompt), number of ids or the prompt
FIXTURES = [
    ("tiny", "tests/fixtures/models/tiny", 2001, 9),
    ("tiny-sinusoidal", "tests/fixtures/models/tiny-sinusoidal", 2007, 9),
    ("tiny-untied", "tests/fixtures/models/tiny-untied", 2002, 7),
    ("tiny-relu-legacy", "tests/fixtures/models/tiny-relu-legacy", 2006, 7),
    ("shakespeare-char", "models/shakespeare-char", None, "ROMEO:"),
]


def load_model(d):
    model = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    cfg = model.config
    if getattr(cfg, "position_embedding_type", "learned") == "sinusoidal":  # wpe is not in the file
        with torch.no_grad():
            model.transformer.wpe.weight.copy_(torch.from_numpy(sinusoidal_table(cfg.n_positions, cfg.n_embd)))
    assert model.config._attn_implementation == "eager"
    return model.eval()


def f32(x):
    """The shortest decimal that reads back as the float32 x (a JSON number)."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


@torch.no_grad()
def make(name, rel, seed, arg):
    d = os.path.join(ROOT, rel)
    model = load_model(d)
    fixture = {"generator": "tools/reference/make_attention_reference.py", "transformers": transformers.__version__,
               "torch": torch.__version__.split("+")[0], "model": rel}
    if seed is None:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        ids = tok.encode(arg).ids
        fixture["text"] = arg
        fixture["tokens"] = [tok.decode([i]) for i in ids]
    else:
        ids = np.random.default_rng(seed).integers(0, model.config.vocab_size, size=arg).tolist()
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), output_attentions=True, use_cache=False)
    att = torch.stack([a[0] for a in out.attentions]).float().numpy()  # [layer, head, query, key]
    L, H, T, T2 = att.shape
    assert (L, H, T, T2) == (model.config.n_layer, model.config.n_head, len(ids), len(ids))
    assert np.all(np.triu(att, 1) == 0) and np.allclose(att.sum(-1), 1, atol=1e-5)
    fixture.update(ids=[int(i) for i in ids], n_layer=L, n_head=H,
                   attentions=[[[[f32(v) for v in row] for row in head] for head in layer] for layer in att])
    back = np.array(fixture["attentions"], dtype=np.float32)
    assert np.array_equal(back, att), name  # the decimals read back exactly
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"  {name}: {L} layers x {H} heads x {T} tokens, max weight {att.max():.3f}, "
          f"{os.path.getsize(path) / 1024:.1f} KiB -> {os.path.relpath(path, ROOT)}")


def main(argv):
    os.makedirs(OUT, exist_ok=True)
    want = argv[1:]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    for name, rel, seed, arg in FIXTURES:
        if not want or any(w == name or w in name for w in want):
            make(name, rel, seed, arg)


if __name__ == "__main__":
    main(sys.argv)
