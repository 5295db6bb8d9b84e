#!/usr/bin/env python3
"""Golden data for a model's own generation defaults: generation_config.json and an eos_token_id list.

On the tiny random GPT-2 of tests/fixtures/quantize/gpt2-tiny-hf (GPT-2's tokenizer beside it):
  - transformers' greedy continuation of a prompt (generate(do_sample=False)) with no end-of-text token,
    then with an eos_token_id LIST (two ids the continuation produces, the later one first) given
      a) in generation_config.json (which transformers prefers to config.json), and
      b) in config.json, with no generation_config.json:
    transformers stops at the first id of either (and keeps it in its output);
  - generate() with no arguments on a generation_config.json with do_sample false and max_new_tokens (or
    max_length): greedy, that many tokens;
  - what llama.cpp's convert_hf_to_gguf.py writes from a generation_config.json with sampling settings
    (temperature, top_k, top_p, min_p, repetition_penalty): every metadata key in order, and the
    general.sampling.* keys' types and values (gguf-py's GGUFReader).
Writes tests/fixtures/generate/generation_config.json.

    python3 tools/reference/make_generation_config_reference.py --llama-cpp /path/to/llama_cpp_python-X/vendor/llama.cpp

(see bench/peer.sh for the llama.cpp source). Deterministic given the same transformers, torch and llama.cpp.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers
from tokenizers import Tokenizer
from transformers import GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests", "fixtures", "quantize", "gpt2-tiny-hf")
TOK = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
OUT = os.path.join(ROOT, "tests", "fixtures", "generate", "generation_config.json")
PROMPT = "The quick brown fox"
MAX_NEW = 16
# What the converter copies (gguf-py's Metadata.load): repetition_penalty becomes penalty_repeat.
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.9, "min_p": 0.05,
            "repetition_penalty": 1.15}


def greedy(model_dir, ids):
    model = GPT2LMHeadModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=MAX_NEW,
                             attention_mask=torch.ones(1, len(ids), dtype=torch.long), pad_token_id=0)
    return out[0, len(ids):].tolist()


KEEP = object()


def generate_defaults(model_dir, ids):
    """model.generate() with no settings: the model's generation_config.json decides."""
    model = GPT2LMHeadModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def model_dir(tmp, name, config_eos=KEEP, generation=None):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    shutil.copy(os.path.join(MODEL, "model.safetensors"), d)
    with open(os.path.join(MODEL, "config.json")) as f:
        config = json.load(f)
    if config_eos is not KEEP:
        config["eos_token_id"] = config_eos
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if generation is not None:
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(generation, f, indent=2)
    for f in os.listdir(TOK):
        if f.endswith((".json", ".txt")):
            shutil.copy(os.path.join(TOK, f), d)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source folder (has convert_hf_to_gguf.py)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ids = Tokenizer.from_file(os.path.join(TOK, "tokenizer.json")).encode(PROMPT).ids
    ref = {"transformers": transformers.__version__, "torch": torch.__version__, "prompt": PROMPT,
           "prompt_ids": ids, "max_new_tokens": MAX_NEW}
    with tempfile.TemporaryDirectory() as tmp:
        # no end-of-text token at all: the full continuation (50256, config.json's, never comes from it)
        plain = greedy(model_dir(tmp, "plain", config_eos=None), ids)
        assert 50256 not in plain
        # two ids of the continuation, each at its first occurrence, not the first token: the later first
        firsts = [i for i, t in enumerate(plain) if t not in plain[:i] and i >= 2]
        assert len(firsts) >= 2, plain
        a, b = firsts[0], firsts[len(firsts) // 2]
        eos = [plain[b], plain[a]]
        ref["plain"] = plain
        ref["eos_token_ids"] = eos
        gen = greedy(model_dir(tmp, "gen", generation={"eos_token_id": eos}), ids)
        cfg = greedy(model_dir(tmp, "cfg", config_eos=eos), ids)
        assert gen == plain[:a + 1] and cfg == gen, (gen, cfg, plain, eos)
        ref["greedy_eos_list"] = gen  # ends with plain[a], which transformers keeps

        # generate() with the file's own settings: do_sample false (greedy, its temperature and top_k unused)
        # and a length, max_new_tokens or max_length (which counts the prompt)
        ref["defaults"] = []
        for g in ({"do_sample": False, "temperature": 0.7, "top_k": 3, "max_new_tokens": 5},
                  {"do_sample": False, "max_length": len(ids) + 4}):
            got = generate_defaults(model_dir(tmp, "defaults%d" % len(ref["defaults"]), config_eos=None,
                                              generation=g), ids)
            assert got == plain[:len(got)], (got, plain)
            ref["defaults"].append({"generation_config": g, "tokens": got})

        # llama.cpp's converter on a directory named as the test's (general.name comes from it)
        d = model_dir(os.path.join(tmp, "conv"), "gpt2-tiny", generation=dict(SAMPLING, eos_token_id=50256))
        out = os.path.join(tmp, "conv.gguf")
        subprocess.run([sys.executable, os.path.join(args.llama_cpp, "convert_hf_to_gguf.py"), d, "--outfile",
                        out, "--outtype", "f32"], check=True)
        sys.path.insert(0, os.path.join(args.llama_cpp, "gguf-py"))
        import gguf
        reader = gguf.GGUFReader(out)
        keys, sampling = [], {}
        for field in reader.fields.values():
            if field.name.startswith("GGUF."):
                continue
            keys.append(field.name)
            if field.name.startswith("general.sampling."):
                sampling[field.name] = {"type": gguf.GGUFValueType(field.types[0]).name,
                                        "value": field.contents()}
        ref["generation_config"] = dict(SAMPLING, eos_token_id=50256)
        ref["converter_keys"] = keys
        ref["converter_sampling"] = sampling
    with open(OUT, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print("wrote", OUT, "eos", eos, "greedy", ref["greedy_eos_list"])


if __name__ == "__main__":
    main()
