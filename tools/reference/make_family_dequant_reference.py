#!/usr/bin/env python3
"""transformers' logits on the weights llama-quantize's files of the family fixtures hold.

For each quantized GGUF that tools/reference/make_llama_gguf.py and make_block_family_gguf.py had
llama-quantize write (tests/fixtures/gguf/<fixture>-<type>.gguf), the fixture's transformers model
(tests/fixtures/models/<fixture>) is given the file's quantized matrices, dequantized by gguf-py
(gguf.quants.dequantize), with the q and k rows llama.cpp's converter permuted for Llama's adjacent-pair
rotary put back in transformers' halves order. Every tensor the file holds in F32 (norms, biases) is the
fixture's own. Its float32 eager logits on the fixture's tokens are then what an engine computing with the
file's weights gives up to its own arithmetic: minigpt widening the blocks (--dtype f32) to F32 rounding,
minigpt holding them up to its rounding of the activations before the integer dot products. That rounding is
the second output: the same model with each projection's input quantized as minigpt's CPU kernels and
llama.cpp's quantize it (per 32 values, d = max|x| / 127 and x / d rounded to nearest even, every step in
float32; 32767 instead of 127 before Q8_0 weights, whose activations minigpt keeps at 16 bits), so that
minigpt's integer GEMV gives those logits up to F32 summation order and the rare activation at a tie.

Each file's matrices are matched to the fixture's by gguf-py's own name map (gguf.get_tensor_name_map), so a
matrix the map does not know, or a shape that differs, stops the script.

Output: tests/fixtures/gguf/family-quant-dequant-reference.safetensors: for each file stem ("llama-gqa62-q4_0",
...) the logits F32 [T, V] under that name and the quantized-input logits under "<stem>.acts"; the tokens are
each fixture's reference tokens.
Re-run from the repository root (needs torch, transformers, gguf, safetensors; deterministic):

    python3 tools/reference/make_family_dequant_reference.py
"""

import json
import os

import numpy as np
import torch
from gguf import GGUFReader, GGMLQuantizationType, MODEL_ARCH, get_tensor_name_map
from gguf.quants import dequantize
from safetensors.numpy import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

from make_dequant_reference import quantized_acts, unpermute  # the same inverse permutation and rounding

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
GGUF_DIR = os.path.join(ROOT, "tests", "fixtures", "gguf")
OUT = os.path.join(GGUF_DIR, "family-quant-dequant-reference.safetensors")

# (fixture, llama-quantize's files of it, gguf-py's architecture, whether q/k rows were permuted)
FILES = [
    ("llama-gqa62", ["q8_0", "q4_0", "q4_k_m"], MODEL_ARCH.LLAMA, True),
    ("qwen2-bias", ["q8_0"], MODEL_ARCH.QWEN2, False),
    ("qwen3-headdim", ["q8_0"], MODEL_ARCH.QWEN3, False),
    ("gemma3-linear", ["q8_0", "q4_k_m"], MODEL_ARCH.GEMMA3, False),
]


def logits_on_file(fixture, path, arch, permuted):
    cfg_json = json.load(open(os.path.join(MODELS, fixture, "config.json")))
    config = AutoConfig.from_pretrained(os.path.join(MODELS, fixture))
    model = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, fixture), dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tensors = {t.name: t for t in GGUFReader(path).tensors}
    tmap = get_tensor_name_map(arch, config.num_hidden_layers)
    state = model.state_dict()
    replaced, used, types = 0, set(), {}
    for hf_name, w in state.items():
        gguf_name = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if hf_name == "lm_head.weight" and gguf_name not in tensors:
            gguf_name = "token_embd.weight"  # a tied head: the file holds the embeddings once
        elif gguf_name is None:
            raise SystemExit(f"{path}: gguf-py maps no tensor to {hf_name}")
        t = tensors[gguf_name if gguf_name.endswith((".weight", ".bias")) else gguf_name + ".weight"]
        used.add(t.name)
        if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            continue  # the fixture's own values (gemma3's norms are stored + 1)
        types[hf_name] = t.tensor_type
        q = dequantize(t.data, t.tensor_type).astype(np.float32)
        if permuted and hf_name.endswith("q_proj.weight"):
            q = unpermute(q, cfg_json["num_attention_heads"])
        elif permuted and hf_name.endswith("k_proj.weight"):
            q = unpermute(q, cfg_json["num_key_value_heads"])
        if tuple(q.shape) != tuple(w.shape):
            raise SystemExit(f"{path}: {t.name} is {q.shape}, {hf_name} {tuple(w.shape)}")
        state[hf_name] = torch.from_numpy(np.ascontiguousarray(q))
        replaced += 1
    unused = [n for n, t in tensors.items() if n not in used and t.tensor_type not in
              (GGMLQuantizationType.F32, GGMLQuantizationType.F16)]
    if unused:
        raise SystemExit(f"{path}: quantized tensors no transformers weight took: {unused}")
    model.load_state_dict(state)
    tokens = load_file(os.path.join(MODELS, fixture, "reference.safetensors"))["tokens"]
    ids = torch.from_numpy(tokens.astype(np.int64))[None]
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
    hooked = 0
    for name, m in model.named_modules():
        qtype = types.get(name + ".weight")
        if isinstance(m, torch.nn.Linear) and qtype is not None:
            if qtype not in (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q5_0):
                raise SystemExit(f"{path}: {name} is {qtype.name}, whose activations this script does not model")
            levels = 32767.0 if qtype == GGMLQuantizationType.Q8_0 else 127.0
            m.register_forward_pre_hook(lambda mod, args, levels=levels: (quantized_acts(args[0], levels),))
            hooked += 1
    with torch.no_grad():
        logits_acts = model(ids).logits[0].float().numpy()
    return logits, logits_acts, replaced, hooked


def main():
    out = {}
    for fixture, types, arch, permuted in FILES:
        for type_ in types:
            stem = f"{fixture}-{type_}"
            path = os.path.join(GGUF_DIR, stem + ".gguf")
            logits, logits_acts, replaced, hooked = logits_on_file(fixture, path, arch, permuted)
            out[stem] = np.ascontiguousarray(logits)
            out[stem + ".acts"] = np.ascontiguousarray(logits_acts)
            print(f"{stem}: {replaced} quantized matrices ({hooked} projections), logits {logits.shape}")
    save_file(out, OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
