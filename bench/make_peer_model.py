#!/usr/bin/env python3
"""A random GPT-2 of the 124M shape as a Hugging Face directory, for bench/peer.sh: transformers'
GPT2LMHeadModel(GPT2Config()) with torch.manual_seed(0) and GPT-2's own tokenizer files (../shared, or
tests/fixtures/gpt2-tokenizer); config.json gets "n_ctx" (llama.cpp's converter reads it, save_pretrained
does not write it). Usage: python3 bench/make_peer_model.py OUT_DIR"""
import json
import os
import shutil
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = sys.argv[1]
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config()).save_pretrained(out)
tok = os.path.join(ROOT, "..", "shared", "tokenizers", "gpt2")
if not os.path.isdir(tok):
    tok = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
for f in ["vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
    shutil.copy(os.path.join(tok, f), out)
cfg_path = os.path.join(out, "config.json")
cfg = json.load(open(cfg_path))
cfg["n_ctx"] = cfg["n_positions"]
json.dump(cfg, open(cfg_path, "w"), indent=2)
print(out)
