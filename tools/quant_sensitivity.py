#!/usr/bin/env python3
"""Which tensors' quantization costs a GPT-2 its top-1 agreement: transformers with some matrices replaced by
their quantize-dequantize round trip through the `gguf` package (the bytes minigpt and llama-quantize write
for Q8_0 / Q4_0), scored with llama-perplexity's chunks recipe (chunks of -c tokens, the second half of each
scored), against the unquantized model.

    python3 tools/quant_sensitivity.py [--model models/shakespeare-char] [--type Q8_0] [-c 128]

Prints, for groups of matrices quantized together (all, all but the tied head, the head alone, each kind,
each layer), the share of scored positions whose top token stays the same and the mean KL divergence.
The text is the model's validation split (the last 10% of tests/fixtures/data/tinyshakespeare.txt), read as
bytes: the shipped model's vocabulary. Needs torch, transformers, gguf, numpy.
"""

import argparse
import os

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants
from transformers import GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "shakespeare-char"))
    ap.add_argument("--type", default="Q8_0", choices=["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
    ap.add_argument("-c", "--ctx", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    qtype = GGMLQuantizationType[args.type]

    data = open(os.path.join(ROOT, "tests", "fixtures", "data", "tinyshakespeare.txt"), "rb").read()
    val = np.frombuffer(data[int(0.9 * len(data)):], dtype=np.uint8).astype(np.int64)
    n = args.ctx
    chunks = torch.tensor(val[: len(val) // n * n].reshape(-1, n))

    def load():
        return GPT2LMHeadModel.from_pretrained(args.model, attn_implementation="eager").eval()

    def logits(model):
        out = []
        with torch.no_grad():
            for i in range(0, len(chunks), 64):
                out.append(model(chunks[i : i + 64]).logits[:, n // 2 : n - 1].float())
        return torch.cat(out)

    base = load()
    ref = logits(base)
    ref_top = ref.argmax(-1)
    ref_lp = torch.log_softmax(ref, -1)
    state = {k: v.clone() for k, v in base.state_dict().items()}
    tied = base.config.tie_word_embeddings
    matrices = [k for k, v in state.items() if v.dim() == 2 and k.endswith(".weight") and "wpe" not in k
                and not (tied and k == "lm_head.weight")]

    def round_trip(name):
        a = state[name].float().numpy()
        # GGUF rows run along the input dimension: wte / lm_head rows as they are, Conv1D ([in, out]) transposed
        rows = a if name in ("transformer.wte.weight", "lm_head.weight") else a.T
        d = quants.dequantize(quants.quantize(np.ascontiguousarray(rows, dtype=np.float32), qtype), qtype)
        d = d.reshape(rows.shape)
        return torch.tensor(d if rows is a else d.T)

    def measure(names):
        sd = {k: v.clone() for k, v in state.items()}
        for k in names:
            sd[k] = round_trip(k)
            if tied and k == "transformer.wte.weight":
                sd["lm_head.weight"] = sd[k]  # the tied head is the same matrix
        model = load()
        model.load_state_dict(sd)
        lg = logits(model)
        same = (lg.argmax(-1) == ref_top).float().mean().item()
        kl = (ref_lp.exp() * (ref_lp - torch.log_softmax(lg, -1))).sum(-1).mean().item()
        return same, kl

    head = "transformer.wte.weight" if tied else "lm_head.weight"
    groups = [("all matrices", matrices),
              ("all but the head" + (" (tied: token embeddings)" if tied else ""), [k for k in matrices if k != head]),
              ("the head alone", [head])]
    for kind in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
        groups.append((kind, [k for k in matrices if kind in k]))
    for layer in range(base.config.n_layer):
        groups.append((f"layer {layer}", [k for k in matrices if f".h.{layer}." in k]))
    print(f"{args.model}, {args.type}, chunks of {n}, {ref_top.numel()} positions scored")
    print("| quantized | same top token | mean KLD |")
    print("|---|---:|---:|")
    for name, names in groups:
        same, kl = measure(names)
        print(f"| {name} | {100 * same:.3f}% | {kl:.3g} |")


if __name__ == "__main__":
    main()
