#!/usr/bin/env python3
"""GGUF fixtures of the Llama-shaped families written by llama.cpp's own tools: convert_hf_to_gguf.py (F32)
on the transformers fixtures of tools/reference/make_family_reference.py, and llama-quantize (Q8_0, Q4_K_M,
Q4_0) on that F32 file where its binary is built. The converter runs unchanged except for its vocabulary
step, which is skipped: the fixtures have no tokenizer (the tests compare logits on token ids).

llama.cpp's source is taken from $LLAMA_CPP_DIR (default ~/.cache/minigpt-peer/llama.cpp, where
bench/peer.sh builds it). Output: tests/fixtures/gguf/<fixture>-<type>.gguf. Re-run from the repository
root (needs torch, transformers, numpy; deterministic):

    python3 tools/reference/make_llama_gguf.py
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")
LLAMA_CPP = os.environ.get("LLAMA_CPP_DIR", os.path.expanduser("~/.cache/minigpt-peer/llama.cpp"))
QUANTIZE = os.path.join(LLAMA_CPP, "build", "bin", "llama-quantize")

# (fixture, the quantizations llama-quantize makes of it)
FIXTURES = [
    ("llama-gqa62", ["Q8_0", "Q4_K_M", "Q4_0"]),  # llama: q and k rows permuted (adjacent rotary pairs)
    ("llama-gqa93-llama3", []),                   # tied head, rope_freqs.weight from rope_scaling llama3
    ("llama-linear-bias", []),                    # rope.scaling linear, every bias (q, k biases permuted)
    ("mistral-window", []),                       # written as llama, without its window
    ("qwen2-bias", ["Q8_0"]),                     # qwen2: halves kept, q/k/v biases
    ("qwen3-headdim", ["Q8_0"]),                  # qwen3: q/k norms, key_length 24
]


def main():
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    sys.path.insert(0, LLAMA_CPP)
    import convert_hf_to_gguf as conv
    from conversion import base

    # No tokenizer in the fixtures: every model class's vocabulary step does nothing (prepare_metadata calls
    # set_vocab on whichever class main() picks).
    original = base.ModelBase.prepare_metadata

    def prepare_metadata(self, vocab_only):
        type(self).set_vocab = lambda self: None
        return original(self, vocab_only)

    base.ModelBase.prepare_metadata = prepare_metadata
    for name, quants in FIXTURES:
        f32 = os.path.join(OUT, f"{name}-f32.gguf")
        sys.argv = ["convert_hf_to_gguf.py", os.path.join(MODELS, name), "--outtype", "f32", "--outfile", f32]
        conv.main()
        print(f"{f32}: {os.path.getsize(f32)} bytes")
        for q in quants:
            if not os.path.exists(QUANTIZE):
                print(f"skipping {name} {q}: no {QUANTIZE}")
                continue
            out = os.path.join(OUT, f"{name}-{q.lower()}.gguf")
            subprocess.run([QUANTIZE, f32, out, q], check=True, capture_output=True)
            print(f"{out}: {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
