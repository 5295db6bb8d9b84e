#!/usr/bin/env python3
"""A random model as a Hugging Face directory, for bench/peer.sh: by default GPT-2 of the 124M shape,
transformers' GPT2LMHeadModel(GPT2Config()); with a config.json (bench/shapes/smollm2-135m.json, any family
transformers knows), AutoModelForCausalLM.from_config of it, its vocabulary made GPT-2's (50257, eos/bos
50256) since the tokenizer is GPT-2's. torch.manual_seed(0); GPT-2's own tokenizer files (../shared, or
tests/fixtures/gpt2-tokenizer); a GPT-2 config.json gets "n_ctx" (llama.cpp's converter reads it,
save_pretrained does not write it). Usage: python3 bench/make_peer_model.py OUT_DIR [CONFIG.json]"""
import json
import os
import shutil
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = sys.argv[1]
torch.manual_seed(0)
if len(sys.argv) > 2:
    shape = json.load(open(sys.argv[2]))
    shape.update(vocab_size=50257, bos_token_id=50256, eos_token_id=50256)
    config = AutoConfig.for_model(shape.pop("model_type"), **shape)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
else:
    GPT2LMHeadModel(GPT2Config()).save_pretrained(out)
tok = os.path.join(ROOT, "..", "shared", "tokenizers", "gpt2")
if not os.path.isdir(tok):
    tok = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
for f in ["vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
    shutil.copy(os.path.join(tok, f), out)
cfg_path = os.path.join(out, "config.json")
cfg = json.load(open(cfg_path))
if "n_positions" in cfg:
    cfg["n_ctx"] = cfg["n_positions"]
json.dump(cfg, open(cfg_path, "w"), indent=2)
print(out)
