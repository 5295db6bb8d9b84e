#!/usr/bin/env python3
"""A random model of stories15M's shape (llama2.c's TinyStories 15M: dim 288, hidden_dim 768, 6 layers, 6 heads,
6 KV heads, vocabulary 32000, max_seq_len 256, shared classifier) written as llama2.c's export.py writes
version 0, 1 or 2, for `minigpt bench -m OUT.bin` (token ids only: no tokenizer needed). The weights are
transformers' LlamaForCausalLM with tools/reference/make_llama2c_reference.py's init, written by that
script's writers. Usage: python3 bench/make_llama2c_model.py OUT.bin [VERSION (default 0)]

    python3 bench/make_llama2c_model.py /tmp/stories15M-shape.bin 0
    build/minigpt bench -m /tmp/stories15M-shape.bin -t 2
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import make_llama2c_reference as ref  # noqa: E402

out = sys.argv[1]
version = int(sys.argv[2]) if len(sys.argv) > 2 else 0
# (version, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab, max_seq_len, tied, seed)
model = ref.make_llama(version, 288, 768, 6, 6, 6, 32000, 256, True, 0)
{0: ref.write_v0, 1: ref.write_v1, 2: ref.write_v2}[version](model, out)
print(out, os.path.getsize(out), "bytes")
