#!/usr/bin/env python3
"""Reference fixtures for four more decoder families: Gemma 3 (gemma3_text, Gemma3ForCausalLM), Gemma 2
(Gemma2ForCausalLM), Phi-3 (Phi3ForCausalLM) and SmolLM3 (SmolLM3ForCausalLM).

Why: each of them changes the transformer block in a way the Llama-shaped loader does not cover, and every
one of those changes moves the logits by 1e-2 or more on these fixtures, so a test against transformers
catches it:
  - Gemma 2/3: RMSNorm as x * (1 + w) (weights stored as offsets from 1), the embedding scaled by
    sqrt(hidden), sandwich norms (post-attention and post-feedforward norms on the branch outputs), a
    GELU-tanh gated MLP, the attention scale query_pre_attn_scalar^-0.5 instead of head_dim^-0.5,
    interleaved sliding-window / global layers (Gemma 2: 1:1; Gemma 3: 5:1) with the window shorter than the
    sequence, tanh soft-capping of the attention scores and of the final logits (Gemma 2; the final cap
    optionally in Gemma 3, whose attention cap field transformers 5.23 ignores), Gemma 3's q/k norms and its
    two rotary bases (global rope_theta 1e6, local 1e4), optionally linear rope scaling on the global layers
    only (as Gemma 3 4B/12B/27B ship it: factor 8).
  - Phi-3: fused qkv_proj ([q | k | v] rows) and gate_up_proj ([gate | up] rows) as the checkpoints store
    them, LongRoPE (per-frequency short/long factors and an attention factor on cos/sin), partial rotary
    (Phi-4-mini: 0.75) with a tied head.
  - SmolLM3: NoPE layers (every 4th layer applies no rotary embedding), grouped queries, tied head.

Writes tests/fixtures/models/<name>/ exactly like tools/reference/make_family_reference.py does (its build()
for the random models; make_reference.py's helpers): config.json + model.safetensors as save_pretrained
writes them, reference.safetensors with the input `tokens` (int32 [T]) and transformers' float32
eager-attention `logits` (float32 [T, vocab]) of the checkpoint reloaded from the file, and greedy.json
(transformers' generate, do_sample=False, KV cache on). F16/BF16 fixtures store the rounded weights and
hold float32 logits of the rounded weights. Each fixture also gets reference.json: the config values that
matter, max |logit|, and the per-family notes (cap effects, which LongRoPE factors were used and why).
Weights: each family's own init with initializer_range 0.2, then every bias and norm weight gets
+0.1 * randn (Gemma's norm weights are initialised to 0, i.e. a scale of exactly 1: the perturbation makes
a missing "1 +" visible).

Phi-3 LongRoPE as transformers 5.23 computes it (modeling_rope_utils.py: _compute_longrope_parameters and
dynamic_rope_update's longrope_frequency_update; Phi3RotaryEmbedding.forward):
  d = int(head_dim * partial_rotary_factor) rotary dimensions, len(short_factor) = len(long_factor) = d / 2;
  inv_freq[i] = 1 / (ext[i] * rope_theta ** (2i / d)), with ext = long_factor if seq_len >
  original_max_position_embeddings, else short_factor, where seq_len = max(position_ids) + 1 of the current
  forward call (a whole-sequence forward of T tokens: seq_len = T; a KV-cache decode step at position p:
  seq_len = p + 1). The choice is made per call for all positions of that call: keys already in the cache keep
  the rotation they were given (so a generation that crosses the threshold mixes short-rotated cached keys
  with long-rotated new ones: the greedy prompts below keep each fixture on one side).
  cos and sin are multiplied by attention_factor (so q.k scales by its square); attention_factor does not
  depend on seq_len: rope_parameters['attention_factor'] if given, else with factor = rope_parameters['factor']
  if given, else max_position_embeddings / original_max_position_embeddings:
  attention_factor = 1 if factor <= 1 else sqrt(1 + ln(factor) / ln(original_max_position_embeddings)).
  Phi3Config's top-level original_max_position_embeddings overrides the one in rope_parameters.
(llama.cpp differs: it picks long vs short by the context size n_ctx > original context, for every token.)

Re-run from the repository root (deterministic; needs torch, transformers, safetensors, numpy, i.e.
tools/requirements.txt):

    python3 tools/reference/make_block_family_reference.py            # all
    python3 tools/reference/make_block_family_reference.py gemma2     # names containing a word

Environment used (tools/requirements.txt's pins, all found on PyPI): transformers 5.23.0, tokenizers 0.23.3,
torch 2.15.0, numpy 2.4.6, safetensors 0.8.0, gguf 0.19.0. torch was installed with --no-deps plus its pure
Python dependencies and the few CUDA libraries its CPU import links against (nvidia-cufile,
nvidia-cusparselt-cu13, nvidia-nvshmem-cu13, nvidia-nccl-cu13) rather than the whole CUDA stack; only the
CPU is used.
"""

import json
import math
import os
import sys

import numpy as np
import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, Phi3Config,
                          Phi3ForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference  # noqa: E402
from make_family_reference import build  # noqa: E402
from make_reference import fresh_dir, make_tokens, run_logits, write_reference  # noqa: E402

torch.set_num_threads(1)
GENERATOR = "tools/reference/make_block_family_reference.py"
make_reference.METADATA["generator"] = GENERATOR  # reference.safetensors' __metadata__

# A window of 8 over sequences of 24-40 tokens: every position past 8 drops its oldest keys on sliding layers.
WINDOW = 8


def load(d, cls, **overrides):
    """The fixture reloaded from its files in float32 eager mode; overrides replace config fields."""
    config = cls.config_class.from_pretrained(d)
    for k, v in overrides.items():
        setattr(config, k, v)
    return cls.from_pretrained(d, config=config, dtype=torch.float32, attn_implementation="eager").eval()


def greedy(model, prompt, n_new):
    ids = torch.from_numpy(np.asarray(prompt, dtype=np.int64))[None, :]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def save(name, model, seed, T, dtype=None, prompt_len=8, n_new=16, notes=None, check=None):
    """make_family_reference.save's files, with the greedy prompt length and count chosen per fixture, and
    reference.json. check(d, cls, tokens, logits) -> dict adds verified facts to reference.json's notes."""
    d = fresh_dir(name)
    tok = make_tokens(seed, T, model.config.vocab_size)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(d, safe_serialization=True)
    cls = type(model)
    # The reference comes from the saved file reloaded in float32 (for F16/BF16: the rounded weights; the
    # rotary frequencies, a buffer that .to(dtype) would round too, recomputed in float32).
    again = load(d, cls)
    logits = run_logits(again, tok)
    if dtype is None:  # nothing silently dropped or re-initialised on the way through the file
        assert np.array_equal(run_logits(model, tok), logits), name
    write_reference(d, tokens=tok, logits=logits)
    notes = dict(notes or {})
    if check is not None:
        notes.update(check(d, cls, tok, logits))
    prompt = tok[:prompt_len].tolist()
    with open(os.path.join(d, "greedy.json"), "w") as f:
        json.dump({"generator": GENERATOR, "prompt": prompt, "greedy": greedy(again, prompt, n_new)}, f)
        f.write("\n")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    summary = {k: cfg[k] for k in SUMMARY_KEYS if k in cfg}
    ref = {"generator": GENERATOR, "model_type": cfg["model_type"], "architectures": cfg["architectures"],
           "tokens": T, "dtype": str(dtype).replace("torch.", "") if dtype is not None else "float32",
           "max_abs_logit": round(float(np.abs(logits).max()), 4), "config": summary, "notes": notes}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, sort_keys=True)
        f.write("\n")
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    print(f"{name}: {cfg['model_type']}, {T} tokens, max |logit| {np.abs(logits).max():.3f}, "
          f"model.safetensors {size / 1024:.0f} KiB")
    print("   " + json.dumps(summary, sort_keys=True))
    for k, v in notes.items():
        print(f"   {k}: {v}")
    assert size < 1100 * 1024, (name, size)


SUMMARY_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                "original_max_position_embeddings", "query_pre_attn_scalar", "sliding_window", "layer_types",
                "attn_logit_softcapping", "final_logit_softcapping", "rope_parameters", "partial_rotary_factor",
                "no_rope_layers", "no_rope_layer_interval", "tie_word_embeddings", "hidden_activation",
                "hidden_act", "rms_norm_eps"]


# --------------------------------------------------------------------------------------------
# Gemma 2 / Gemma 3
# --------------------------------------------------------------------------------------------
def gemma3(seed, **cfg):
    n = cfg.get("num_hidden_layers", 6)
    base = dict(vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=n, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, max_position_embeddings=128,
                sliding_window=WINDOW, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                tie_word_embeddings=True,
                # Gemma 3's 5:1 pattern (sliding_window_pattern 6 in the hub configs; 5.23 spells it layer_types)
                layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)],
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}})
    base.update(cfg)
    return build(Gemma3ForCausalLM, Gemma3TextConfig, seed, **base)


def gemma2(seed, **cfg):
    n = cfg.get("num_hidden_layers", 4)
    base = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=n, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, max_position_embeddings=128,
                sliding_window=WINDOW, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                tie_word_embeddings=True, attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                layer_types=["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)],
                rope_parameters={"rope_type": "default", "rope_theta": 10_000.0})
    base.update(cfg)
    return build(Gemma2ForCausalLM, Gemma2Config, seed, **base)


def cap_effect(d, cls, tok, logits):
    """The caps change the numbers: logits with each cap turned off differ by more than 1e-2."""
    out = {}
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    for label, off in (("both caps off", dict(attn_logit_softcapping=None, final_logit_softcapping=None)),
                       ("attn cap off", dict(attn_logit_softcapping=None)),
                       ("final cap off", dict(final_logit_softcapping=None))):
        if any(cfg.get(k) is None for k in off):
            continue
        diff = float(np.abs(run_logits(load(d, cls, **off), tok) - logits).max())
        assert diff > 1e-2, (d, label, diff)
        out[f"max |logits - logits with {label}|"] = round(diff, 4)
    if cfg.get("final_logit_softcapping") is not None:
        cap = cfg["final_logit_softcapping"]
        assert np.abs(logits).max() < cap
    return out


def gemma_rope_check(d, cls, tok, logits):
    """The global layers' rotary frequencies are the scaled ones (linear: inv_freq / factor)."""
    m = load(d, cls)
    rp = m.config.rope_parameters
    dim = m.config.head_dim
    full = rp["full_attention"]
    want = 1.0 / (full["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if full.get("rope_type") == "linear":
        want = want / full["factor"]
    got = m.model.rotary_emb.full_attention_inv_freq
    assert torch.allclose(got, want, rtol=1e-6), (got, want)
    local = 1.0 / (rp["sliding_attention"]["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    assert torch.allclose(m.model.rotary_emb.sliding_attention_inv_freq, local, rtol=1e-6)
    return {"rope": "global layers: inv_freq = theta_global^(-2i/d)" +
            (f" / {full['factor']} (linear)" if full.get("rope_type") == "linear" else "") +
            "; sliding layers: theta_local^(-2i/d), unscaled"}


# --------------------------------------------------------------------------------------------
# Phi-3
# --------------------------------------------------------------------------------------------
ORIG_CTX = 16  # original_max_position_embeddings: the long fixtures run past it, the short ones do not


def longrope(n):
    """n short and n long factors, rising with the wavelength like Phi-3.5's (short ~1, long up to ~8)."""
    x = np.linspace(0.0, 1.0, n)
    short = [round(float(v), 4) for v in 1.0 + 0.6 * x ** 2]
    long = [round(float(v), 4) for v in 1.0 + 7.0 * x ** 1.5]
    return short, long


def phi3(seed, **cfg):
    base = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, original_max_position_embeddings=128,
                rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False, pad_token_id=None,
                bos_token_id=1, eos_token_id=2)
    base.update(cfg)
    return build(Phi3ForCausalLM, Phi3Config, seed, **base)


def phi3_longrope(seed, partial=1.0, **cfg):
    head_dim = 64 // 4
    short, long = longrope(int(head_dim * partial) // 2)
    return phi3(seed, original_max_position_embeddings=ORIG_CTX, max_position_embeddings=128,
                rope_parameters={"rope_type": "longrope", "rope_theta": 10_000.0, "partial_rotary_factor": partial,
                                 "short_factor": short, "long_factor": long,
                                 "original_max_position_embeddings": ORIG_CTX}, **cfg)


def longrope_check(d, cls, tok, logits):
    """Which factors the reference's forward used, checked on the rotary buffer it left behind."""
    m = load(d, cls)
    rp = m.config.rope_parameters
    orig = rp["original_max_position_embeddings"]
    dim = int(m.config.hidden_size // m.config.num_attention_heads * rp.get("partial_rotary_factor", 1.0))
    run_logits(m, tok)  # the dynamic update sets inv_freq for this call's seq_len = len(tok)
    which = "long" if len(tok) > orig else "short"
    ext = torch.tensor(rp[f"{which}_factor"], dtype=torch.float32)
    want = 1.0 / (ext * rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    assert torch.equal(m.model.rotary_emb.inv_freq, want), (m.model.rotary_emb.inv_freq, want)
    factor = m.config.max_position_embeddings / orig
    att = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 else 1.0
    assert abs(m.model.rotary_emb.attention_scaling - att) < 1e-12, (m.model.rotary_emb.attention_scaling, att)
    # the other factor set gives other logits (the choice matters)
    other = "short" if which == "long" else "long"
    with torch.no_grad():
        m.model.rotary_emb.original_inv_freq.copy_(
            1.0 / (torch.tensor(rp[f"{other}_factor"]) * rp["rope_theta"] ** (torch.arange(0, dim, 2).float() / dim)))
        m.model.rotary_emb.long_inv_freq = m.model.rotary_emb.original_inv_freq.clone()
    diff = float(np.abs(run_logits(m, tok) - logits).max())
    assert diff > 1e-2, (d, diff)
    return {"longrope_logits": f"{which}_factor: the whole-sequence forward has seq_len = T = {len(tok)} "
                               f"{'>' if which == 'long' else '<='} original_max_position_embeddings = {orig}",
            "longrope_rotary_dims": dim,
            "longrope_attention_factor": f"sqrt(1 + ln({factor:g}) / ln({orig})) = {att!r} "
                                         f"(factor = max_position_embeddings / original_max_position_embeddings; "
                                         f"multiplies cos and sin)",
            f"max |logits - logits with {other}_factor|": round(diff, 4)}


def greedy_note(prompt_len, n_new, orig=ORIG_CTX):
    last = prompt_len + n_new - 2  # the position of the last token fed to the model
    which = "long" if prompt_len > orig else "short"
    assert (prompt_len > orig) == (last + 1 > orig), "the greedy run must stay on one side of the threshold"
    return {"longrope_greedy": f"prompt of {prompt_len}, {n_new} new tokens: every forward call has seq_len in "
                               f"[{prompt_len}, {last + 1}], all {'>' if which == 'long' else '<='} {orig}: "
                               f"{which}_factor throughout (cache included)"}


# --------------------------------------------------------------------------------------------
# SmolLM3
# --------------------------------------------------------------------------------------------
def smollm3(seed, **cfg):
    base = dict(vocab_size=320, hidden_size=64, intermediate_size=64, num_hidden_layers=8, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, hidden_act="silu",
                tie_word_embeddings=True, no_rope_layer_interval=4, pad_token_id=None, bos_token_id=1,
                eos_token_id=2, rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0})
    base.update(cfg)
    return build(SmolLM3ForCausalLM, SmolLM3Config, seed, **base)


def nope_check(d, cls, tok, logits):
    m = load(d, cls)
    layers = m.config.no_rope_layers
    assert layers == [0 if (i + 1) % 4 == 0 else 1 for i in range(m.config.num_hidden_layers)], layers
    assert [bool(l.self_attn.use_rope) for l in m.model.layers] == [bool(x) for x in layers]
    return {"no_rope_layers": "1 = the layer applies rotary, 0 = NoPE (no rotary): layers "
                              f"{[i for i, x in enumerate(layers) if not x]} (0-based) have none"}


FIXTURES = {
    # Gemma 3: 6 layers, 5 sliding (window 8) then 1 global; q/k norms; query_pre_attn_scalar 24 with head_dim 16
    "gemma3-swa": lambda: save("gemma3-swa", gemma3(3101), 3101, 40, check=gemma_rope_check),
    # the final tanh cap (5.23's Gemma 3 applies final_logit_softcapping when set; its hub configs leave it
    # null). Not attn_logit_softcapping: 5.23's Gemma3Attention keeps the field but never passes it to the
    # attention (measured: logits identical with it at 5.0 and off), and llama.cpp's Gemma 3 converter asserts
    # it is null.
    "gemma3-softcap": lambda: save("gemma3-softcap", gemma3(3102, final_logit_softcapping=5.0), 3102, 40,
                                   check=cap_effect),
    # rope scaling linear x8 on the global layers only (Gemma 3 4B/12B/27B; the 1B has none), and
    # query_pre_attn_scalar = head_dim as in every Gemma 3 but the 27B: what a GGUF can express (llama.cpp
    # stores no attention scale for Gemma: 1/sqrt(head_dim)), so this one is the GGUF fixtures' source.
    "gemma3-linear": lambda: save("gemma3-linear", gemma3(
        3103, query_pre_attn_scalar=16,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}), 3103, 40,
        check=gemma_rope_check),
    "gemma3-f16": lambda: save("gemma3-f16", gemma3(3104), 3104, 24, torch.float16),
    "gemma3-bf16": lambda: save("gemma3-bf16", gemma3(3105), 3105, 24, torch.bfloat16),
    # Gemma 2: sliding / global alternating (window 8), attention cap 5 (raw scores reach ~20 with init 0.2),
    # final cap 3, query_pre_attn_scalar 24 != head_dim 16
    "gemma2-softcap": lambda: save("gemma2-softcap", gemma2(3201), 3201, 40, check=cap_effect),
    # query_pre_attn_scalar = head_dim (Gemma 2 2B/9B: what a GGUF can express, so the GGUF fixture's source)
    # and a final cap of 8 that the logits (raw max ~11) reach without saturating: with the cap of 3 above the
    # largest logits sit where tanh's slope is ~0.005, which hides errors in them
    "gemma2-window": lambda: save("gemma2-window", gemma2(3202, query_pre_attn_scalar=16, final_logit_softcapping=8.0),
                                  3202, 40, check=cap_effect),
    # Phi-3: fused qkv_proj / gate_up_proj, grouped queries 4:2, untied, plain rope
    "phi3-fused": lambda: save("phi3-fused", phi3(3301), 3301, 40),
    # LongRoPE (original context 16, max 128: attention factor sqrt(1 + ln 8 / ln 16)); the same weights run
    # past the original context (long factors) and within it (short factors)
    "phi3-longrope-long": lambda: save("phi3-longrope-long", phi3_longrope(3308), 3308, 40, prompt_len=20,
                                       n_new=16, notes=greedy_note(20, 16), check=longrope_check),
    "phi3-longrope-short": lambda: save("phi3-longrope-short", phi3_longrope(3308), 3308, 12, prompt_len=8,
                                        n_new=8, notes=greedy_note(8, 8), check=longrope_check),
    # Phi-4-mini's shape family: partial rotary 0.75 (12 of 16 dims), LongRoPE, tied head
    "phi3-partial-tied": lambda: save("phi3-partial-tied", phi3_longrope(3303, partial=0.75,
                                                                         tie_word_embeddings=True), 3303, 40,
                                      prompt_len=20, n_new=16, notes=greedy_note(20, 16), check=longrope_check),
    "phi3-f16": lambda: save("phi3-f16", phi3(3304), 3304, 24, torch.float16),
    "phi3-bf16": lambda: save("phi3-bf16", phi3(3305, tie_word_embeddings=True), 3305, 24, torch.bfloat16),
    # SmolLM3: 8 layers, NoPE every 4th (layers 3 and 7), grouped queries 4:2, tied, rope_theta 5e6
    "smollm3-nope": lambda: save("smollm3-nope", smollm3(3401), 3401, 40, check=nope_check),
}


def main(argv):
    words = argv[1:]
    import transformers
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    for name, fn in FIXTURES.items():
        if words and not any(w in name for w in words):
            continue
        fn()


if __name__ == "__main__":
    main(sys.argv)
