#!/usr/bin/env python3
"""Golden data for minigpt's sampler and generation loop, from Hugging Face transformers itself.

Writes tests/fixtures/generate/processors.json:
  - each logits processor alone (RepetitionPenalty, Temperature, TopK, TopP, MinP) on fixed random scores,
  - the whole chain transformers builds for sampling (GPT2LMHeadModel._get_logits_processor with a
    GenerationConfig), which fixes the order minigpt must apply them in;
and tests/fixtures/generate/greedy.json: transformers' generate(do_sample=False) token ids on the
committed fixture models (tests/fixtures/models/*).

Re-run from the repository root:  python3 tools/reference/make_sampler_reference.py
"""
import json
import pathlib

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, GPT2LMHeadModel
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "generate"
torch.set_num_threads(1)


def as_list(t):
    # -inf (filtered) as null: JSON has no infinities.
    return [None if np.isneginf(v) else float(v) for v in t.numpy().astype(np.float32).ravel()]


def scores_for(rng, vocab, ties):
    s = rng.normal(0.0, 2.5, size=vocab).astype(np.float32)
    if ties:  # repeated values around the cut points of top-k / top-p
        s[5:9] = s[0]
        s[20:23] = np.sort(s)[-3]
    return s


def main():
    rng = np.random.default_rng(20261122)
    cases = []
    single = [
        ("repetition_penalty", [1.3, 0.7, 2.0], lambda p: RepetitionPenaltyLogitsProcessor(penalty=p)),
        ("temperature", [0.5, 0.8, 1.7], lambda p: TemperatureLogitsWarper(temperature=p)),
        ("top_k", [1, 3, 10, 64], lambda p: TopKLogitsWarper(top_k=p)),
        ("top_p", [0.1, 0.5, 0.9, 0.999], lambda p: TopPLogitsWarper(top_p=p)),
        ("min_p", [0.01, 0.1, 0.5], lambda p: MinPLogitsWarper(min_p=p)),
    ]
    for name, params, make in single:
        for p in params:
            for ties in (False, True):
                vocab = int(rng.integers(40, 90))
                s = scores_for(rng, vocab, ties)
                ids = rng.integers(0, vocab, size=int(rng.integers(3, 12))).tolist()
                ids += ids[:2]  # repeated ids: penalised once
                out = make(p)(torch.tensor([ids]), torch.tensor(s)[None, :])
                cases.append({"processor": name, "param": p, "input_ids": ids, "scores": s.tolist(), "expected": as_list(out[0])})

    # The chain transformers builds for do_sample=True, in its own order.
    model = GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=1, n_embd=8, n_positions=8, vocab_size=64))
    chains = []
    for cfg in [
        dict(temperature=0.7, top_k=10, top_p=0.9, min_p=0.05, repetition_penalty=1.3),
        dict(temperature=1.5, top_k=0, top_p=0.8, repetition_penalty=0.8),
        dict(temperature=0.9, top_k=5, min_p=0.2),
        dict(temperature=1.0, top_k=50, top_p=1.0),
    ]:
        gc = GenerationConfig(do_sample=True, **cfg)
        procs = model._get_logits_processor(generation_config=gc, input_ids_seq_length=4, logits_processor=None,
                                            device="cpu", model_kwargs={})
        for ties in (False, True):
            s = scores_for(rng, 64, ties)
            ids = rng.integers(0, 64, size=10).tolist()
            out = procs(torch.tensor([ids]), torch.tensor(s)[None, :])
            chains.append({"config": cfg, "order": [type(p).__name__ for p in procs], "input_ids": ids,
                           "scores": s.tolist(), "expected": as_list(out[0])})

    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"generator": "tools/reference/make_sampler_reference.py", "transformers": transformers.__version__, "torch": torch.__version__}
    (OUT / "processors.json").write_text(json.dumps({"meta": meta, "single": cases, "chains": chains}, indent=0) + "\n")

    # Greedy generation on the fixture models transformers can load as they are.
    greedy = []
    for name in ["tiny", "tiny-untied", "tiny-f16", "tiny-bf16", "tiny-sharded", "tiny-relu-legacy"]:
        d = ROOT / "tests" / "fixtures" / "models" / name
        m = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        n_pos = m.config.n_positions
        r = np.random.default_rng(len(name))
        prompt = r.integers(0, m.config.vocab_size, size=5).tolist()
        with torch.no_grad():
            out = m.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n_pos - len(prompt),
                             eos_token_id=None, pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        greedy.append({"model": name, "prompt": prompt, "generated": out[0, len(prompt):].tolist()})
    (OUT / "greedy.json").write_text(json.dumps({"meta": meta, "cases": greedy}) + "\n")
    print(f"wrote {len(cases)} single-processor cases, {len(chains)} chains, {len(greedy)} greedy runs")


if __name__ == "__main__":
    main()
