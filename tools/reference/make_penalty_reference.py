#!/usr/bin/env python3
"""Golden data for the logit bias and the OpenAI API's presence and frequency penalties, from transformers.

transformers has the logit bias (GenerationConfig.sequence_bias with one-token sequences, its
SequenceBiasLogitsProcessor) but not the OpenAI penalties. Those are OpenAIPenalties below, a LogitsProcessor
that computes the formula of OpenAI's documentation (and vLLM's code) over the generated tokens only:

    logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty

and it is passed to generate() as a caller's processor, so transformers itself decides where it runs in the
chain (after sequence_bias and the repetition penalty, before temperature / top-k / top-p / min-p: the order
vLLM applies them in too).

Writes tests/fixtures/generate/penalties.json:
  - "chains": transformers' processor chain (GPT2LMHeadModel._get_logits_processor, do_sample=True) on fixed
    random scores, prompt + generated ids, with its order,
  - "greedy": generate(do_sample=False) token ids of the shipped model (models/shakespeare-char) with the
    penalties and biases,
and the repetition penalty over the last n ids only (llama.cpp's --repeat-last-n: LastNRepetitionPenalty,
transformers' own processor given the window) in both.

Re-run from the repository root:  python3 tools/reference/make_penalty_reference.py
"""
import json
import pathlib

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, GPT2LMHeadModel
from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList, RepetitionPenaltyLogitsProcessor

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "generate" / "penalties.json"
torch.set_num_threads(1)


class OpenAIPenalties(LogitsProcessor):
    """OpenAI's presence and frequency penalties over the ids after the prompt, in float32 as vLLM does."""

    def __init__(self, prompt_len, presence, frequency):
        self.prompt_len, self.presence, self.frequency = prompt_len, presence, frequency

    def __call__(self, input_ids, scores):
        out = scores.clone()
        for row in range(input_ids.shape[0]):
            gen = input_ids[row, self.prompt_len:]
            counts = torch.bincount(gen, minlength=scores.shape[1]).to(torch.float32)
            out[row] = out[row] - counts * self.frequency
            out[row] = out[row] - (counts > 0).to(torch.float32) * self.presence
        return out


class LastNRepetitionPenalty(LogitsProcessor):
    """llama.cpp's --repeat-last-n: transformers' own RepetitionPenaltyLogitsProcessor on the last n ids only."""

    def __init__(self, n, penalty):
        self.n, self.inner = n, RepetitionPenaltyLogitsProcessor(penalty=penalty)

    def __call__(self, input_ids, scores):
        return scores if self.n == 0 else self.inner(input_ids[:, -self.n:], scores)


def as_list(t):
    # -inf (filtered) as null: JSON has no infinities.
    return [None if np.isneginf(v) else float(v) for v in t.numpy().astype(np.float32).ravel()]


def bias_json(bias):
    return [[i, None if np.isneginf(b) else b] for i, b in bias]


def sequence_bias(bias):
    return [[[i], float(b)] for i, b in bias] if bias else None


def main():
    rng = np.random.default_rng(20261128)
    vocab = 64
    model = GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=1, n_embd=8, n_positions=8, vocab_size=vocab,
                                                    bos_token_id=0, eos_token_id=0))
    chains = []
    for cfg, pres, freq, bias in [
        (dict(), 0.5, 0.0, []),
        (dict(), 0.0, 0.7, []),
        (dict(), -0.4, 1.3, []),
        (dict(), 0.0, 0.0, [(3, 5.0), (7, -2.5), (11, float("-inf"))]),
        (dict(temperature=0.7, top_k=10, top_p=0.9, min_p=0.05, repetition_penalty=1.3), 0.6, 0.25,
         [(1, 1.5), (2, float("-inf")), (40, -100.0)]),
        (dict(temperature=1.5, top_p=0.8, repetition_penalty=0.8), 2.0, -2.0, [(5, 100.0)]),
        (dict(temperature=0.9, top_k=5), 1.0, 1.0, [(0, -1.0)]),
    ]:
        gc = GenerationConfig(do_sample=True, top_k=cfg.pop("top_k", 0), sequence_bias=sequence_bias(bias), **cfg)
        for ties in (False, True):
            s = rng.normal(0.0, 2.5, size=vocab).astype(np.float32)
            if ties:
                s[5:9] = s[0]
            prompt = rng.integers(0, vocab, size=6).tolist()
            gen = rng.integers(0, vocab, size=9).tolist()
            gen += gen[:3]  # tokens generated more than once
            procs = model._get_logits_processor(
                generation_config=gc, input_ids_seq_length=len(prompt), device="cpu", model_kwargs={},
                logits_processor=LogitsProcessorList([OpenAIPenalties(len(prompt), pres, freq)]))
            out = procs(torch.tensor([prompt + gen]), torch.tensor(s)[None, :])
            chains.append({"config": {k: v for k, v in gc.to_diff_dict().items() if k in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")}, "presence_penalty": pres,
                           "frequency_penalty": freq, "logit_bias": bias_json(bias),
                           "order": [type(p).__name__ for p in procs], "prompt": prompt, "generated": gen,
                           "scores": s.tolist(), "expected": as_list(out[0])})

    # The repetition penalty over the last n ids (llama.cpp's --repeat-last-n): transformers' processor on the
    # window, passed as a caller's processor in place of GenerationConfig's (so in the same place of the chain).
    for n, rep, pres, temp in [(4, 1.5, 0.0, 1.0), (1, 0.7, 0.3, 0.8), (0, 2.0, 0.0, 1.0), (30, 1.3, 0.0, 1.0)]:
        gc = GenerationConfig(do_sample=True, top_k=0, temperature=temp)
        s = rng.normal(0.0, 2.5, size=vocab).astype(np.float32)
        prompt = rng.integers(0, vocab, size=6).tolist()
        gen = rng.integers(0, vocab, size=9).tolist()
        procs = model._get_logits_processor(
            generation_config=gc, input_ids_seq_length=len(prompt), device="cpu", model_kwargs={},
            logits_processor=LogitsProcessorList([LastNRepetitionPenalty(n, rep), OpenAIPenalties(len(prompt), pres, 0.0)]))
        out = procs(torch.tensor([prompt + gen]), torch.tensor(s)[None, :])
        chains.append({"config": {"temperature": temp, "repetition_penalty": rep}, "repeat_last_n": n,
                       "presence_penalty": pres, "frequency_penalty": 0.0, "logit_bias": [],
                       "order": [type(p).__name__ for p in procs], "prompt": prompt, "generated": gen,
                       "scores": s.tolist(), "expected": as_list(out[0])})

    # Greedy on the shipped model: its text repeats itself without penalties (README's sample), so each setting
    # changes the tokens.
    d = ROOT / "models" / "shakespeare-char"
    m = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = list(b"ROMEO:\nWhat light")
    greedy = []
    for pres, freq, bias, rep in [
        (0.0, 0.0, [], 1.0),
        (0.0, 0.5, [], 1.0),
        (0.8, 0.0, [], 1.0),
        (0.3, 0.2, [(ord("e"), float("-inf")), (ord("!"), 4.0)], 1.0),
        (0.4, 0.1, [(ord(" "), -1.5)], 1.2),
        (0.0, 0.0, [], (1.5, 8)),  # (penalty, last n): llama.cpp's --repeat-last-n
        (0.0, 0.0, [], (1.5, 64)),
    ]:
        last_n = -1
        if isinstance(rep, tuple):
            rep, last_n = rep
        procs = [LastNRepetitionPenalty(last_n, rep)] if last_n >= 0 else []
        procs = LogitsProcessorList(procs + [OpenAIPenalties(len(prompt), pres, freq)])
        with torch.no_grad():
            out = m.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=m.config.n_positions - len(prompt),
                             repetition_penalty=rep if last_n < 0 else None, sequence_bias=sequence_bias(bias),
                             logits_processor=procs,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long), pad_token_id=0)
        ids = out[0, len(prompt):].tolist()
        greedy.append({"presence_penalty": pres, "frequency_penalty": freq, "logit_bias": bias_json(bias),
                       "repetition_penalty": rep, "repeat_last_n": last_n, "prompt": prompt, "generated": ids})
        print(f"presence {pres} frequency {freq} bias {bias} repetition {rep} last {last_n}: {bytes(ids).decode('utf-8', 'replace')!r}")

    meta = {"generator": "tools/reference/make_penalty_reference.py", "transformers": transformers.__version__,
            "torch": torch.__version__}
    OUT.write_text(json.dumps({"meta": meta, "chains": chains, "greedy": greedy}, indent=0) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(chains)} chains, {len(greedy)} greedy runs")


if __name__ == "__main__":
    main()
