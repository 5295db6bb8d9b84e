#!/usr/bin/env python3
"""Generate the llm.c checkpoint fixtures for minigpt's tests (tests/test_llmc.cpp).

llm.c (github.com/karpathy/llm.c) saves GPT-2 with train_gpt2.py's write_model (and train_gpt2.cu's
gpt2_write_to_checkpoint, the same layout): a header of 256 little-endian int32 (magic 20240326, version 3
= every parameter float32 / 5 = every parameter bfloat16, maxT, V, L, NH, C, Vp = V rounded up to a
multiple of 128, zeros), then the 16 parameter arrays back to back, each stacked over the layers and every
matrix nn.Linear's [out, in] (so transformers' Conv1D weights, [in, out], are transposed):
wte (Vp, C; rows V..Vp-1 zero), wpe (maxT, C), ln1w, ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
attprojw (L, C, C), attprojb (L, C), ln2w, ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C),
fcprojb (L, C), lnfw, lnfb (C).

Writes tests/fixtures/llmc/:
  gpt2-f32.bin          version 3, a random GPT2LMHeadModel (tools/reference/make_reference.py's make_model: init 0.2,
                        every bias and layer-norm parameter perturbed, so that attention is peaked)
  gpt2-bf16.bin         version 5, the same weights rounded to bfloat16 (round to nearest even, as torch's
                        .to(torch.bfloat16) and llm.c's write_bf16 do)
  reference.safetensors tokens (int32 [T]); logits_f32 / logits_bf16 (float32 [T, V]): transformers' eager
                        float32 forward on the original weights / on the bfloat16-rounded weights widened to
                        float32; prompt (int32 [P]) and greedy_f32 / greedy_bf16 (int32 [N]): N greedy tokens
                        after the prompt, each from a full recompute (argmax of the last position's logits)

Every file is read back with an independent reader (numpy, from the header alone) into a fresh
GPT2LMHeadModel, which must give the reference logits bit for bit.

Re-run from the repository root (deterministic; needs torch, transformers, safetensors, numpy):

    python3 tools/reference/make_llmc_reference.py
"""

import os
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file as safe_load_np
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference  # noqa: E402  (make_model, run_logits, write_reference: the other fixtures' recipe)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "llmc")

MAGIC = 20240326
VERSIONS = {"float32": 3, "bfloat16": 5}
# n_head 3 (odd) and head_dim 8; small enough that both files and the reference stay under 200 KB.
CFG = dict(n_layer=2, n_head=3, n_embd=24, n_positions=64, vocab_size=300, activation_function="gelu_new",
           layer_norm_epsilon=1e-5)
SEED = 1205  # a seed whose greedy run is varied (many seeds repeat one token from the start)
T = 20  # reference positions
PROMPT = 5
GREEDY = 12

# llm.c's parameter arrays in file order: (name, transformers' name with {i} for the layer, is a Conv1D
# weight to transpose, stacked over the layers).
PARAMS = [
    ("wte", "transformer.wte.weight", False, False),
    ("wpe", "transformer.wpe.weight", False, False),
    ("ln1w", "transformer.h.{i}.ln_1.weight", False, True),
    ("ln1b", "transformer.h.{i}.ln_1.bias", False, True),
    ("qkvw", "transformer.h.{i}.attn.c_attn.weight", True, True),
    ("qkvb", "transformer.h.{i}.attn.c_attn.bias", False, True),
    ("attprojw", "transformer.h.{i}.attn.c_proj.weight", True, True),
    ("attprojb", "transformer.h.{i}.attn.c_proj.bias", False, True),
    ("ln2w", "transformer.h.{i}.ln_2.weight", False, True),
    ("ln2b", "transformer.h.{i}.ln_2.bias", False, True),
    ("fcw", "transformer.h.{i}.mlp.c_fc.weight", True, True),
    ("fcb", "transformer.h.{i}.mlp.c_fc.bias", False, True),
    ("fcprojw", "transformer.h.{i}.mlp.c_proj.weight", True, True),
    ("fcprojb", "transformer.h.{i}.mlp.c_proj.bias", False, True),
    ("lnfw", "transformer.ln_f.weight", False, False),
    ("lnfb", "transformer.ln_f.bias", False, False),
]


def padded_vocab(v, multiple=128):
    return (v + multiple - 1) // multiple * multiple


def tensor_bytes(t, dtype):
    t = t.detach().cpu().contiguous()
    if dtype == "float32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    # bfloat16: round to nearest even, then the 16 bits as they lie in memory (little-endian)
    return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()


def write_llmc(model, path, dtype):
    """The checkpoint llm.c's write_model would write for these weights."""
    c = model.config
    sd = model.state_dict()
    V, C = sd["transformer.wte.weight"].shape
    Vp = padded_vocab(V)
    header = np.zeros(256, dtype="<i4")
    header[:8] = [MAGIC, VERSIONS[dtype], c.n_positions, V, c.n_layer, c.n_head, c.n_embd, Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, hf, conv1d, stacked in PARAMS:
            for i in range(c.n_layer) if stacked else [None]:
                t = sd[hf.format(i=i)]
                if conv1d:
                    t = t.t()  # Conv1D [in, out] -> nn.Linear [out, in]
                if name == "wte":
                    t = torch.cat([t, torch.zeros(Vp - V, C, dtype=t.dtype)])  # llm.c pads with zeros
                f.write(tensor_bytes(t, dtype))


def read_llmc(path):
    """An independent reader: the header, then every array by the sizes it implies, back to HF names."""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == MAGIC and h[1] in (3, 5), h[:2]
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    if h[1] == 3:
        data = np.frombuffer(raw[1024:], dtype="<f4")
    else:
        data = (np.frombuffer(raw[1024:], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    shapes = {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
              "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
              "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
              "lnfw": (C,), "lnfb": (C,)}
    sd, pos = {}, 0
    for name, hf, conv1d, stacked in PARAMS:
        n = int(np.prod(shapes[name]))
        a = data[pos:pos + n].reshape(shapes[name])
        pos += n
        for i in range(L) if stacked else [None]:
            t = torch.from_numpy(np.array(a[i] if stacked else a))
            if name == "wte":
                assert not t[V:].any(), "padded rows must be zero"
                t = t[:V]
            sd[hf.format(i=i)] = t.t().contiguous() if conv1d else t
    assert pos == data.size, (pos, data.size)
    cfg = GPT2Config(n_layer=L, n_head=NH, n_embd=C, n_positions=maxT, vocab_size=V,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5)
    cfg._attn_implementation = "eager"
    m = GPT2LMHeadModel(cfg)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all(k == "lm_head.weight" or k.endswith(".attn.bias") for k in missing), missing
    m.tie_weights()
    return m.eval()


@torch.no_grad()
def greedy(model, prompt, n):
    """n greedy tokens after prompt, and the smallest top-1 - top-2 logit margin on the way."""
    ids, margin = list(prompt), float("inf")
    for _ in range(n):
        last = make_reference.run_logits(model, np.array(ids, dtype=np.int32))[-1]
        top2 = np.sort(last)[-2:]
        margin = min(margin, float(top2[1] - top2[0]))
        ids.append(int(last.argmax()))
    return np.array(ids[len(prompt):], dtype=np.int32), margin


def main():
    os.makedirs(OUT, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    model = make_reference.make_model(SEED, **CFG)
    rounded = make_reference.make_model(SEED, **CFG)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    tokens = make_reference.make_tokens(SEED, T, CFG["vocab_size"])
    prompt = tokens[:PROMPT]
    ref = {
        "tokens": tokens,
        "logits_f32": make_reference.run_logits(model, tokens),
        "logits_bf16": make_reference.run_logits(rounded, tokens),
        "prompt": prompt,
    }
    for key, m in (("greedy_f32", model), ("greedy_bf16", rounded)):
        ref[key], margin = greedy(m, prompt, GREEDY)
        print(f"  {key}: smallest top-1 - top-2 margin {margin:.3g}")
    files = {"float32": os.path.join(OUT, "gpt2-f32.bin"), "bfloat16": os.path.join(OUT, "gpt2-bf16.bin")}
    for dtype, path in files.items():
        write_llmc(model, path, dtype)
    make_reference.METADATA = {"generator": "tools/reference/make_llmc_reference.py",
                               "transformers": transformers.__version__,
                               "torch": torch.__version__.split("+")[0]}
    make_reference.write_reference(OUT, **ref)

    # Read back: the files hold exactly these weights, the reference is what they give.
    check = safe_load_np(os.path.join(OUT, "reference.safetensors"))
    for dtype, key in (("float32", "logits_f32"), ("bfloat16", "logits_bf16")):
        got = make_reference.run_logits(read_llmc(files[dtype]), tokens)
        assert np.array_equal(got, check[key]), (dtype, float(np.abs(got - check[key]).max()))
    d = float(np.abs(check["logits_f32"] - check["logits_bf16"]).max())
    spread = float(check["logits_f32"].std())
    print(f"  logits std {spread:.3f}; bf16 rounding moves them by max {d:.3g}")
    print(f"  greedy f32  {check['greedy_f32'].tolist()}")
    print(f"  greedy bf16 {check['greedy_bf16'].tolist()}")
    for f in sorted(os.listdir(OUT)):
        print(f"  {f}: {os.path.getsize(os.path.join(OUT, f))} bytes")


if __name__ == "__main__":
    main()
