#!/usr/bin/env python3
"""Generate the GPT-2 reference fixtures for minigpt's tests.

Writes, under tests/fixtures/models/<name>/, tiny random GPT-2 checkpoints (config.json plus
safetensors weights, in the layouts real checkpoints use) and `reference.safetensors`, which holds
the input `tokens` (int32 [T]) and Hugging Face transformers' float32 eager-attention `logits`
(float32 [T, vocab]) for them. Tiny weights: torch.manual_seed + GPT-2's own init with
initializer_range=0.2, then every LayerNorm weight/bias and every bias gets +0.1*randn. `gpt2-124m-splitmix` holds no weights: they come from the
counter-based splitmix64 generator below (the C++ test builds the same tensors), and its
reference holds tokens, argmax, logits_last, vocab_ids and logits_sub.

Re-run from the repository root (deterministic; needs torch, transformers, safetensors, numpy):

    python3 tools/reference/make_reference.py            # all fixtures, then reload-and-compare checks
    python3 tools/reference/make_reference.py tiny f16   # only fixtures whose name contains one of the words
"""

import json
import math
import os
import shutil
import struct
import sys

import numpy as np
import safetensors
import torch
import transformers
from safetensors.numpy import load_file as safe_load_np
from safetensors.numpy import save_file as np_save_file
from safetensors.torch import load_file as pt_load_file
from safetensors.torch import save_file as pt_save_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "models")
METADATA = {
    "generator": "tools/reference/make_reference.py",
    "transformers": transformers.__version__,
    "torch": torch.__version__.split("+")[0],
}

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
# HF's default initializer_range (0.02) makes attention scores ~1e-2, i.e. near-uniform attention:
# a wrong softmax scale then moves the logits by only ~1e-6 and would pass a tolerance check.
# With 0.2 (still the model's own init, just wider) attention is peaked and logits have std ~1.
INIT_STD = 0.2


def make_model(seed, **cfg):
    """Random GPT2LMHeadModel in float32 eager mode; LayerNorm params and all biases perturbed."""
    cfg.setdefault("initializer_range", INIT_STD)
    config = GPT2Config(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or ".ln_" in name:  # ln_1, ln_2, ln_f weight + bias
                p.add_(0.1 * torch.randn(p.shape, dtype=p.dtype))
    model.eval()
    assert model.config._attn_implementation == "eager"
    return model


def make_tokens(seed, T, vocab):
    return np.random.default_rng(seed).integers(0, vocab, size=T).astype(np.int32)


@torch.no_grad()
def run_logits(model, tokens):
    model = model.float().eval()
    ids = torch.from_numpy(tokens.astype(np.int64))[None, :]
    out = model(input_ids=ids, use_cache=False)
    return out.logits[0].float().numpy().copy()


def write_reference(d, **tensors):
    """safetensors.numpy.save_file, but with the header's __metadata__ keys in sorted order.

    safetensors serialises the metadata map in hash order, which changes from run to run; the
    header is re-emitted (same layout, same padding rule) so that re-runs are byte-identical.
    """
    path = os.path.join(d, "reference.safetensors")
    np_save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata=METADATA)
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (len(text) % 8)) % 8)
    assert len(text) == n, (len(text), n)  # same content, only key order changed
    with open(path, "wb") as f:
        f.write(blob[:8] + text + blob[8 + n:])
    check = safe_load_np(path)
    assert sorted(check) == sorted(tensors) and all(np.array_equal(check[k], tensors[k]) for k in tensors)


def fresh_dir(name):
    d = os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    return d


def rewrite_weights(d, fn):
    """Load model.safetensors, apply fn(dict)->dict, write it back (metadata format=pt)."""
    path = os.path.join(d, "model.safetensors")
    sd = pt_load_file(path)
    sd = fn(sd)
    pt_save_file({k: v.contiguous() for k, v in sd.items()}, path, metadata={"format": "pt"})


def strip_prefix(sd):
    return {(k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in sd.items()}


def edit_config(d, **fields):
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(fields)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


TINY = dict(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=320,
            activation_function="gelu_new")


# --------------------------------------------------------------------------------------------
# fixtures 1-7
# --------------------------------------------------------------------------------------------
def fx_tiny():
    d = fresh_dir("tiny")
    m = make_model(1001, **TINY)
    tok = make_tokens(1001, 64, 320)
    m.save_pretrained(d, safe_serialization=True)
    write_reference(d, tokens=tok, logits=run_logits(m, tok))


def fx_tiny_untied():
    d = fresh_dir("tiny-untied")
    m = make_model(1002, n_layer=3, n_head=3, n_embd=48, n_inner=80, n_positions=32, vocab_size=300,
                   activation_function="gelu", tie_word_embeddings=False,
                   scale_attn_by_inverse_layer_idx=True)
    assert m.lm_head.weight.data_ptr() != m.transformer.wte.weight.data_ptr()
    tok = make_tokens(1002, 20, 300)
    m.save_pretrained(d, safe_serialization=True)
    rewrite_weights(d, strip_prefix)
    write_reference(d, tokens=tok, logits=run_logits(m, tok))


def _fx_half(name, seed, dtype):
    d = fresh_dir(name)
    m = make_model(seed, **TINY)
    tok = make_tokens(seed, 24, 320)
    m = m.to(dtype)
    m.save_pretrained(d, safe_serialization=True)
    # reference: float32 compute on the rounded weights
    write_reference(d, tokens=tok, logits=run_logits(m.float(), tok))


def fx_tiny_f16():
    _fx_half("tiny-f16", 1003, torch.float16)


def fx_tiny_bf16():
    _fx_half("tiny-bf16", 1004, torch.bfloat16)


def fx_tiny_sharded():
    d = fresh_dir("tiny-sharded")
    m = make_model(1005, n_layer=2, n_head=2, n_embd=32, n_positions=48, vocab_size=260,
                   activation_function="gelu_pytorch_tanh")
    tok = make_tokens(1005, 16, 260)
    m.save_pretrained(d, safe_serialization=True, max_shard_size="40KB")
    shards = [f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".safetensors")]
    assert len(shards) >= 3, shards
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json"))
    write_reference(d, tokens=tok, logits=run_logits(m, tok))


def fx_tiny_relu_legacy():
    d = fresh_dir("tiny-relu-legacy")
    n_layer, n_pos = 2, 32
    m = make_model(1006, n_layer=n_layer, n_head=4, n_embd=32, n_positions=n_pos, vocab_size=280,
                   activation_function="relu", scale_attn_weights=False, layer_norm_epsilon=1e-6)
    tok = make_tokens(1006, 12, 280)
    m.save_pretrained(d, safe_serialization=True)

    def legacy(sd):
        sd = strip_prefix(sd)
        sd.pop("lm_head.weight", None)  # old checkpoints: tied head not stored
        for n in range(n_layer):
            sd[f"h.{n}.attn.bias"] = torch.tril(torch.ones(n_pos, n_pos, dtype=torch.float32)).view(1, 1, n_pos, n_pos)
            sd[f"h.{n}.attn.masked_bias"] = torch.tensor(-1e4, dtype=torch.float32)
        return sd

    rewrite_weights(d, legacy)
    write_reference(d, tokens=tok, logits=run_logits(m, tok))


def sinusoidal_table(n_pos, d):
    pos = np.arange(n_pos, dtype=np.float64)[:, None]
    i2 = np.arange(0, d, 2, dtype=np.float64)[None, :]  # = 2i
    ang = pos / np.power(10000.0, i2 / d)
    pe = np.zeros((n_pos, d), dtype=np.float64)
    pe[:, 0::2] = np.sin(ang)
    pe[:, 1::2] = np.cos(ang)
    return pe.astype(np.float32)


def fx_tiny_sinusoidal():
    d = fresh_dir("tiny-sinusoidal")
    m = make_model(1007, **TINY)
    with torch.no_grad():
        m.transformer.wpe.weight.copy_(torch.from_numpy(sinusoidal_table(TINY["n_positions"], TINY["n_embd"])))
    tok = make_tokens(1007, 30, 320)
    m.config.position_embedding_type = "sinusoidal"
    m.save_pretrained(d, safe_serialization=True)
    rewrite_weights(d, lambda sd: {k: v for k, v in sd.items() if not k.endswith("wpe.weight")})
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f)["position_embedding_type"] == "sinusoidal"
    write_reference(d, tokens=tok, logits=run_logits(m, tok))


# --------------------------------------------------------------------------------------------
# fixture 8: GPT-2 124M shape with counter-based splitmix64 weights
# --------------------------------------------------------------------------------------------
M64 = (1 << 64) - 1


def splitmix64_np(x):
    """x: np.uint64 array -> np.uint64 array (wrap-around arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def splitmix64_int(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def splitmix_tensor(name, shape, chunk=1 << 22):
    n = int(np.prod(shape))
    seed = splitmix64_int(fnv1a64(name))
    if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
        mean, std = 1.0, 0.1
    else:
        mean, std = 0.0, 0.02
    scale = math.sqrt(3.0) * std
    out = np.empty(n, dtype=np.float32)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        with np.errstate(over="ignore"):
            j = np.arange(a, b, dtype=np.uint64) + np.uint64(seed)
        z = splitmix64_np(j)
        u = ((z >> np.uint64(40)).astype(np.float64) + 0.5) / 16777216.0
        out[a:b] = ((2.0 * u - 1.0) * scale + mean).astype(np.float32)
    return out.reshape(shape)


def _selftest_splitmix():
    # reference values of splitmix64 (seed 0 stream: x = 0, gamma, 2*gamma, ...)
    assert splitmix64_int(0) == 0xE220A8397B1DCDAF
    assert splitmix64_int(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert int(splitmix64_np(np.array([0, 0x9E3779B97F4A7C15], dtype=np.uint64))[1]) == 0x6E789E6AA1B965F4
    assert fnv1a64("") == 0xCBF29CE484222325 and fnv1a64("a") == 0xAF63DC4C8601EC8C


def fx_gpt2_124m_splitmix():
    d = fresh_dir("gpt2-124m-splitmix")
    _selftest_splitmix()
    torch.set_num_threads(2)
    try:
        config = GPT2Config()
        config._attn_implementation = "eager"
        torch.manual_seed(0)
        m = GPT2LMHeadModel(config).eval()
        sd = m.state_dict()
        names = [k for k in sd if k != "lm_head.weight"]
        with torch.no_grad():
            for k in names:
                bare = k[len("transformer."):]
                assert k.startswith("transformer."), k
                t = splitmix_tensor(bare, tuple(sd[k].shape))
                sd[k].copy_(torch.from_numpy(t))
        assert m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr()  # tied
        assert len(names) == 2 + 12 * 12 + 2, len(names)

        wte = m.transformer.wte.weight.detach().numpy()
        cab = m.transformer.h[0].attn.c_attn.bias.detach().numpy()
        print(f"  splitmix check: wte.weight[:3] = {[float(x) for x in wte.reshape(-1)[:3]]!r}")
        print(f"  splitmix check: h.0.attn.c_attn.bias[:3] = {[float(x) for x in cab[:3]]!r}")
        print(f"  splitmix check: sum(wte.weight) (float64, exact) = {math.fsum(wte.astype(np.float64).reshape(-1))!r}")

        tok = make_tokens(1008, 16, config.vocab_size)
        logits = run_logits(m, tok)
    finally:
        torch.set_num_threads(1)
    vocab_ids = np.sort(np.random.default_rng(2008).choice(config.vocab_size, size=512, replace=False)).astype(np.int32)
    GPT2Config().save_pretrained(d)
    write_reference(d, tokens=tok,
                    argmax=logits.argmax(axis=-1).astype(np.int32),
                    logits_last=logits[-1].astype(np.float32),
                    vocab_ids=vocab_ids,
                    logits_sub=logits[:, vocab_ids].astype(np.float32))


# --------------------------------------------------------------------------------------------
# verification: reload what was written, the way HF reads it
# --------------------------------------------------------------------------------------------
def load_ref(d):
    return safe_load_np(os.path.join(d, "reference.safetensors"))


def verify(name):
    d = os.path.join(OUT, name)
    ref = load_ref(d)
    if name == "gpt2-124m-splitmix":
        assert ref["logits_sub"].shape == (16, 512) and ref["logits_last"].shape == (50257,)
        assert np.array_equal(ref["logits_sub"][-1], ref["logits_last"][ref["vocab_ids"]])
        # What the C++ test does: write the generated tensors (bare names, no lm_head) to a
        # temporary checkpoint; HF must load it as a tied model and give the same logits.
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            GPT2Config().save_pretrained(tmp)
            pt_save_file({k: torch.from_numpy(splitmix_tensor(k, tuple(v.shape)))
                          for k, v in GPT2LMHeadModel(GPT2Config()).transformer.state_dict().items()},
                         os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
            model = GPT2LMHeadModel.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager")
            torch.set_num_threads(2)
            try:
                got = run_logits(model, ref["tokens"])
            finally:
                torch.set_num_threads(1)
        diff = max(float(np.abs(got[:, ref["vocab_ids"]] - ref["logits_sub"]).max()),
                   float(np.abs(got[-1] - ref["logits_last"]).max()))
        assert np.array_equal(got.argmax(-1).astype(np.int32), ref["argmax"])
        print(f"  verify {name}: bare-name temp checkpoint via from_pretrained max|diff| = {diff:g}")
        assert diff == 0.0, (name, diff)
        return
    model = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    if name == "tiny-sinusoidal":  # wpe is not in the file: put the table back
        with torch.no_grad():
            cfg = model.config
            model.transformer.wpe.weight.copy_(torch.from_numpy(sinusoidal_table(cfg.n_positions, cfg.n_embd)))
    got = run_logits(model, ref["tokens"])
    diff = float(np.abs(got - ref["logits"]).max())
    print(f"  verify {name}: from_pretrained max|diff| = {diff:g}")
    assert diff == 0.0, (name, diff)


FIXTURES = [
    ("tiny", fx_tiny),
    ("tiny-untied", fx_tiny_untied),
    ("tiny-f16", fx_tiny_f16),
    ("tiny-bf16", fx_tiny_bf16),
    ("tiny-sharded", fx_tiny_sharded),
    ("tiny-relu-legacy", fx_tiny_relu_legacy),
    ("tiny-sinusoidal", fx_tiny_sinusoidal),
    ("gpt2-124m-splitmix", fx_gpt2_124m_splitmix),
]


def main(argv):
    os.makedirs(OUT, exist_ok=True)
    want = argv[1:]
    chosen = [(n, f) for n, f in FIXTURES if not want or any(w == n or w in n for w in want)]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    for name, fn in chosen:
        print(f"[{name}]")
        fn()
    for name, _ in chosen:
        verify(name)
    for name, _ in chosen:
        d = os.path.join(OUT, name)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"  {name}: {size / 1024:.1f} KiB  ({', '.join(sorted(os.listdir(d)))})")


if __name__ == "__main__":
    main(sys.argv)
