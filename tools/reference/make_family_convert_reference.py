#!/usr/bin/env python3
"""What llama.cpp's convert_hf_to_gguf.py and llama-quantize write for a GPT-NeoX and a gpt_bigcode model,
as sizes and FNV-1a 64 hashes of whole files, so that a test can check `minigpt convert` / `minigpt quantize`
byte for byte without committing the files (tests/fixtures/quantize/family-converter.json).

Each model is a Hugging Face directory in a temporary folder: the config below, GPT-2's tokenizer files
(tests/fixtures/gpt2-tokenizer: the converter needs a tokenizer it recognizes), and model.safetensors with
minigpt's counter-based random weights (minigpt/random_weights.h, implemented again here): the test writes the
same directory with write_random_model and the same config.json. Vocabulary 50257 (the tokenizer's), width 64,
so that the block types have whole blocks and the K types fall back as llama-quantize does.

The converter runs with transformers' AutoConfig made to fail, so that it reads config.json as written (its
own fallback): under transformers 5, AutoConfig folds GPT-NeoX's rotary_pct into rope_parameters, which the
converter's GPT-NeoX code does not read (KeyError 'rotary_pct'); every Pythia on the hub has rotary_pct.

    pip download --no-deps --no-binary :all: llama_cpp_python   # then unpack it; build llama-quantize
    python3 tools/reference/make_family_convert_reference.py --llama-cpp DIR/vendor/llama.cpp --quantize BUILD/bin/llama-quantize \
        [--commit C]

(bench/peer.sh builds both into ~/.cache/minigpt-peer.)
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import fnv1a64, splitmix64_int, splitmix64_np  # noqa: E402  (minigpt's generator)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
OUT = os.path.join(ROOT, "tests", "fixtures", "quantize", "family-converter.json")
M64 = (1 << 64) - 1

MODELS = {
    "neox-tiny": {
        "model_type": "gpt_neox",
        "architectures": ["GPTNeoXForCausalLM"],
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 64,
        "intermediate_size": 256,
        "max_position_embeddings": 64,
        "vocab_size": 50257,
        "layer_norm_eps": 1e-05,
        "hidden_act": "gelu",
        "use_parallel_residual": True,
        "tie_word_embeddings": False,
        "rotary_pct": 0.25,
        "rotary_emb_base": 10000,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
    },
    "bigcode-tiny": {
        "model_type": "gpt_bigcode",
        "architectures": ["GPTBigCodeForCausalLM"],
        "n_layer": 2,
        "n_head": 4,
        "n_embd": 64,
        "n_inner": 256,
        "n_positions": 64,
        "vocab_size": 50257,
        "layer_norm_epsilon": 1e-05,
        "activation_function": "gelu_pytorch_tanh",
        "multi_query": True,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
    },
}


def tensors(name, c):
    """(HF name, shape, is a norm weight) in minigpt's order (src/arch/gpt_neox.cpp, gpt_bigcode.cpp)."""
    out = []
    if c["model_type"] == "gpt_neox":
        C, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        p = "gpt_neox."
        out.append((p + "embed_in.weight", (V, C), False))
        for l in range(c["num_hidden_layers"]):
            h = f"{p}layers.{l}."
            out += [(h + "input_layernorm.weight", (C,), True), (h + "input_layernorm.bias", (C,), False),
                    (h + "attention.query_key_value.weight", (3 * C, C), False),
                    (h + "attention.query_key_value.bias", (3 * C,), False),
                    (h + "attention.dense.weight", (C, C), False), (h + "attention.dense.bias", (C,), False),
                    (h + "post_attention_layernorm.weight", (C,), True),
                    (h + "post_attention_layernorm.bias", (C,), False),
                    (h + "mlp.dense_h_to_4h.weight", (F, C), False), (h + "mlp.dense_h_to_4h.bias", (F,), False),
                    (h + "mlp.dense_4h_to_h.weight", (C, F), False), (h + "mlp.dense_4h_to_h.bias", (C,), False)]
        out += [(p + "final_layer_norm.weight", (C,), True), (p + "final_layer_norm.bias", (C,), False),
                ("embed_out.weight", (V, C), False)]
    else:
        C, F, V, S = c["n_embd"], c["n_inner"], c["vocab_size"], c["n_positions"]
        KV = C // c["n_head"] if c["multi_query"] else C
        p = "transformer."
        out += [(p + "wte.weight", (V, C), False), (p + "wpe.weight", (S, C), False)]
        for l in range(c["n_layer"]):
            h = f"{p}h.{l}."
            out += [(h + "ln_1.weight", (C,), True), (h + "ln_1.bias", (C,), False),
                    (h + "attn.c_attn.weight", (C + 2 * KV, C), False), (h + "attn.c_attn.bias", (C + 2 * KV,), False),
                    (h + "attn.c_proj.weight", (C, C), False), (h + "attn.c_proj.bias", (C,), False),
                    (h + "ln_2.weight", (C,), True), (h + "ln_2.bias", (C,), False),
                    (h + "mlp.c_fc.weight", (F, C), False), (h + "mlp.c_fc.bias", (F,), False),
                    (h + "mlp.c_proj.weight", (C, F), False), (h + "mlp.c_proj.bias", (C,), False)]
        out += [(p + "ln_f.weight", (C,), True), (p + "ln_f.bias", (C,), False)]
    return out


def fnv1a64_bytes(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def fnv1a64_file(path):
    with open(path, "rb") as f:
        return fnv1a64_bytes(f.read())


def counter_random(name, shape, norm):
    """minigpt's fill_counter_random: (mean, std) (1, 0.1) for norm weights, else (0, 0.02)."""
    n = int(np.prod(shape))
    mean, std = (1.0, 0.1) if norm else (0.0, 0.02)
    seed = splitmix64_int(fnv1a64(name))
    with np.errstate(over="ignore"):
        j = np.arange(n, dtype=np.uint64) + np.uint64(seed)
    u = ((splitmix64_np(j) >> np.uint64(40)).astype(np.float64) + 0.5) / 16777216.0
    return ((2.0 * u - 1.0) * (math.sqrt(3.0) * std) + mean).astype(np.float32).reshape(shape)


CONVERT = r"""
import runpy, sys, transformers
def refuse(*a, **k):
    raise ValueError("AutoConfig disabled: read config.json as it is")
transformers.AutoConfig.from_pretrained = refuse
conv = sys.argv[1]
sys.argv = [conv] + sys.argv[2:]
sys.path.insert(0, __import__("os").path.dirname(conv))
runpy.run_path(conv, run_name="__main__")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source folder (has convert_hf_to_gguf.py)")
    ap.add_argument("--quantize", required=True, help="llama-quantize built from that source")
    ap.add_argument("--commit", help="llama.cpp's commit, recorded in the output (default: from the sdist's CHANGELOG.md)")
    args = ap.parse_args()
    converter = os.path.join(args.llama_cpp, "convert_hf_to_gguf.py")
    # The commit the llama_cpp_python sdist names in its CHANGELOG (as ../shared/gpu/prepare.sh reads it).
    commit = args.commit or "unknown"
    # (the sdist's vendor/llama.cpp, or bench/peer.sh's copy beside the unpacked sdist)
    changelogs = [os.path.join(args.llama_cpp, "..", "..", "CHANGELOG.md")]
    changelogs += sorted(glob.glob(os.path.join(args.llama_cpp, "..", "llama_cpp_python-*", "CHANGELOG.md")))
    for changelog in changelogs:
        if args.commit or not os.path.exists(changelog):
            continue
        found = re.search(r"llama\.cpp@([0-9a-f]+)", open(changelog, encoding="utf-8").read())
        if found:
            commit = found.group(1)
            break
    result = {"llama.cpp": commit, "models": {}}
    env = dict(os.environ, PYTHONPATH=os.path.join(args.llama_cpp, "gguf-py"))
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = os.path.join(tmp, "convert.py")
        with open(wrapper, "w") as f:
            f.write(CONVERT)
        for name, cfg in MODELS.items():
            hf = os.path.join(tmp, name)
            os.makedirs(hf)
            with open(os.path.join(hf, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
            save_file({n: counter_random(n, s, norm) for n, s, norm in tensors(name, cfg)},
                      os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
            for f in os.listdir(TOK):
                if f.endswith((".json", ".txt")):
                    shutil.copy(os.path.join(TOK, f), hf)
            outputs = {}
            for outtype in ("f32", "f16", "bf16"):
                path = os.path.join(tmp, f"{name}-{outtype}.gguf")
                subprocess.run([sys.executable, wrapper, converter, hf, "--outtype", outtype, "--outfile", path],
                               check=True, env=env, capture_output=True)
                outputs[f"convert {outtype}"] = {"bytes": os.path.getsize(path), "fnv1a64": f"{fnv1a64_file(path):016x}"}
            for t in ("q8_0", "q4_0", "q4_k_m", "q6_k"):
                path = os.path.join(tmp, f"{name}-{t}.gguf")
                subprocess.run([args.quantize, os.path.join(tmp, f"{name}-f32.gguf"), path, t], check=True,
                               capture_output=True)
                outputs[f"quantize {t}"] = {"bytes": os.path.getsize(path), "fnv1a64": f"{fnv1a64_file(path):016x}"}
            result["models"][name] = {"config": cfg, "outputs": outputs}
            print(name, json.dumps(outputs, indent=1))
    with open(OUT, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(OUT)


if __name__ == "__main__":
    main()
