#!/usr/bin/env python3
"""GGUF fixtures of the Gemma 3, Gemma 2, Phi-3 and SmolLM3 families written by llama.cpp's own tools:
convert_hf_to_gguf.py (F32) on the transformers fixtures of tools/reference/make_block_family_reference.py, and
llama-quantize (Q8_0, Q4_K_M) on one Gemma 3 file where its binary is built. The reference logits stay the
transformers fixtures' (reference.safetensors beside each source).

The converter runs unchanged except for its vocabulary step, which is skipped as in
tools/reference/make_llama_gguf.py: the fixtures have no tokenizer (the tests compare logits on token ids).
Each fixture is converted from a temporary copy of its directory (config.json, model.safetensors); for Gemma 3
the copy also holds a stand-in tokenizer.json of exactly vocab_size entries, because Gemma3Model.modify_tensors
cuts token_embd to the tokenizer's vocabulary size (len(model.vocab) + len(added_tokens)) and reads that file
even when set_vocab is skipped: with vocab_size entries nothing is cut.

Which fixtures: those whose numbers a GGUF can hold. llama.cpp keeps no query_pre_attn_scalar for Gemma 2/3
(attention scale 1/sqrt(head_dim), or 1/sqrt(n_embd/n_head) for the 27B sizes it recognizes by layer count) and
no attn_logit_softcapping for Gemma 3, so the sources are gemma3-linear and gemma2-window (query_pre_attn_scalar
= head_dim); phi3-longrope-long (its weights are phi3-longrope-short's too) and phi3-partial-tied; smollm3-nope.

llama.cpp's source is taken from $LLAMA_CPP_DIR (default ~/.cache/minigpt-peer/llama.cpp, where bench/peer.sh
builds it). Output: tests/fixtures/gguf/<fixture>-<type>.gguf. Re-run from the repository root (needs torch,
transformers, numpy, i.e. tools/requirements.txt; deterministic); --dump prints every file's metadata keys
and tensors (gguf-py) after writing:

    python3 tools/reference/make_block_family_gguf.py [--dump]
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")
LLAMA_CPP = os.environ.get("LLAMA_CPP_DIR", os.path.expanduser("~/.cache/minigpt-peer/llama.cpp"))
QUANTIZE = os.path.join(LLAMA_CPP, "build", "bin", "llama-quantize")

# (fixture, the quantizations llama-quantize makes of it)
FIXTURES = [
    # gemma3: norm weights + 1, rope.freq_base (global) and rope.freq_base_swa (local), sliding_window,
    # rope.scaling linear x8 (global layers only in llama.cpp too), tied head (no output.weight)
    # Q4_K_M holds no K-type tensor: no row is a multiple of 256 (64 or 96 wide), so llama-quantize falls back
    # (42 of 80 tensors): Q4_K -> Q5_0 (38 tensors), Q6_K -> Q8_0 (token_embd, which is also the tied output, and
    # attn_v / ffn_down of blocks 2 and 5); norms stay F32. Q8_0: every matrix Q8_0, norms F32.
    ("gemma3-linear", ["Q8_0", "Q4_K_M"]),
    # gemma2: norm weights + 1, attn_logit_softcapping, final_logit_softcapping, sliding_window
    ("gemma2-window", []),
    # phi3: fused attn_qkv and ffn_up (gate | up) kept, rope_factors_long/short, rope.scaling.attn_factor
    ("phi3-longrope-long", []),
    ("phi3-partial-tied", []),  # rope.dimension_count 12 of head 16
    # smollm3: q/k rows permuted as for llama; no key for the NoPE layers (llama.cpp hard-codes every 4th)
    ("smollm3-nope", []),
]


def stand_in_tokenizer(path, n):
    with open(path, "w") as f:
        json.dump({"model": {"type": "BPE", "vocab": {f"<t{i}>": i for i in range(n)}, "merges": []},
                   "added_tokens": []}, f)


def dump(path):
    """Metadata keys (values shortened) and tensors, as gguf-py reads them."""
    import gguf
    r = gguf.GGUFReader(path)
    print(f"== {os.path.relpath(path, ROOT)}")
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        t = field.types[0] if field.types else None
        if t == gguf.GGUFValueType.STRING:
            val = bytes(field.parts[field.data[0]]).decode("utf-8")
        elif t == gguf.GGUFValueType.ARRAY:
            val = [field.parts[i].tolist()[0] for i in field.data]
            val = val if len(val) <= 12 else f"[{len(val)} values]"
        else:
            val = field.parts[field.data[0]].tolist()[0]
        print(f"   {key} = {val}")
    counts = {}
    for t in r.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        if not t.name.startswith("blk.") or t.name.startswith("blk.0."):  # the other blocks are alike
            print(f"   {t.name:32s} {t.tensor_type.name:6s} {list(int(x) for x in t.shape)}")
    if any(t.name.startswith("blk.") for t in r.tensors):
        by_type = {}
        for t in r.tensors:
            if t.name.startswith("blk."):
                by_type.setdefault(t.tensor_type.name, []).append(t.name)
        if len(by_type) > 2:  # a mixed quantization: which block tensors got which type
            for ty, names in sorted(by_type.items()):
                print(f"   {ty}: {' '.join(sorted(names)) if ty not in ('F32',) else len(names)}")
    print(f"   {len(r.tensors)} tensors: {counts}")


def llama_permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows from halves to interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check(name, path):
    """Every tensor of the GGUF is the fixture's tensor as stated: the same, + 1 (Gemma's norm weights) or
    permuted (SmolLM3's q/k rows, as for llama); nothing else is written but Phi-3's rope factor tensors."""
    import gguf
    from safetensors.numpy import load_file
    with open(os.path.join(MODELS, name, "config.json")) as f:
        cfg = json.load(f)
    sd = load_file(os.path.join(MODELS, name, "model.safetensors"))
    r = gguf.GGUFReader(path)
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items()
                if n == bytes(r.fields["general.architecture"].parts[-1]).decode())
    names = gguf.get_tensor_name_map(arch, cfg["num_hidden_layers"])
    got = {t.name: np.array(t.data) for t in r.tensors}
    seen = set()
    for key, w in sd.items():
        new = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if key == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        g = got[new].reshape(w.shape)
        if cfg["model_type"].startswith("gemma") and key.endswith("norm.weight"):
            want = w + np.float32(1)
        elif cfg["model_type"] == "smollm3" and key.endswith(("q_proj.weight", "k_proj.weight")):
            n = cfg["num_attention_heads"] if "q_proj" in key else cfg["num_key_value_heads"]
            want = llama_permute(w, n)
        else:
            want = w
        assert np.array_equal(g, want), (name, key, new)
        seen.add(new)
    extra = sorted(set(got) - seen)
    assert extra == ([] if cfg["model_type"] != "phi3" else ["rope_factors_long.weight", "rope_factors_short.weight"])
    if extra:
        rp = cfg["rope_parameters"]
        assert got["rope_factors_long.weight"].tolist() == [np.float32(x) for x in rp["long_factor"]]
        assert got["rope_factors_short.weight"].tolist() == [np.float32(x) for x in rp["short_factor"]]


def main(argv):
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
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, quants in FIXTURES:
            src = os.path.join(MODELS, name)
            hf = os.path.join(tmp, name)
            os.makedirs(hf)
            for f in ("config.json", "model.safetensors"):
                shutil.copy(os.path.join(src, f), hf)
            with open(os.path.join(src, "config.json")) as f:
                cfg = json.load(f)
            if cfg["model_type"] == "gemma3_text":
                stand_in_tokenizer(os.path.join(hf, "tokenizer.json"), cfg["vocab_size"])
            f32 = os.path.join(OUT, f"{name}-f32.gguf")
            sys.argv = ["convert_hf_to_gguf.py", hf, "--outtype", "f32", "--outfile", f32]
            conv.main()
            check(name, f32)
            print(f"{f32}: {os.path.getsize(f32)} bytes (tensors checked against {name}/model.safetensors)")
            written.append(f32)
            for q in quants:
                if not os.path.exists(QUANTIZE):
                    print(f"skipping {name} {q}: no {QUANTIZE}")
                    continue
                out = os.path.join(OUT, f"{name}-{q.lower()}.gguf")
                run = subprocess.run([QUANTIZE, f32, out, q], check=True, capture_output=True, text=True)
                # what llama-quantize did with rows it cannot hold in the K types (here: every row; 64 % 256 != 0)
                for line in (run.stdout + run.stderr).splitlines():
                    if "fallback" in line:
                        print("   " + line.strip())
                print(f"{out}: {os.path.getsize(out)} bytes")
                written.append(out)
    if "--dump" in argv:
        for path in written:
            dump(path)


if __name__ == "__main__":
    main(sys.argv)
