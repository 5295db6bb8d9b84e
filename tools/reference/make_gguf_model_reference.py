#!/usr/bin/env python3
"""A GGUF model written by llama.cpp's own converter, with transformers' logits, for minigpt's tests.

Makes a random GPT-2 (transformers' GPT2LMHeadModel, 2 layers, 2 heads, n_embd 8, 32 positions, GPT-2's
own 50,257-token vocabulary and tokenizer from tests/fixtures/gpt2-tokenizer), saves it as a Hugging Face
directory in a temporary folder, converts it with llama.cpp's convert_hf_to_gguf.py (--outtype f32), and
writes to tests/fixtures/gguf/:
  gpt2-tiny-f32.gguf       the converter's output, as it wrote it (metadata, tokenizer.ggml.*, tensors)
  gpt2-tiny-reference.json the prompt's ids (from `tokenizers`), transformers' float32 eager logits of every
                           position, and its greedy continuation (generate(do_sample=False)).

llama.cpp's source comes from the llama_cpp_python sdist on PyPI (see bench/peer.sh):

    pip download --no-deps --no-binary :all: llama_cpp_python   # then unpack it
    python3 tools/reference/make_gguf_model_reference.py --llama-cpp /path/to/llama_cpp_python-X/vendor/llama.cpp

Deterministic given the same transformers, torch and llama.cpp (the file records the converter's version
in its metadata).
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
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")
TOK = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
PROMPT = "Hello world, this is a test of the GGUF loader."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source folder (has convert_hf_to_gguf.py)")
    args = ap.parse_args()
    torch.manual_seed(20261123)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=8, n_positions=32, n_ctx=32, vocab_size=50257,
                     initializer_range=0.5)
    model = GPT2LMHeadModel(cfg).eval()
    with tempfile.TemporaryDirectory() as tmp:
        hf = os.path.join(tmp, "gpt2-tiny")
        model.save_pretrained(hf)
        for f in os.listdir(TOK):
            if f.endswith((".json", ".txt")):
                shutil.copy(os.path.join(TOK, f), hf)
        out = os.path.join(OUT, "gpt2-tiny-f32.gguf")
        subprocess.run([sys.executable, os.path.join(args.llama_cpp, "convert_hf_to_gguf.py"), hf, "--outfile",
                        out, "--outtype", "f32"], check=True)
    ids = Tokenizer.from_file(os.path.join(TOK, "tokenizer.json")).encode(PROMPT).ids
    with torch.no_grad():
        model.config._attn_implementation = "eager"
        logits = model(input_ids=torch.tensor([ids])).logits[0]
        greedy = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=12,
                                pad_token_id=50256)[0].tolist()
    ref = {"generator": "tools/reference/make_gguf_model_reference.py", "transformers": transformers.__version__,
           "torch": torch.__version__.split("+")[0], "prompt": PROMPT, "ids": ids,
           "logits": [[round(float(x), 7) for x in row] for row in logits[:, :64]],
           "logits_argmax": logits.argmax(-1).tolist(), "greedy": greedy[len(ids):]}
    with open(os.path.join(OUT, "gpt2-tiny-reference.json"), "w") as f:
        json.dump(ref, f)
    print(out, os.path.getsize(out), "bytes; prompt", len(ids), "tokens")


if __name__ == "__main__":
    main()
