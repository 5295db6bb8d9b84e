#!/usr/bin/env python3
"""transformers' logits on the weights a quantized llama GGUF holds: llama-quantize's Q4_K_M of the
llama-gqa62 fixture (tests/fixtures/gguf/llama-gqa62-q4_k_m.gguf, whose layer 1 keeps attn_v and ffn_down in
Q8_0 beside Q5_0 q, k, gate and up: blocks of different types in one stacked projection).

Every tensor is dequantized with gguf-py (gguf.quants.dequantize), the q and k rows llama.cpp's converter
permuted for its adjacent-pair rotary are put back in transformers' halves order, and LlamaForCausalLM of the
fixture's config.json holds them. Its float32 eager logits on the fixture's tokens are what minigpt holding
the blocks must give up to its activation quantization, and minigpt widening them (--dtype f32) up to F32
rounding.

Output: tests/fixtures/gguf/llama-gqa62-q4_k_m-reference.safetensors (tokens I32 [T], logits F32 [T, V]).
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


def main():
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    state = {}
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
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    tokens = load_file(os.path.join(FIXTURE, "reference.safetensors"))["tokens"]
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens.astype(np.int64))[None]).logits[0].float().numpy()
    save_file({"tokens": tokens, "logits": np.ascontiguousarray(logits)}, OUT)
    print(f"{OUT}: {len(tokens)} tokens, logits {logits.shape}")


if __name__ == "__main__":
    main()
