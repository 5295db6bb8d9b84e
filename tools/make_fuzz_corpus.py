#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (small files, re-runnable).

Needs only the Python standard library and tests/fixtures/gpt2-tokenizer (for a GPT-2 vocabulary subset)."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
GPT2 = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> the file, header padded to 8 bytes as the reference does."""
    h, off, blob = {}, 0, b""
    if metadata:
        h["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    hdr = json.dumps(h, separators=(",", ":")).encode()
    hdr += b" " * ((8 - len(hdr) % 8) % 8)
    return struct.pack("<Q", len(hdr)) + hdr + blob


def gguf_metadata(kv):
    """A GGUF v3 file of metadata alone (no tensors): kv is [(key, type, value)] with type "u32", "f32",
    "bool", "str" or "bools" (an array of booleans)."""
    def string(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv))
    for key, t, v in kv:
        out += string(key)
        if t == "u32":
            out += struct.pack("<II", 4, v)
        elif t == "f32":
            out += struct.pack("<If", 6, v)
        elif t == "bool":
            out += struct.pack("<IB", 7, int(v))
        elif t == "str":
            out += struct.pack("<I", 8) + string(v)
        elif t == "bools":
            out += struct.pack("<IIQ", 9, 7, len(v)) + bytes(int(x) for x in v)
    return out


def block_family_seeds():
    """The keys the Gemma 2 / Gemma 3 / SmolLM3 readers take (fuzz_gguf runs each family's parse_gguf)."""
    def common(a, layers):
        return [("general.architecture", "str", a), (a + ".context_length", "u32", 128),
                (a + ".embedding_length", "u32", 64), (a + ".block_count", "u32", layers),
                (a + ".feed_forward_length", "u32", 96), (a + ".attention.head_count", "u32", 4),
                (a + ".attention.head_count_kv", "u32", 2), (a + ".attention.layer_norm_rms_epsilon", "f32", 1e-6)]
    put("fuzz_gguf", "gemma3.gguf", gguf_metadata(common("gemma3", 6) + [
        ("gemma3.attention.key_length", "u32", 16), ("gemma3.attention.value_length", "u32", 16),
        ("gemma3.rope.freq_base", "f32", 1e6), ("gemma3.rope.freq_base_swa", "f32", 1e4),
        ("gemma3.rope.scaling.type", "str", "linear"), ("gemma3.rope.scaling.factor", "f32", 8.0),
        ("gemma3.attention.sliding_window", "u32", 8),
        ("gemma3.attention.sliding_window_pattern", "bools", [1, 1, 1, 1, 1, 0])]))
    put("fuzz_gguf", "gemma2.gguf", gguf_metadata(common("gemma2", 4) + [
        ("gemma2.attention.key_length", "u32", 16), ("gemma2.attention.value_length", "u32", 16),
        ("gemma2.attn_logit_softcapping", "f32", 5.0), ("gemma2.final_logit_softcapping", "f32", 8.0),
        ("gemma2.attention.sliding_window", "u32", 8), ("gemma2.attention.sliding_window_pattern", "u32", 2)]))
    put("fuzz_gguf", "smollm3.gguf", gguf_metadata(common("smollm3", 8) + [
        ("smollm3.rope.freq_base", "f32", 5e6), ("smollm3.vocab_size", "u32", 320),
        ("smollm3.rope.dimension_count", "u32", 16)]))
    for name in ("gemma3-swa", "gemma2-softcap", "smollm3-nope"):
        with open(os.path.join(ROOT, "tests", "fixtures", "models", name, "config.json")) as f:
            put("fuzz_config", name + ".json", f.read())


def prompt_file(dtype, pos_bytes, n_vocab, name, tokens):
    """A prompt cache file as src/run/prompt_file.h lays it out; its keys and values are bytes 0, 1, 2, ..."""
    mask = (1 << 64) - 1

    def splitmix64(x):
        z = (x + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    body = name.encode() + struct.pack("<%di" % len(tokens), *tokens)
    body += bytes(i % 256 for i in range(len(tokens) * pos_bytes))
    h = 0x6D696E6967707400
    padded = body + b"\0" * (-len(body) % 8)
    for i in range(0, len(padded), 8):
        h = splitmix64(h ^ struct.unpack_from("<Q", padded, i)[0])
    head = b"MGPTPCF1" + struct.pack("<IIQQQQQQ", dtype, 0, 42, pos_bytes, n_vocab, len(tokens), len(name), h)
    return head + body


def main():
    block_family_seeds()
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    put("fuzz_safetensors", "two_tensors", safetensors([("wte.weight", "F32", [2, 2], f32(1, 2, 3, 4)),
                                                        ("h.0.ln_1.bias", "F16", [3], b"\x00\x3c" * 3)],
                                                       {"format": "pt"}))
    put("fuzz_safetensors", "bf16_scalar", safetensors([("x", "BF16", [], b"\x80\x3f"), ("e", "F32", [0, 4], b"")]))
    put("fuzz_safetensors", "empty", safetensors([]))
    put("fuzz_safetensors", "i64", safetensors([("ids", "I64", [2], struct.pack("<2q", 1, 2))]))

    for m in ["tiny", "tiny-sinusoidal", "tiny-untied", "tiny-relu-legacy"]:
        with open(os.path.join(ROOT, "tests", "fixtures", "models", m, "config.json"), "rb") as f:
            put("fuzz_config", m + ".json", f.read())
    put("fuzz_config", "minimal.json", json.dumps({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 2,
                                                   "n_ctx": 4, "vocab_size": 3, "n_inner": None}))
    put("fuzz_config", "eos-list.json", json.dumps({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 2,
                                                    "n_ctx": 4, "vocab_size": 3, "eos_token_id": [2, 1]}))
    put("fuzz_config", "generation_config.json", json.dumps(
        {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1,
         "eos_token_id": [2, 1], "max_new_tokens": 8, "suppress_tokens": [1]}))

    # A GPT-2 vocabulary subset: the 256 byte symbols, and the first merges whose parts are in it.
    with open(os.path.join(GPT2, "vocab.json"), encoding="utf-8") as f:
        full = json.load(f)
    with open(os.path.join(GPT2, "merges.txt"), encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
    vocab = {s: i for s, i in full.items() if i < 256}
    merges = []
    for l in lines:
        a, b = l.split(" ")
        if a in vocab and b in vocab and a + b in full:
            vocab[a + b] = full[a + b]
            merges.append(l)
        if len(merges) == 40:
            break
    vj = json.dumps(vocab, ensure_ascii=False, separators=(",", ":"))
    mt = "#version: 0.2\n" + "\n".join(merges) + "\n"
    put("fuzz_tokenizer_load", "vocab_merges", b"\x01" + vj.encode() + b"\x00" + mt.encode())
    vocab_eot = dict(vocab)
    vocab_eot["<|endoftext|>"] = 50256
    put("fuzz_tokenizer_load", "vocab_merges_eot",
        b"\x01" + json.dumps(vocab_eot, separators=(",", ":")).encode() + b"\x00" + "\n".join(merges[:5]).encode())
    tj = {"version": "1.0", "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": True}],
          "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "vocab": vocab,
                    "merges": [m.split(" ") for m in merges[:20]] + merges[20:]}}
    put("fuzz_tokenizer_load", "tokenizer_json", b"\x00" + json.dumps(tj, separators=(",", ":")).encode())

    # GPT-NeoX's shape (NFC, non-special runs of spaces) with every added-token flag minigpt applies, and
    # StarCoder's Sequence[Digits, ByteLevel] with an OPT-like template.
    def added(i, content, special, normalized, lstrip=False, rstrip=False):
        return {"id": i, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
                "normalized": normalized, "special": special}
    neox = {"version": "1.0", "normalizer": {"type": "NFC"},
            "added_tokens": [added(50256, "<|endoftext|>", True, False), added(50257, "  ", False, True),
                             added(50258, "   ", False, True), added(50259, "<mask>", True, False, lstrip=True),
                             added(50260, "[R]", False, True, rstrip=True), added(50261, "cafe\u0301", False, True),
                             added(50262, "e\u0301!", False, False, lstrip=True, rstrip=True)],
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "vocab": vocab, "merges": merges}}
    put("fuzz_tokenizer_load", "tokenizer_json_neox", b"\x00" + json.dumps(neox, separators=(",", ":")).encode())
    star = {"version": "1.0", "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
            "added_tokens": [added(50256, "<|endoftext|>", True, False), added(50257, "<fim_prefix>", True, False)],
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256],
                                                                    "tokens": ["<|endoftext|>"]}}},
            "model": {"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": False,
                      "ignore_merges": False}}
    put("fuzz_tokenizer_load", "tokenizer_json_starcoder",
        b"\x00" + json.dumps(star, separators=(",", ":")).encode())
    # Character-level BPE, as tools/convert_nanogpt.py --meta writes it (tokenizers' BPE(vocab, merges=[]) with
    # the Fuse decoder): the characters of the fuzz target's first text.
    chars = sorted(set("Hello world, it's 2024!\n  \t x"))
    char_tj = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
               "post_processor": None, "decoder": {"type": "Fuse"},
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                         "ignore_merges": False, "vocab": {c: i for i, c in enumerate(chars)}, "merges": []}}
    put("fuzz_tokenizer_load", "tokenizer_json_char", b"\x00" + json.dumps(char_tj, separators=(",", ":")).encode())

    texts = ["Hello world", "ROMEO:\nWhat say'st thou?  It's 12345 o'clock...\n\n",
             "\u00e9t\u00e9 \u4e2d\u6587 \U0001F600 \u0939\u093f\u0928\u094d\u0926\u0940", "<|endoftext|>x<|endoftext|>",
             "   \t\r\n  a  ", "I'm we'll they've DON'T 's"]
    for i, t in enumerate(texts):
        put("fuzz_encode", "text%d" % i, bytes([i & 1]) + t.encode("utf-8"))
    put("fuzz_encode", "invalid_utf8", b"\x00ab\xc3(\xe2\x82\xff")
    # llm.c checkpoints (src/formats/llmc.h): the smallest model, F32 and BF16 (wte padded from 3 to 4 rows).
    def llmc(version, maxT, V, L, NH, C, Vp):
        n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
        header = struct.pack("<256i", 20240326, version, maxT, V, L, NH, C, Vp, *([0] * 248))
        return header + (struct.pack("<%df" % n, *[0.25] * n) if version == 3 else b"\x80\x3e" * n)
    put("fuzz_llmc", "tiny_f32", llmc(3, 1, 1, 1, 1, 1, 1))
    put("fuzz_llmc", "tiny_bf16", llmc(5, 2, 3, 1, 1, 2, 4))
    # llama2.c checkpoints (src/formats/llama2c.h): the smallest model in each of export.py's versions.
    def llama2c(version, dim, hidden, L, H, Hkv, V, S, shared=True, gs=2):
        kv = Hkv * dim // H
        mats = V * dim + L * (2 * dim * dim + 2 * kv * dim + 3 * hidden * dim) + (0 if shared else V * dim)
        norms = (2 * L + 1) * dim
        if version == 0:
            head = struct.pack("<7i", dim, hidden, L, H, Hkv, V if shared else -V, S)
            return head + struct.pack("<%df" % (mats + norms + S * dim // H), *[0.25] * (mats + norms + S * dim // H))
        head = struct.pack("<Ii7iB", 0x616B3432, version, dim, hidden, L, H, Hkv, V, S, int(shared))
        head += struct.pack("<i", gs) if version == 2 else b""
        head += b"\0" * (256 - len(head))
        if version == 1:
            return head + struct.pack("<%df" % (mats + norms), *[0.25] * (mats + norms))
        # every matrix's dim is a factor, so each is whole groups: int8 values then their scales, per tensor
        sizes = [V * dim] + [dim * dim] * L + [kv * dim] * (2 * L) + [dim * dim] * L + [hidden * dim] * (3 * L)
        sizes += [] if shared else [V * dim]
        body = struct.pack("<%df" % norms, *[1.0] * norms)
        for n in sizes:
            body += b"\x7f" * n + struct.pack("<%df" % (n // gs), *[0.01] * (n // gs))
        return head + body
    put("fuzz_llama2c", "v0_tied", llama2c(0, 2, 2, 1, 1, 1, 2, 2))
    put("fuzz_llama2c", "v0_untied_gqa", llama2c(0, 4, 2, 1, 2, 1, 1, 1, shared=False))
    put("fuzz_llama2c", "v1_untied", llama2c(1, 2, 3, 1, 1, 1, 2, 2, shared=False))
    put("fuzz_llama2c", "v2_tied", llama2c(2, 4, 2, 1, 2, 1, 2, 2, gs=2))
    # SentencePiece files: the tokenizers fixtures' tokenizer.bin (llama2.c) and tokenizer.model (protobuf)
    spm = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "spm")
    with open(os.path.join(spm, "tokenizer.bin"), "rb") as f:
        put("fuzz_spm_files", "tokenizer_bin", b"\x00" + f.read())
    with open(os.path.join(spm, "tokenizer.model"), "rb") as f:
        put("fuzz_spm_files", "tokenizer_model", b"\x01" + f.read())
    for i, s in enumerate(["15496 995", "0\n1\t2  50256\n", "2147483647", "", "  7  ", "12a", "-1", "2147483648"]):
        put("fuzz_id_list", "ids%d" % i, s)
    # the same target reads --logit-bias values too
    for i, s in enumerate(["15043+1", "198-inf", "5-0.5", "1+1e38", "7+.5e-3"]):
        put("fuzz_id_list", "bias%d" % i, s)
    # /v1/completions bodies (minigpt serve): the shapes clients send, lm-evaluation-harness's scoring among them.
    bodies = [
        {"model": "m", "prompt": "ROMEO:", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 1},
        {"prompt": ["a", "b"], "n": 2, "stop": ["\n", "END"], "stream": True, "stream_options": {"include_usage": True}},
        {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 0, "echo": True, "logprobs": 5},
        {"prompt": [10, 20, 30], "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "ignore_eos": True},
        {"prompt": "", "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "best_of": 1, "user": "u"},
        {"prompt": "x", "presence_penalty": 0.5, "frequency_penalty": -1.2, "logit_bias": {"10": -100, "3": False, "01": 2}},
        {"prompt": "x", "logit_bias": [[1, 5.5], [2, False], [3]]},
    ]
    for i, b in enumerate(bodies):
        put("fuzz_server_request", "body%d" % i, json.dumps(b))
    # generate --prompt-cache files (src/run/prompt_file.h): the layout and checksum written out here again
    for name, dtype, pos_bytes, tokens in [("f32_3", 0, 8, [1, 2, 3]), ("f16_2", 1, 4, [0, 9]), ("empty", 2, 6, [])]:
        put("fuzz_prompt_file", name, prompt_file(dtype, pos_bytes, 10, "m (gpt2)", tokens))


if __name__ == "__main__":
    sys.exit(main())
