#!/usr/bin/env python3
"""GGUF fixtures of the GPT-NeoX and gpt_bigcode families, written as llama.cpp's convert_hf_to_gguf.py
writes them (conversion/gptneox.py, conversion/starcoder.py): gguf-py's tensor name map for the
architecture, GPT-NeoX's fused query_key_value reordered from per-head [q k v] groups to q | k | v, and the
metadata keys each converter's set_gguf_parameters writes. F32, no tokenizer (the tests compare logits).

Input: the transformers fixtures of tools/reference/make_family_reference.py; the reference logits stay theirs.
Output: tests/fixtures/gguf/<name>.gguf. Re-run from the repository root (needs gguf, safetensors, torch):

    python3 tools/reference/make_family_gguf.py
"""

import json
import os

import gguf
import numpy as np
from safetensors.numpy import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")


def write(name, arch, hf_dir, params, fix=None):
    with open(os.path.join(MODELS, hf_dir, "config.json")) as f:
        cfg = json.load(f)
    sd = load_file(os.path.join(MODELS, hf_dir, "model.safetensors"))
    n_layer = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    names = gguf.get_tensor_name_map(arch, n_layer)
    path = os.path.join(OUT, name + ".gguf")
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(name)
    params(w, cfg)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key in sorted(sd):
        data = sd[key].astype(np.float32)
        if fix is not None:
            data = fix(key, data, cfg)
        new = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if new is None:
            if key.endswith((".attn.bias", ".masked_bias", ".inv_freq")):
                continue
            raise SystemExit(f"{name}: no GGUF name for {key}")
        w.add_tensor(new, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: {os.path.getsize(path)} bytes")


def neox_params(w, c):
    head_dim = c["hidden_size"] // c["num_attention_heads"]
    pct = c.get("rotary_pct", c.get("rope_parameters", {}).get("partial_rotary_factor"))
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_rope_dimension_count(int(pct * head_dim))
    w.add_head_count(c["num_attention_heads"])
    w.add_parallel_residual(c.get("use_parallel_residual", True))
    w.add_layer_norm_eps(c["layer_norm_eps"])


def neox_fix(key, data, c):
    # conversion/gptneox.py's modify_tensors: [n_head, 3, head_dim, ...] -> q | k | v
    n_head, n_embd = c["num_attention_heads"], c["hidden_size"]
    if key.endswith("attention.query_key_value.weight"):
        q = data.reshape(n_head, 3, n_embd // n_head, n_embd)
        return np.concatenate([q[:, i].reshape(-1, n_embd) for i in range(3)], axis=0)
    if key.endswith("attention.query_key_value.bias"):
        q = data.reshape(n_head, 3, n_embd // n_head)
        return np.concatenate([q[:, i].reshape(-1) for i in range(3)], axis=0)
    return data


def starcoder_params(w, c):
    w.add_context_length(c["n_positions"])
    w.add_embedding_length(c["n_embd"])
    w.add_feed_forward_length(4 * c["n_embd"])
    w.add_block_count(c["n_layer"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(1)
    w.add_layer_norm_eps(c["layer_norm_epsilon"])


def main():
    write("neox-parallel-f32", gguf.MODEL_ARCH.GPTNEOX, "neox-parallel", neox_params, neox_fix)
    # StarCoderModel writes feed_forward_length = 4 n_embd and head_count_kv = 1: a multi-query model of
    # n_inner = 4 n_embd, as every published gpt_bigcode is.
    write("bigcode-mqa-f32", gguf.MODEL_ARCH.STARCODER, "bigcode-4x", starcoder_params)


if __name__ == "__main__":
    main()
