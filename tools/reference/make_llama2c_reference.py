#!/usr/bin/env python3
"""Generate the llama2.c checkpoint fixtures for minigpt's tests (tests/test_llama2c.cpp).

llama2.c (github.com/karpathy/llama2.c) exports a Llama model with export.py in three layouts; run.c reads
version 0, runq.c version 2. All little-endian; every matrix is nn.Linear's [out, in]; dim, hidden_dim,
n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len are seven int32.

  version 0 (legacy_export): the seven int32 (vocab_size negative when the classifier is not the token
      embedding), then float32: tok_embeddings (V, dim); attention_norm of every layer; wq of every layer
      (dim, dim); wk (kv_dim, dim); wv (kv_dim, dim); wo (dim, dim); ffn_norm; w1 (hidden, dim); w2 (dim,
      hidden); w3 (hidden, dim); norm (dim); freqs_cos and freqs_sin (max_seq_len, head_size / 2 each); the
      classifier (V, dim) when not shared.
  version 1 (version1_export): uint32 0x616b3432 ("ak42"), int32 1, the seven int32 (vocab_size positive),
      uint8 shared_classifier, zeros to 256 bytes; then float32: attention_norm x L, ffn_norm x L, norm,
      tok_embeddings, wq x L, wk x L, wv x L, wo x L, w1 x L, w2 x L, w3 x L, [classifier].
  version 2 (version2_export): the same magic, int32 2, the seven int32, uint8 shared_classifier, int32
      group_size (64 halved until it divides dim), zeros to 256 bytes; float32 attention_norm x L, ffn_norm x
      L, norm; then for each of tok_embeddings, wq x L, wk x L, wv x L, wo x L, w1 x L, w2 x L, w3 x L,
      [classifier]: its int8 values then its float32 scales (one per group of group_size consecutive
      values: scale = max |w| / 127, q = round(w / scale)) -- runq.c's init_quantized_tensors.

The models are transformers' LlamaForCausalLM with random weights. transformers rotates the two halves of
each head (rotate_half: dimension i with i + head_size / 2); llama2.c's model.py and run.c rotate adjacent
pairs (2i, 2i + 1) at the same frequency, so wq and wk are written with each head's rows interleaved (row
2i from row i, row 2i + 1 from row i + head_size / 2) -- what export.py's load_hf_model does with
permute_reverse (per kv head for wk, which load_hf_model leaves to n_heads as it exports n_kv_heads =
n_heads). The norms' eps is 1e-5 (run.c's rmsnorm) and rope_theta 10000 (run.c's).

Writes tests/fixtures/llama2c/:
  <name>.bin             one checkpoint per entry of FIXTURES
  reference.safetensors  tokens, prompt (int32); for each fixture <name>.text (uint8: the bytes the prompt and
                         greedy ids decode to through tests/fixtures/tokenizer/spm/tokenizer.bin, checked against
                         sentencepiece's DecodeIds of its tokenizer.model); for each fixture <name>.logits (float32 [T, V]) and
                         <name>.greedy (int32 [N]): transformers' float32 forward on the model's weights and
                         N greedy tokens after the prompt, each a full recompute. Version 2 also has
                         <name>.logits_deq / <name>.greedy_deq (the same on the weights the file holds:
                         q * scale) and <name>.embd (float32 [V, dim], the original token embedding, to
                         check each dequantized value lies within half its group's scale).

Every file is read back with an independent reader (numpy, from its header alone) into a fresh
LlamaForCausalLM, which must give the reference logits bit for bit (version 2: the dequantized ones).

Re-run from the repository root (deterministic; needs torch, transformers, safetensors, numpy):

    python3 tools/reference/make_llama2c_reference.py
"""

import os
import struct
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file as safe_load_np
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference  # noqa: E402  (run_logits, make_tokens, write_reference)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "llama2c")
MAGIC = 0x616B3432

# name: (version, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab, max_seq_len, tied, seed)
FIXTURES = {
    "v0-tied": (0, 32, 96, 2, 4, 4, 256, 64, True, 11),
    "v0-untied": (0, 32, 96, 2, 4, 2, 256, 64, False, 12),
    "v1-tied": (1, 32, 96, 3, 4, 2, 256, 64, True, 13),
    "v1-untied": (1, 48, 128, 2, 6, 2, 128, 48, False, 14),
    "v2-tied": (2, 64, 192, 2, 4, 2, 256, 64, True, 17),  # group size 64
    "v2-untied": (2, 32, 96, 2, 4, 2, 256, 64, False, 16),  # group size backs off to 32
}
T = 16  # reference positions
PROMPT = 4
GREEDY = 10
TOKEN_SEED = 1205


def make_llama(version, dim, hidden, L, H, Hkv, V, S, tied, seed):
    cfg = LlamaConfig(hidden_size=dim, intermediate_size=hidden, num_hidden_layers=L, num_attention_heads=H,
                      num_key_value_heads=Hkv, vocab_size=V, max_position_embeddings=S, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
                      hidden_act="silu", bos_token_id=1, eos_token_id=2)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg)
    # Wider than HF's 0.02 init so that attention is peaked and the logits spread (std ~1): a wrong rotary
    # layout or scale then moves them far beyond the tolerance. Norm weights around 1, not exactly 1.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.3 * torch.randn(p.shape))
            else:
                p.copy_(torch.randn(p.shape) * (1.5 / p.shape[1] ** 0.5))
    if tied:
        m.tie_weights()
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    return m.eval()


def interleave(w, n_heads):
    """transformers' halves layout -> llama2.c's adjacent pairs, per head (export.py's permute_reverse)."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.view(n_heads, 2, d // 2, cols).transpose(1, 2).reshape(rows, cols)


def halves(w, n_heads):
    """The inverse of interleave."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.view(n_heads, d // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def llama2c_weights(m):
    """The model as llama2.c's Transformer holds it: lists per layer, wq / wk interleaved."""
    c = m.config
    sd = {k: v.detach().float() for k, v in m.state_dict().items()}
    lay = lambda i, n: sd[f"model.layers.{i}.{n}.weight"]  # noqa: E731
    r = range(c.num_hidden_layers)
    return {
        "tok": sd["model.embed_tokens.weight"],
        "att_norm": [lay(i, "input_layernorm") for i in r],
        "wq": [interleave(lay(i, "self_attn.q_proj"), c.num_attention_heads) for i in r],
        "wk": [interleave(lay(i, "self_attn.k_proj"), c.num_key_value_heads) for i in r],
        "wv": [lay(i, "self_attn.v_proj") for i in r],
        "wo": [lay(i, "self_attn.o_proj") for i in r],
        "ffn_norm": [lay(i, "post_attention_layernorm") for i in r],
        "w1": [lay(i, "mlp.gate_proj") for i in r],
        "w2": [lay(i, "mlp.down_proj") for i in r],
        "w3": [lay(i, "mlp.up_proj") for i in r],
        "norm": sd["model.norm.weight"],
        "out": None if c.tie_word_embeddings else sd["lm_head.weight"],
    }


def f32(t):
    return t.contiguous().numpy().astype("<f4").tobytes()


def freqs(head_size, seq_len, theta=10000.0):
    """model.py's precompute_freqs_cis: cos and sin (seq_len, head_size / 2), which version 0 stores."""
    f = 1.0 / (theta ** (torch.arange(0, head_size, 2)[: head_size // 2].float() / head_size))
    a = torch.outer(torch.arange(seq_len).float(), f)
    return torch.cos(a), torch.sin(a)


def quantize_q80(w, gs):
    """export.py's quantize_q80: symmetric int8 per group of gs values, scale = max |w| / 127."""
    g = w.float().reshape(-1, gs)
    scale = g.abs().max(dim=1).values / 127.0
    q = torch.round(g / scale[:, None]).to(torch.int8)
    return q, scale


def header7(m, vocab):
    c = m.config
    return struct.pack("<7i", c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                       c.num_key_value_heads, vocab, c.max_position_embeddings)


def write_v0(m, path):
    w, c = llama2c_weights(m), m.config
    V = c.vocab_size
    with open(path, "wb") as f:
        f.write(header7(m, V if w["out"] is None else -V))
        f.write(f32(w["tok"]))
        for k in ("att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"):
            for t in w[k]:
                f.write(f32(t))
        f.write(f32(w["norm"]))
        cos, sin = freqs(c.hidden_size // c.num_attention_heads, c.max_position_embeddings)
        f.write(f32(cos))
        f.write(f32(sin))
        if w["out"] is not None:
            f.write(f32(w["out"]))


def versioned_header(m, version, shared, extra=b""):
    h = struct.pack("<Ii", MAGIC, version) + header7(m, m.config.vocab_size) + struct.pack("<B", shared) + extra
    return h + b"\0" * (256 - len(h))


def write_v1(m, path):
    w = llama2c_weights(m)
    with open(path, "wb") as f:
        f.write(versioned_header(m, 1, int(w["out"] is None)))
        for t in [*w["att_norm"], *w["ffn_norm"], w["norm"], w["tok"]]:
            f.write(f32(t))
        for k in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            for t in w[k]:
                f.write(f32(t))
        if w["out"] is not None:
            f.write(f32(w["out"]))


def q80_list(w):
    return [w["tok"], *w["wq"], *w["wk"], *w["wv"], *w["wo"], *w["w1"], *w["w2"], *w["w3"]] + (
        [] if w["out"] is None else [w["out"]])


def group_size(dim):
    gs = 64
    while dim % gs != 0:
        gs //= 2
    return gs


def write_v2(m, path):
    w = llama2c_weights(m)
    gs = group_size(m.config.hidden_size)
    with open(path, "wb") as f:
        f.write(versioned_header(m, 2, int(w["out"] is None), struct.pack("<i", gs)))
        for t in [*w["att_norm"], *w["ffn_norm"], w["norm"]]:
            f.write(f32(t))
        for t in q80_list(w):
            assert t.numel() % gs == 0
            q, s = quantize_q80(t, gs)
            f.write(q.numpy().astype(np.int8).tobytes())
            f.write(s.numpy().astype("<f4").tobytes())


def dequantized_model(m):
    """The same model with every Q8_0 matrix replaced by q * scale: the weights a version 2 file holds."""
    d = make_llama(*spec_of(m))
    d.load_state_dict(m.state_dict())
    gs = group_size(m.config.hidden_size)
    with torch.no_grad():
        for name, p in d.named_parameters():
            if p.dim() == 2:
                q, s = quantize_q80(p, gs)
                p.copy_((q.float() * s[:, None]).reshape(p.shape))
    if d.config.tie_word_embeddings:
        d.tie_weights()
    return d.eval()


def spec_of(m):
    c = m.config
    return (0, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
            c.num_key_value_heads, c.vocab_size, c.max_position_embeddings, c.tie_word_embeddings, 0)


def read_back(path):
    """An independent reader: the header, then every array by the sizes it implies, back to a HF model."""
    raw = open(path, "rb").read()
    if struct.unpack("<I", raw[:4])[0] == MAGIC:
        version = struct.unpack("<i", raw[4:8])[0]
        dim, hidden, L, H, Hkv, V, S = struct.unpack("<7i", raw[8:36])
        shared = raw[36] == 1
        gs = struct.unpack("<i", raw[37:41])[0] if version == 2 else 0
        pos = 256
    else:
        version = 0
        dim, hidden, L, H, Hkv, V, S = struct.unpack("<7i", raw[:28])
        shared, V = V > 0, abs(V)
        pos = 28
    hs = dim // H
    kv = Hkv * hs
    shapes = {"tok": (V, dim), "att_norm": (dim,), "ffn_norm": (dim,), "norm": (dim,), "wq": (dim, dim),
              "wk": (kv, dim), "wv": (kv, dim), "wo": (dim, dim), "w1": (hidden, dim), "w2": (dim, hidden),
              "w3": (hidden, dim), "out": (V, dim), "freqs": (S, hs // 2)}

    def take_f32(shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = np.frombuffer(raw, dtype="<f4", count=n, offset=pos).reshape(shape)
        pos += 4 * n
        return torch.from_numpy(a.copy())

    def take_q80(shape):
        nonlocal pos
        n = int(np.prod(shape))
        q = np.frombuffer(raw, dtype=np.int8, count=n, offset=pos).astype(np.float32)
        pos += n
        s = np.frombuffer(raw, dtype="<f4", count=n // gs, offset=pos)
        pos += 4 * (n // gs)
        return torch.from_numpy((q.reshape(-1, gs) * s[:, None]).reshape(shape))

    w = {}
    per_layer = lambda k, take: [take(shapes[k]) for _ in range(L)]  # noqa: E731
    if version == 0:
        w["tok"] = take_f32(shapes["tok"])
        for k in ("att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"):
            w[k] = per_layer(k, take_f32)
        w["norm"] = take_f32(shapes["norm"])
        take_f32(shapes["freqs"]), take_f32(shapes["freqs"])
        w["out"] = None if shared else take_f32(shapes["out"])
    else:
        w["att_norm"] = per_layer("att_norm", take_f32)
        w["ffn_norm"] = per_layer("ffn_norm", take_f32)
        w["norm"] = take_f32(shapes["norm"])
        take = take_f32 if version == 1 else take_q80
        w["tok"] = take(shapes["tok"])
        for k in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            w[k] = per_layer(k, take)
        w["out"] = None if shared else take(shapes["out"])
    assert pos == len(raw), (path, pos, len(raw))

    m = make_llama(version, dim, hidden, L, H, Hkv, V, S, shared, 0)
    sd = {"model.embed_tokens.weight": w["tok"], "model.norm.weight": w["norm"]}
    for i in range(L):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = w["att_norm"][i]
        sd[p + "self_attn.q_proj.weight"] = halves(w["wq"][i], H)
        sd[p + "self_attn.k_proj.weight"] = halves(w["wk"][i], Hkv)
        sd[p + "self_attn.v_proj.weight"] = w["wv"][i]
        sd[p + "self_attn.o_proj.weight"] = w["wo"][i]
        sd[p + "post_attention_layernorm.weight"] = w["ffn_norm"][i]
        sd[p + "mlp.gate_proj.weight"] = w["w1"][i]
        sd[p + "mlp.down_proj.weight"] = w["w2"][i]
        sd[p + "mlp.up_proj.weight"] = w["w3"][i]
    sd["lm_head.weight"] = w["tok"] if shared else w["out"]
    m.load_state_dict(sd)
    if shared:
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


SPM = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "spm")


def tokenizer_pieces():
    """The pieces of the spm fixture's tokenizer.bin (llama2.c's tokenizer.py layout: int32 max_token_length,
    then per token float32 score, int32 length, the bytes)."""
    raw = open(os.path.join(SPM, "tokenizer.bin"), "rb").read()
    pos, toks = 4, []
    while pos < len(raw):
        _, n = struct.unpack("<fi", raw[pos:pos + 8])
        toks.append(raw[pos + 8:pos + 8 + n])
        pos += 8 + n
    return toks


def spm_text(ids):
    """The bytes the ids decode to: each piece's bytes (a <0xNN> piece its byte), the leading space of the
    text dropped (run.c's decode after BOS; sentencepiece's DecodeIds, which must agree up to the invalid
    UTF-8 it replaces)."""
    import sentencepiece
    pieces = tokenizer_pieces()
    out = b""
    for i in ids:
        p = pieces[int(i)]
        out += bytes([int(p[3:5], 16)]) if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">") else p
    out = out[1:] if out.startswith(b" ") else out
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(SPM, "tokenizer.model"))
    assert sp.decode([int(i) for i in ids]) == out.decode("utf-8", "replace"), (sp.decode(ids), out)
    return np.frombuffer(out, dtype=np.uint8).copy()


def main():
    os.makedirs(OUT, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    min_vocab = min(f[6] for f in FIXTURES.values())
    tokens = make_reference.make_tokens(TOKEN_SEED, T, min_vocab)
    prompt = tokens[:PROMPT]
    ref = {"tokens": tokens, "prompt": prompt}
    writers = {0: write_v0, 1: write_v1, 2: write_v2}
    for name, spec in FIXTURES.items():
        version = spec[0]
        m = make_llama(*spec)
        path = os.path.join(OUT, name + ".bin")
        writers[version](m, path)
        ref[name + ".logits"] = make_reference.run_logits(m, tokens)
        ref[name + ".greedy"], margin = greedy(m, prompt, GREEDY)
        ref[name + ".text"] = spm_text(list(prompt) + list(ref[name + ".greedy"]))
        line = f"  {name}: greedy {ref[name + '.greedy'].tolist()} (margin {margin:.3g})"
        if version == 2:
            d = dequantized_model(m)
            ref[name + ".logits_deq"] = make_reference.run_logits(d, tokens)
            ref[name + ".greedy_deq"], margin_deq = greedy(d, prompt, GREEDY)
            ref[name + ".embd"] = m.model.embed_tokens.weight.detach().float().numpy().copy()
            moved = float(np.abs(ref[name + ".logits"] - ref[name + ".logits_deq"]).max())
            line += f"; Q8_0 moves the logits by max {moved:.3g}, greedy {ref[name + '.greedy_deq'].tolist()}"
            assert np.array_equal(ref[name + ".greedy"], ref[name + ".greedy_deq"]), "pick another seed"
        print(line + f"; logits std {ref[name + '.logits'].std():.3f}")
    make_reference.METADATA = {"generator": "tools/reference/make_llama2c_reference.py",
                               "transformers": transformers.__version__,
                               "torch": torch.__version__.split("+")[0]}
    make_reference.write_reference(OUT, **ref)

    # Read back: each file holds exactly these weights, the reference is what they give.
    check = safe_load_np(os.path.join(OUT, "reference.safetensors"))
    for name, spec in FIXTURES.items():
        key = name + (".logits_deq" if spec[0] == 2 else ".logits")
        got = make_reference.run_logits(read_back(os.path.join(OUT, name + ".bin")), tokens)
        assert np.array_equal(got, check[key]), (name, float(np.abs(got - check[key]).max()))
    for f in sorted(os.listdir(OUT)):
        print(f"  {f}: {os.path.getsize(os.path.join(OUT, f))} bytes")


if __name__ == "__main__":
    main()
