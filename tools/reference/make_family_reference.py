#!/usr/bin/env python3
"""Reference fixtures for the GPT-NeoX (Pythia), OPT, gpt_bigcode and Llama-shaped (llama, mistral, qwen2,
qwen3) families.

Writes tests/fixtures/models/<name>/: a random checkpoint as transformers' save_pretrained writes it
(config.json + model.safetensors) and reference.safetensors with the input `tokens` and transformers'
float32 eager-attention `logits`, exactly like tools/reference/make_reference.py does for GPT-2. Weights: each
family's own init with initializer_range 0.2 (peaked attention: a wrong scale or rotation moves the logits
by 1e-2 or more), then every bias and layer-norm parameter gets +0.1 * randn. F16/BF16 fixtures store the
rounded weights and hold float32 logits of the rounded weights.

Every variant switch the loader has is covered: NeoX parallel/sequential residual, partial/full rotary,
rotary base, attention biases on/off, tied/untied head; OPT pre-/post-norm, project_in/out, biases
on/off, tied/untied; gpt_bigcode multi-query and multi-head, tied/untied; Llama grouped-query 6:2 and 9:3,
tied/untied, rope_scaling llama3 and linear, attention and MLP biases; Mistral with a sliding window
shorter than the sequence; Qwen2's q/k/v biases; Qwen3's q/k norms with head_dim != hidden / heads. Head
counts include odd ones.

Re-run from the repository root (deterministic; needs torch, transformers, safetensors, numpy):

    python3 tools/reference/make_family_reference.py            # all
    python3 tools/reference/make_family_reference.py neox       # names containing a word
"""

import json
import os
import sys

import numpy as np
import torch
from transformers import (GPTBigCodeConfig, GPTBigCodeForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, OPTConfig,
                          OPTForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import fresh_dir, make_tokens, run_logits, write_reference  # noqa: E402

torch.set_num_threads(1)
INIT_STD = 0.2


def build(cls, config_cls, seed, **cfg):
    cfg.setdefault("initializer_range", INIT_STD)
    config = config_cls(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "norm" in name or ".ln_" in name:
                p.add_(0.1 * torch.randn(p.shape, dtype=p.dtype))
    model.eval()
    return model


def save(name, model, seed, T, dtype=None):
    d = fresh_dir(name)
    vocab = model.config.vocab_size
    tok = make_tokens(seed, T, vocab)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(d, safe_serialization=True)
    # The reference comes from the saved file reloaded in float32 (for F16/BF16: the rounded weights; the
    # rotary frequencies, a buffer that .to(dtype) would round too, recomputed in float32).
    again = type(model).from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    logits = run_logits(again, tok)
    if dtype is None:  # nothing silently dropped or re-initialised on the way through the file
        assert np.array_equal(run_logits(model, tok), logits), name
    write_reference(d, tokens=tok, logits=logits)
    # Greedy generation (transformers' generate, do_sample=False, KV cache on) from the first 8 tokens.
    prompt = torch.from_numpy(tok[:8].astype(np.int64))[None, :]
    n_new = 16  # every fixture's context is >= 48
    with torch.no_grad():
        out = again.generate(prompt, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
    with open(os.path.join(d, "greedy.json"), "w") as f:
        json.dump({"generator": "tools/reference/make_family_reference.py", "prompt": tok[:8].tolist(),
                   "greedy": out[0, 8:].tolist()}, f)
        f.write("\n")
    with open(os.path.join(d, "config.json")) as f:
        print(f"{name}: {json.load(f).get('model_type')}, {T} tokens, max |logit| {np.abs(logits).max():.2f}")


def neox(seed, **cfg):
    base = dict(vocab_size=160, max_position_embeddings=64, layer_norm_eps=1e-5, hidden_act="gelu")
    base.update(cfg)
    return build(GPTNeoXForCausalLM, GPTNeoXConfig, seed, **base)


def opt(seed, **cfg):
    base = dict(vocab_size=150, max_position_embeddings=48, activation_function="relu", pad_token_id=1,
                bos_token_id=2, eos_token_id=2, dropout=0.0, attention_dropout=0.0)
    base.update(cfg)
    return build(OPTForCausalLM, OPTConfig, seed, **base)


def bigcode(seed, **cfg):
    base = dict(vocab_size=140, n_positions=64, activation_function="gelu_pytorch_tanh")
    base.update(cfg)
    return build(GPTBigCodeForCausalLM, GPTBigCodeConfig, seed, **base)


def llama_like(cls, config_cls, seed, **cfg):
    base = dict(vocab_size=160, max_position_embeddings=64, rms_norm_eps=1e-5, hidden_act="silu",
                tie_word_embeddings=False)
    base.update(cfg)
    return build(cls, config_cls, seed, **base)


def llama(seed, **cfg):
    return llama_like(LlamaForCausalLM, LlamaConfig, seed, **cfg)


FIXTURES = {
    # Grouped-query attention 6:2 (heads of 16), untied head, rope_theta 10000.
    "llama-gqa62": lambda: save("llama-gqa62", llama(2301, hidden_size=96, num_attention_heads=6,
                                                     num_key_value_heads=2, num_hidden_layers=2,
                                                     intermediate_size=128), 2301, 40),
    # 9:3 (heads of 8), tied, rope_scaling llama3 with an original context short enough that the low,
    # medium and high frequency bands all occur (wavelengths 6 .. 3e4 against 8 and 32).
    "llama-gqa93-llama3": lambda: save("llama-gqa93-llama3", llama(
        2302, hidden_size=72, num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=2,
        intermediate_size=96, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=4.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=32)), 2302, 48),
    # rope_scaling linear, attention_bias (q, k, v, o) and mlp_bias, explicit head_dim, rope_theta 500000.
    "llama-linear-bias": lambda: save("llama-linear-bias", llama(
        2303, hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16, num_hidden_layers=3,
        intermediate_size=80, attention_bias=True, mlp_bias=True,
        rope_parameters=dict(rope_type="linear", rope_theta=500000.0, factor=2.0)), 2303, 40),
    "llama-f16": lambda: save("llama-f16", llama(2304, hidden_size=96, num_attention_heads=6,
                                                 num_key_value_heads=2, num_hidden_layers=2,
                                                 intermediate_size=128), 2304, 24, torch.float16),
    "llama-bf16": lambda: save("llama-bf16", llama(2305, hidden_size=72, num_attention_heads=9,
                                                   num_key_value_heads=3, num_hidden_layers=2,
                                                   intermediate_size=96, tie_word_embeddings=True),
                               2305, 24, torch.bfloat16),
    # a sliding window of 8 over 40 tokens: every position past 8 drops its oldest keys
    "mistral-window": lambda: save("mistral-window", llama_like(
        MistralForCausalLM, MistralConfig, 2401, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=2, intermediate_size=96, sliding_window=8), 2401, 40),
    # Qwen2.5's shape family: q/k/v biases, grouped queries 6:2, tied
    "qwen2-bias": lambda: save("qwen2-bias", llama_like(
        Qwen2ForCausalLM, Qwen2Config, 2501, hidden_size=96, num_attention_heads=6, num_key_value_heads=2,
        num_hidden_layers=2, intermediate_size=128, tie_word_embeddings=True), 2501, 40),
    # Qwen3: q/k norms, head_dim 24 with 4 heads of a 64-wide model, grouped 4:2
    "qwen3-headdim": lambda: save("qwen3-headdim", llama_like(
        Qwen3ForCausalLM, Qwen3Config, 2601, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=24, num_hidden_layers=2, intermediate_size=96), 2601, 40),
    "qwen3-bf16": lambda: save("qwen3-bf16", llama_like(
        Qwen3ForCausalLM, Qwen3Config, 2602, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=24, num_hidden_layers=2, intermediate_size=96, tie_word_embeddings=True), 2602, 24,
        torch.bfloat16),

    # Pythia's defaults: parallel residual, a quarter of each head rotary, untied embed_out. 3 heads of 16.
    "neox-parallel": lambda: save("neox-parallel", neox(2001, hidden_size=48, num_attention_heads=3,
                                                        num_hidden_layers=2, intermediate_size=96,
                                                        rotary_pct=0.25), 2001, 40),
    # sequential residual, full rotary on a non-default base, no attention biases, tied head, gelu_new
    "neox-sequential": lambda: save("neox-sequential", neox(
        2002, hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=80,
        rotary_pct=1.0, rotary_emb_base=500, use_parallel_residual=False, attention_bias=False,
        tie_word_embeddings=True, hidden_act="gelu_new"), 2002, 48),
    "neox-f16": lambda: save("neox-f16", neox(2003, hidden_size=48, num_attention_heads=3, num_hidden_layers=2,
                                              intermediate_size=96, rotary_pct=0.5), 2003, 24, torch.float16),
    "neox-bf16": lambda: save("neox-bf16", neox(2004, hidden_size=48, num_attention_heads=3,
                                                num_hidden_layers=2, intermediate_size=96, rotary_pct=0.5),
                              2004, 24, torch.bfloat16),
    # OPT-125m's shape family: pre-norm, tied, biases. 3 heads of 16.
    "opt-prenorm": lambda: save("opt-prenorm", opt(2101, hidden_size=48, num_attention_heads=3,
                                                   num_hidden_layers=2, ffn_dim=96, word_embed_proj_dim=48),
                                2101, 40),
    # OPT-350m's: post-norm (no final norm), word_embed_proj_dim != hidden_size (project_in / project_out)
    "opt-postnorm-proj": lambda: save("opt-postnorm-proj", opt(
        2102, hidden_size=64, num_attention_heads=4, num_hidden_layers=3, ffn_dim=96, word_embed_proj_dim=32,
        do_layer_norm_before=False), 2102, 40),
    # no biases, untied head
    "opt-nobias-untied": lambda: save("opt-nobias-untied", opt(
        2103, hidden_size=40, num_attention_heads=5, num_hidden_layers=2, ffn_dim=64, word_embed_proj_dim=40,
        enable_bias=False, tie_word_embeddings=False), 2103, 32),
    "opt-bf16": lambda: save("opt-bf16", opt(2104, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                             ffn_dim=96, word_embed_proj_dim=32, do_layer_norm_before=False),
                             2104, 24, torch.bfloat16),
    # santacoder / tiny_starcoder: multi-query (one KV head for 3 query heads of 16), tied
    "bigcode-mqa": lambda: save("bigcode-mqa", bigcode(2201, n_embd=48, n_head=3, n_layer=2, n_inner=96,
                                                       multi_query=True), 2201, 40),
    # the multi-head variant (c_attn stored head by head), untied, gelu
    "bigcode-mha": lambda: save("bigcode-mha", bigcode(2202, n_embd=64, n_head=4, n_layer=2, n_inner=80,
                                                       multi_query=False, tie_word_embeddings=False,
                                                       activation_function="gelu"), 2202, 40),
    # n_inner = 4 n_embd, as llama.cpp's StarCoder converter assumes (the source of the GGUF fixture)
    "bigcode-4x": lambda: save("bigcode-4x", bigcode(2204, n_embd=32, n_head=4, n_layer=2, multi_query=True),
                               2204, 32),
    "bigcode-f16": lambda: save("bigcode-f16", bigcode(2203, n_embd=64, n_head=4, n_layer=2,
                                                       multi_query=True), 2203, 24, torch.float16),
}


def main(argv):
    words = argv[1:]
    for name, fn in FIXTURES.items():
        if words and not any(w in name for w in words):
            continue
        fn()


if __name__ == "__main__":
    main(sys.argv)
