#!/usr/bin/env python3
"""transformers' greedy continuation of the shipped model in Q8_0, the reference for `minigpt quantize --type q8_0`.

Writes tests/fixtures/quantize/shipped-q8_0-greedy.json:
  cases                for two prompts, "ROMEO:" (6 tokens: a decode-sized prompt step) and a 61-token one
                       (longer than minigpt's GEMV batch, so its prompt runs through the prefill GEMM):
    prompt, prompt_ids   the prompt as the shipped tokenizer encodes it (AutoTokenizer)
    f32_ids              transformers' greedy continuation (100 tokens, or to the end of the 128-token context;
                         float32, eager) of models/shakespeare-char
    q8_0_ids             the same with every matrix llama-quantize makes Q8_0 in a q8_0 file (token_embd, the tied
                       head, and each block's attn_qkv, attn_output, ffn_up, ffn_down; not position_embd, norms or
                       biases) replaced by its gguf.quants Q8_0 round trip (quantize then dequantize, along the
                       rows GGUF stores: a Conv1D weight [in, out] is the GGUF matrix [out, in] transposed).
                       transformers loads a Q8_0 GGUF file the same way (dequantized to float32), so these are the
                       tokens a Q8_0 file gives there.
  quantized            the Hugging Face names of those matrices

    python3 tools/reference/make_q8_0_greedy_reference.py
"""

import json
import os

import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from transformers import AutoTokenizer, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "shakespeare-char")
OUT = os.path.join(ROOT, "tests", "fixtures", "quantize", "shipped-q8_0-greedy.json")
PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n"]
N_NEW = 100


def greedy(model, ids):
    n = min(N_NEW, model.config.n_positions - len(ids))  # within the context (128)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def main():
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = GPT2LMHeadModel.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager").eval()
    cases = [{"prompt": p, "prompt_ids": tok(p)["input_ids"]} for p in PROMPTS]
    for c in cases:
        c["f32_ids"] = greedy(model, c["prompt_ids"])
    quantized = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() != 2 or name == "transformer.wpe.weight":
                continue
            w = p.detach().numpy().astype(np.float32)
            rows = w if name == "transformer.wte.weight" else w.T  # GGUF's [out, in]
            q = dequantize(quantize(np.ascontiguousarray(rows), GGMLQuantizationType.Q8_0),
                           GGMLQuantizationType.Q8_0).reshape(rows.shape)
            p.copy_(torch.from_numpy(np.ascontiguousarray(q if name == "transformer.wte.weight" else q.T)))
            quantized.append(name)
    for c in cases:
        c["q8_0_ids"] = greedy(model, c["prompt_ids"])
        assert len(c["f32_ids"]) == len(c["q8_0_ids"]) == min(N_NEW, 128 - len(c["prompt_ids"]))
    with open(OUT, "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases, "quantized": quantized}, f, indent=1)
        f.write("\n")
    for c in cases:
        n = len(c["f32_ids"])
        same = next((i for i in range(n) if c["f32_ids"][i] != c["q8_0_ids"][i]), n)
        print(f"{len(c['prompt_ids'])}-token prompt: F32 and Q8_0 agree on the first {same} of {n} tokens")
    print(f"wrote {OUT}: {len(quantized)} matrices in Q8_0")


if __name__ == "__main__":
    main()
