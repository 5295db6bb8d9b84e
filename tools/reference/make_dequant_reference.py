#!/usr/bin/env python3
"""transformers' logits on the weights a quantized llama GGUF holds: llama-quantize's Q4_K_M of the
llama-gqa62 fixture (tests/fixtures/gguf/llama-gqa62-q4_k_m.gguf, whose layer 1 keeps attn_v and ffn_down in
Q8_0 beside Q5_0 q, k, gate and up: blocks of different types in one stacked projection).

Every tensor is dequantized with gguf-py (gguf.quants.dequantize), the q and k rows llama.cpp's converter
permuted for its adjacent-pair rotary are put back in transformers' halves order, and LlamaForCausalLM of the
fixture's config.json holds them. Its float32 eager logits on the fixture's tokens are what minigpt holding
the blocks must give up to its activation quantization, and minigpt widening them (--dtype f32) up to F32
rounding.

logits_acts (the second output) are the same model with each projection's input quantized as minigpt's CPU
kernels and llama.cpp's quantize it before the integer dot products: per 32 values, d = max|x| / 127 and
x / d rounded to nearest even to int8 (Q5_0 weights; 127 -> 32767 for Q8_0 weights, whose activations minigpt
keeps at 16 bits), every step in float32; the product is then exact. minigpt holding the blocks must give
these up to F32 summation order (and the rare activation that rounds the other way at a tie).
Output: tests/fixtures/gguf/llama-gqa62-q4_k_m-reference.safetensors (tokens I32 [T], logits and logits_acts
F32 [T, V]).
Re-run from the repository root (needs torch, transformers, gguf, safetensors; deterministic):

    python3 tools/reference/make_dequant_reference.py
"""

import json
import os

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "models", "llama-gqa62")
GGUF = os.path.join(ROOT, "tests", "fixtures", "gguf", "llama-gqa62-q4_k_m.gguf")
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf", "llama-gqa62-q4_k_m-reference.safetensors")

NAMES = {  # llama.cpp's names -> transformers'
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def unpermute(w, n_head):
    """The inverse of convert_hf_to_gguf.py's LlamaModel.permute: rows of each head from pairs to halves."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def quantized_acts(x, levels):
    """x with each 32 consecutive values quantized as minigpt's quantize_acts (float32 steps)."""
    shape = x.shape
    x = x.reshape(-1, 32).float()
    amax = x.abs().amax(1, keepdim=True)
    inv = torch.where(amax > 0, levels / amax, torch.zeros_like(amax))
    d = amax / levels
    return (torch.round(x * inv) * d).reshape(shape)


def main():
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    state, types = {}, {}
    for t in GGUFReader(GGUF).tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        name = t.name
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if rest == "attn_q.weight":
                w = unpermute(w, cfg["num_attention_heads"])
            elif rest == "attn_k.weight":
                w = unpermute(w, cfg["num_key_value_heads"])
            name = f"model.layers.{layer}.{LAYER[rest]}"
        else:
            name = NAMES[name]
        state[name] = torch.from_numpy(np.ascontiguousarray(w))
        types[name] = t.tensor_type.name
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    tokens = load_file(os.path.join(FIXTURE, "reference.safetensors"))["tokens"]
    ids = torch.from_numpy(tokens.astype(np.int64))[None]
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and name + ".weight" in types:
            levels = 32767.0 if types[name + ".weight"] == "Q8_0" else 127.0
            assert types[name + ".weight"] in ("Q8_0", "Q5_0"), types[name + ".weight"]
            m.register_forward_pre_hook(lambda mod, args, levels=levels: (quantized_acts(args[0], levels),))
    with torch.no_grad():
        logits_acts = model(ids).logits[0].float().numpy()
    save_file({"tokens": tokens, "logits": np.ascontiguousarray(logits),
               "logits_acts": np.ascontiguousarray(logits_acts)}, OUT)
    print(f"{OUT}: {len(tokens)} tokens, logits {logits.shape}")


if __name__ == "__main__":
    main()
