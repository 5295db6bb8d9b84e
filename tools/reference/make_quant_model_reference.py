#!/usr/bin/env python3
"""A small GPT-2 GGUF whose matrices are in every quantized type minigpt reads, with transformers' logits.

Writes to tests/fixtures/gguf/:
  gpt2-quant-mix.gguf        a GPT-2 (2 layers, n_embd 256, 4 heads, n_inner 512, 64 positions) with a
                             byte-level vocabulary of 256 tokens (no merges), its matrices stored as
                               token_embd (tied head)  Q6_K
                               blk.0: attn_qkv Q8_0, attn_output Q4_0, ffn_up Q5_0, ffn_down Q4_1
                               blk.1: attn_qkv Q5_K, attn_output Q4_K, ffn_up Q6_K, ffn_down Q5_1
                             norms, biases and positions in F32. Q8_0/Q4_0/Q5_0/Q4_1/Q5_1 blocks are
                             gguf.quants.quantize of random normal weights; the K types (which the gguf
                             package cannot quantize) are random blocks with scales of a realistic size
                             (every bit pattern of their values is a valid block).
  gpt2-quant-mix-reference.json
                             the prompt's ids (its bytes), and transformers' float32 eager logits at every
                             position of GPT2LMHeadModel holding the weights gguf.quants.dequantize gives,
                             and its greedy continuation.

The model's weights are the dequantized values: minigpt holding the blocks must give these logits up to its
activation quantization, and minigpt widening them to F32 (--dtype f32) must give them to F32 rounding.

    python3 tools/reference/make_quant_model_reference.py
"""

import json
import os

import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte-level symbols

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")
PROMPT = "To be, or not to be: that is the question."
N_NEW = 12

C, H, L, F, S, V = 256, 4, 2, 512, 64, 256
TYPES = {
    "token_embd.weight": Q.Q6_K,
    "blk.0.attn_qkv.weight": Q.Q8_0,
    "blk.0.attn_output.weight": Q.Q4_0,
    "blk.0.ffn_up.weight": Q.Q5_0,
    "blk.0.ffn_down.weight": Q.Q4_1,
    "blk.1.attn_qkv.weight": Q.Q5_K,
    "blk.1.attn_output.weight": Q.Q4_K,
    "blk.1.ffn_up.weight": Q.Q6_K,
    "blk.1.ffn_down.weight": Q.Q5_1,
}
BLOCK = {Q.Q4_K: (256, 144), Q.Q5_K: (256, 176), Q.Q6_K: (256, 210)}


def random_k_blocks(rng, qtype, rows, cols):
    """Random K-quant blocks: random bytes with the F16 scales set to a realistic size."""
    n_blocks, (block, size) = rows * cols // 256, BLOCK[qtype]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    if qtype in (Q.Q4_K, Q.Q5_K):  # d, dmin first: w = d sc q - dmin m, sc and m up to 63, q up to 15 (31)
        top = 15 if qtype == Q.Q4_K else 31
        d = rng.uniform(0.5, 1.0, n_blocks) * 0.25 / (63 * top)
        dmin = rng.uniform(0.5, 1.0, n_blocks) * 0.125 / 63
        b[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
        b[:, 2:4] = dmin.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    else:  # Q6_K: d last; w = d sc (q - 32), sc int8 up to 127, |q - 32| up to 32
        d = rng.choice([-1.0, 1.0], n_blocks) * rng.uniform(0.5, 1.0, n_blocks) * 0.2 / (127 * 32)
        b[:, 208:210] = d.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return b.reshape(rows, cols // 256 * size)


def main():
    rng = np.random.default_rng(20261123)
    torch.manual_seed(0)
    path = os.path.join(OUT, "gpt2-quant-mix.gguf")
    w = GGUFWriter(path, "gpt2")
    w.add_context_length(S)
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_layer_norm_eps(1e-5)
    w.add_file_type(7)  # MOSTLY_Q8_0: a mix; llama.cpp reads every tensor's own type
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    sym = bytes_to_unicode()
    w.add_token_list([sym[i] for i in range(256)])
    w.add_token_types([1] * 256)
    w.add_token_merges([])

    floats = {}  # the dequantized (true) value of every tensor, GGUF orientation [out, in]

    def matrix(name, rows, cols, std):
        qt = TYPES[name]
        if qt in BLOCK:
            blocks = random_k_blocks(rng, qt, rows, cols)
        else:
            blocks = quantize(rng.normal(0, std, (rows, cols)).astype(np.float32), qt)
        floats[name] = dequantize(blocks, qt).reshape(rows, cols).astype(np.float32)
        w.add_tensor(name, blocks, raw_dtype=qt)

    def vector(name, n, mean, std):
        v = (mean + rng.normal(0, std, n)).astype(np.float32)
        floats[name] = v
        w.add_tensor(name, v)

    matrix("token_embd.weight", V, C, 0.5)
    pos = rng.normal(0, 0.1, (S, C)).astype(np.float32)
    floats["position_embd.weight"] = pos
    w.add_tensor("position_embd.weight", pos)
    for l in range(L):
        p = f"blk.{l}."
        vector(p + "attn_norm.weight", C, 1.0, 0.1)
        vector(p + "attn_norm.bias", C, 0.0, 0.1)
        matrix(p + "attn_qkv.weight", 3 * C, C, 0.08)
        vector(p + "attn_qkv.bias", 3 * C, 0.0, 0.05)
        matrix(p + "attn_output.weight", C, C, 0.08)
        vector(p + "attn_output.bias", C, 0.0, 0.05)
        vector(p + "ffn_norm.weight", C, 1.0, 0.1)
        vector(p + "ffn_norm.bias", C, 0.0, 0.1)
        matrix(p + "ffn_up.weight", F, C, 0.08)
        vector(p + "ffn_up.bias", F, 0.0, 0.05)
        matrix(p + "ffn_down.weight", C, F, 0.06)
        vector(p + "ffn_down.bias", C, 0.0, 0.05)
    vector("output_norm.weight", C, 1.0, 0.1)
    vector("output_norm.bias", C, 0.0, 0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # transformers with the dequantized weights (Conv1D keeps [in, out]: the GGUF matrices transposed).
    cfg = GPT2Config(n_layer=L, n_head=H, n_embd=C, n_inner=F, n_positions=S, vocab_size=V,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                     bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(cfg).eval()
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    sd = {"transformer.wte.weight": t(floats["token_embd.weight"]),
          "transformer.wpe.weight": t(floats["position_embd.weight"]),
          "transformer.ln_f.weight": t(floats["output_norm.weight"]),
          "transformer.ln_f.bias": t(floats["output_norm.bias"])}
    names = {"attn_norm": "ln_1", "ffn_norm": "ln_2", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj",
             "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
    for l in range(L):
        for g, h in names.items():
            for kind in ("weight", "bias"):
                v = floats[f"blk.{l}.{g}.{kind}"]
                if kind == "weight" and v.ndim == 2:
                    v = v.T
                sd[f"transformer.h.{l}.{h}.{kind}"] = t(v)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(m.endswith(("attn.bias", "masked_bias")) for m in missing), (missing, unexpected)
    ids = list(PROMPT.encode("utf-8"))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
        gen = model.generate(torch.tensor([ids]), max_new_tokens=N_NEW, do_sample=False, pad_token_id=0)
    ref = {"generator": "tools/reference/make_quant_model_reference.py", "transformers": transformers.__version__,
           "types": {k: v.name for k, v in TYPES.items()}, "prompt": PROMPT, "ids": ids,
           "logits": [[round(float(x), 6) for x in row] for row in logits],
           "greedy": gen[0, len(ids):].tolist()}
    with open(os.path.join(OUT, "gpt2-quant-mix-reference.json"), "w") as f:
        json.dump(ref, f)
    print(path, os.path.getsize(path), "bytes; greedy", ref["greedy"])


if __name__ == "__main__":
    main()
