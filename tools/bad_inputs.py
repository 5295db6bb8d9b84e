#!/usr/bin/env python3
"""Runs the minigpt CLI on every bad input below and prints a Markdown table (for tests/README.md):
the input, its kind, the exit status, the number of stderr lines, and what minigpt said. Standard library
only. Exits 1 unless every case is one line on stderr, nothing on stdout, and the exit status of its kind
(ctest runs it: the bad_inputs test):

- usage, exit 2: the command line cannot be read: an unknown command or flag, a flag without its value, a
  required argument missing, flags that exclude each other, a value not of the flag's form (not a number,
  not one of its choices, not TOKEN_ID+BIAS);
- refused, exit 1: everything else: a value of the right form that is refused (outside the flag's range,
  past what the model allows), a file or the data refused, a failure while running.

Usage: tools/bad_inputs.py [path/to/minigpt]   (default build/minigpt)"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "minigpt"))
TINY = os.path.join(ROOT, "tests", "fixtures", "models", "tiny")
SHARDED = os.path.join(ROOT, "tests", "fixtures", "models", "tiny-sharded")
GPT2TOK = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
SHIPPED = os.path.join(ROOT, "models", "shakespeare-char")
SHIPPED_NOJSON = None  # the shipped model without tokenizer.json (so that vocab.json + merges.txt are read), made in main()
T = tempfile.mkdtemp(prefix="minigpt-bad-")


def st_image(header, data=b""):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(h)) + h + data


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def model_dir(name, config=None, weights=None, extra=None, base=TINY):
    d = os.path.join(T, name)
    shutil.copytree(base, d)
    if config is not None:
        open(os.path.join(d, "config.json"), "wb").write(config if isinstance(config, bytes) else config.encode())
    if weights is not None:
        open(os.path.join(d, "model.safetensors"), "wb").write(weights)
    for f, content in (extra or {}).items():
        p = os.path.join(d, f)
        if content is None:
            os.remove(p)
        else:
            open(p, "wb").write(content if isinstance(content, bytes) else content.encode())
    return d


def tok_dir(name, files):
    d = os.path.join(T, name)
    os.makedirs(d)
    for f, content in files.items():
        open(os.path.join(d, f), "wb").write(content if isinstance(content, bytes) else content.encode())
    return d


def edit_header(fn):
    h, data = read_st(os.path.join(TINY, "model.safetensors"))
    h, data = fn(h, data)
    return st_image(h, data)


def cfg(**kv):
    return cfg_of(TINY, **kv)


def cfg_of(base, **kv):
    c = json.load(open(os.path.join(base, "config.json")))
    for k, v in kv.items():
        if v is ...:
            del c[k]
        else:
            c[k] = v
    return json.dumps(c)


def with_wte(fn):
    def f(h, data):
        fn(h["wte.weight"] if "wte.weight" in h else h["transformer.wte.weight"], h)
        return h, data
    return f


def first_two(h):
    names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
    return h[names[0]], h[names[1]]


def overlap(h, data):
    a, b = first_two(h)
    b["data_offsets"] = [b["data_offsets"][0] - 4, b["data_offsets"][1] - 4]
    return h, data


def gap(h, data):
    return h, data + b"\0" * 4


def past_end(h, data):
    return h, data[:-1]


def vocab_bytes():
    v = json.load(open(os.path.join(GPT2TOK, "vocab.json"), encoding="utf-8"))
    return {s: i for s, i in v.items() if i < 256}


def poke(name, index, value, scale=False, base=TINY):
    """The weights of `base` with element `index` of F32 tensor `name` set to `value` (every element when
    scale=True)."""
    h, data = read_st(os.path.join(base, "model.safetensors"))
    key = name if name in h else "transformer." + name
    b, e = h[key]["data_offsets"]
    data = bytearray(data)
    idx = range((e - b) // 4) if scale else [index]
    for i in idx:
        struct.pack_into("<f", data, b + 4 * i, value)
    return st_image(h, bytes(data))


def with_tensor(name, copy_of):
    """The tiny fixture's weights plus `name`, a copy of tensor `copy_of` with its first element changed."""
    h, data = read_st(os.path.join(TINY, "model.safetensors"))
    key = copy_of if copy_of in h else "transformer." + copy_of
    b, e = h[key]["data_offsets"]
    extra = bytearray(data[b:e])
    struct.pack_into("<f", extra, 0, struct.unpack_from("<f", extra, 0)[0] + 0.5)
    h[name] = {"dtype": h[key]["dtype"], "shape": h[key]["shape"], "data_offsets": [len(data), len(data) + len(extra)]}
    return st_image(h, data + bytes(extra))


def special(name, kind):
    """A path in T that is a FIFO ("fifo"), a symlink to /dev/zero ("zero") or a directory ("dir")."""
    p = os.path.join(T, name)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero":
        os.symlink("/dev/zero", p)
    else:
        os.makedirs(p)
    return p


def run(args, stdin=b"", stdout=None):
    if stdout is None:
        p = subprocess.run([EXE] + args, input=stdin, capture_output=True, timeout=300)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")
    with open(stdout, "wb") as out:
        p = subprocess.run([EXE] + args, input=stdin, stdout=out, stderr=subprocess.PIPE, timeout=300)
    return p.returncode, b"", p.stderr.decode("utf-8", "replace")


# --- GGUF: a std-lib walk of the header, so that single fields can be broken in place ---------------------
GGUF_MIX = os.path.join(ROOT, "tests", "fixtures", "gguf", "gpt2-quant-mix.gguf")
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_layout(b):
    """Offsets of the fields of a GGUF v3 image: {'n_tensors', 'n_kv', 'kv': {key: (key_off, type_off,
    value_off)}, 'tensors': {name: (ndims_off, ne_off, type_off, offset_off)}, 'data': data start}."""
    pos = 8
    n_tensors, n_kv = struct.unpack_from("<QQ", b, pos)
    lay = {"n_tensors": 8, "n_kv": 16, "kv": {}, "tensors": {}}
    pos = 24

    def string(p):
        n = struct.unpack_from("<Q", b, p)[0]
        return b[p + 8:p + 8 + n].decode(), p + 8 + n

    def value(t, p):
        if t == 8:
            return string(p)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            for _ in range(n):
                p = value(et, p)
            return p
        return p + _SCALAR[t]

    for _ in range(n_kv):
        key_off = pos
        key, pos = string(pos)
        t = struct.unpack_from("<I", b, pos)[0]
        lay["kv"][key] = (key_off, pos, pos + 4)
        pos = value(t, pos + 4)
    for _ in range(n_tensors):
        name, pos = string(pos)
        nd = struct.unpack_from("<I", b, pos)[0]
        lay["tensors"][name] = (pos, pos + 4, pos + 4 + 8 * nd, pos + 8 + 8 * nd)
        pos += 4 + 8 * nd + 4 + 8
    lay["data"] = (pos + 31) // 32 * 32
    return lay


def gguf_edit(name, fn):
    """A copy of the mixed-type GGUF fixture with fn(bytearray, layout) applied; returns its path."""
    b = bytearray(open(GGUF_MIX, "rb").read())
    fn(b, gguf_layout(bytes(b)))
    path = os.path.join(T, name + ".gguf")
    open(path, "wb").write(bytes(b))
    return path


# --- llm.c checkpoints: the F32 fixture with one header field (int32 number i) or its length changed -------
LLMC = os.path.join(ROOT, "tests", "fixtures", "llmc", "gpt2-f32.bin")
BYTELEVEL = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "bytelevel")


def llmc_edit(name, fields=None, cut=None, extra=b"", poke=None):
    b = bytearray(open(LLMC, "rb").read())
    for i, v in (fields or {}).items():
        struct.pack_into("<i", b, 4 * i, v)
    if poke is not None:  # (float index after the header, value)
        struct.pack_into("<f", b, 1024 + 4 * poke[0], poke[1])
    b = bytes(b[:cut] if cut is not None else b) + extra
    path = os.path.join(T, name + ".bin")
    open(path, "wb").write(b)
    return path


def put(fmt, off, v):
    return lambda b, lay: struct.pack_into(fmt, b, off(lay) if callable(off) else off, v)


def main():
    global SHIPPED_NOJSON
    SHIPPED_NOJSON = model_dir("shipped-nojson", base=SHIPPED, extra={"tokenizer.json": None})
    V = vocab_bytes()
    vj = json.dumps(V)
    cases = []  # (group, description, args, stdin)

    servers = []

    def add(group, desc, args, stdin=b"", stdout=None, usage=False):
        cases.append((group, desc, args, stdin, stdout, "usage" if usage else "refused"))

    def replaced(name, f, kind, base=TINY):
        d = model_dir(name, base=base, extra={f: None})
        if kind == "fifo":
            os.mkfifo(os.path.join(d, f))
        else:
            os.symlink("/dev/zero", os.path.join(d, f))
        return d

    info = lambda d: ["info", "-m", d]
    # What only reading the weights finds (values, not headers): `info` reads headers only, so these load.
    load = lambda d: ["bench", "-m", d, "-p", "4", "-n", "0", "-r", "1", "-t", "1"]
    add("loader", "directory does not exist", info(os.path.join(T, "nope")))
    add("loader", "-m a .gguf name that does not exist", info(os.path.join(T, "nope.gguf")))
    open(os.path.join(T, "notes.txt"), "w").write("these are not the weights you are looking for\n")
    add("loader", "-m a text file", info(os.path.join(T, "notes.txt")))
    open(os.path.join(T, "page.gguf"), "w").write("<!DOCTYPE html><html>a download's error page</html>")
    add("loader", "-m a .gguf name on other bytes", info(os.path.join(T, "page.gguf")))
    add("loader", "-m a model directory's safetensors file", info(os.path.join(TINY, "model.safetensors")))
    add("loader", "directory without config.json", info(tok_dir("empty", {})))
    add("loader", "config.json not JSON", info(model_dir("cfg-json", config='{"model_type": ')))
    add("loader", "config.json number 1e999", info(model_dir("cfg-1e999", config=cfg(n_layer="X").replace('"X"', "1e999"))))
    add("loader", "config.json is an array", info(model_dir("cfg-array", config="[1, 2]")))
    add("loader", "model_type falcon", info(model_dir("cfg-falcon", config=cfg(model_type="falcon"))))
    add("loader", "n_head missing", info(model_dir("cfg-nohead", config=cfg(n_head=...))))
    add("loader", "n_head a string", info(model_dir("cfg-headstr", config=cfg(n_head="2"))))
    add("loader", "bos_token_id 2^64 - 1", info(model_dir("cfg-bos64", config=cfg(bos_token_id=2 ** 64 - 1))))
    add("loader", "n_embd not divisible by n_head", info(model_dir("cfg-div", config=cfg(n_head=5))))
    add("loader", "n_layer = 2^40", info(model_dir("cfg-layers", config=cfg(n_layer=2 ** 40))))
    add("loader", "vocab_size = 0", info(model_dir("cfg-vocab0", config=cfg(vocab_size=0))))
    add("loader", "config.json eos_token_id [1, \"a\"]", info(model_dir("cfg-eoslist", config=cfg(eos_token_id=[1, "a"]))))
    # generation_config.json: the model's generation defaults (generate, serve, info, convert read it)
    gcfg = lambda name, text: ["generate", "-m", model_dir(name, base=SHIPPED, extra={"generation_config.json": text}),
                               "-p", "x", "-n", "2"]
    add("loader", "generation_config.json not JSON", gcfg("gen-json", '{"top_p": '))
    add("loader", "generation_config.json temperature \"hot\"", gcfg("gen-temp", '{"temperature": "hot"}'))
    add("loader", "generation_config.json top_p 1.5", gcfg("gen-topp", '{"top_p": 1.5}'))
    add("loader", "generation_config.json top_k 2.5", gcfg("gen-topk", '{"top_k": 2.5}'))
    add("loader", "generation_config.json max_new_tokens 0", gcfg("gen-maxnew", '{"max_new_tokens": 0}'))
    add("loader", "layer_norm_epsilon = 1e300", info(model_dir("cfg-eps", config=cfg(layer_norm_epsilon=1e300))))
    add("loader", "activation_function swiglu", info(model_dir("cfg-act", config=cfg(activation_function="swiglu"))))
    add("loader", "model.safetensors missing", info(model_dir("st-missing", extra={"model.safetensors": None})))
    add("loader", "model.safetensors empty (0 bytes)", info(model_dir("st-empty", weights=b"")))
    add("loader", "model.safetensors truncated to half", info(model_dir("st-half", weights=open(os.path.join(TINY, "model.safetensors"), "rb").read()[:250000])))
    add("loader", "header length claims 2^60 bytes", info(model_dir("st-2p60", weights=struct.pack("<Q", 2 ** 60) + b"{}")))
    add("loader", "header not JSON", info(model_dir("st-notjson", weights=st_image(b"{hello}   "))))
    add("loader", "header JSON number 1e999", info(model_dir("st-1e999", weights=st_image(b'{"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}}', b"\0" * 4))))
    add("loader", "last tensor ends 1 byte past the data", info(model_dir("st-pastend", weights=edit_header(past_end))))
    add("loader", "two tensors overlap by 4 bytes", info(model_dir("st-overlap", weights=edit_header(overlap))))
    add("loader", "4 bytes after the last tensor", info(model_dir("st-gap", weights=edit_header(gap))))
    add("loader", "tensor shape 2^40 x 2^40", info(model_dir("st-huge", weights=edit_header(with_wte(lambda t, h: t.update(shape=[2 ** 40, 2 ** 40]))))))
    add("loader", "negative data offset", info(model_dir("st-neg", weights=edit_header(with_wte(lambda t, h: t.update(data_offsets=[-4, t["data_offsets"][1]]))))))
    add("loader", "unknown dtype F8", info(model_dir("st-f8", weights=edit_header(with_wte(lambda t, h: t.update(dtype="F8"))))))
    add("loader", "wte.weight stored as I32", info(model_dir("st-i32", weights=edit_header(with_wte(lambda t, h: t.update(dtype="I32"))))))
    add("loader", "wte.weight shape transposed", info(model_dir("st-shape", weights=edit_header(with_wte(lambda t, h: t.update(shape=t["shape"][::-1]))))))
    add("loader", "wte.weight renamed (missing)", info(model_dir("st-noname", weights=edit_header(lambda h, d: ({("x.weight" if k.endswith("wte.weight") else k): v for k, v in h.items()}, d)))))
    add("loader", "index.json not JSON", info(model_dir("idx-json", base=SHARDED, extra={"model.safetensors.index.json": "{"})))
    add("loader", "index.json names ../etc/passwd", info(model_dir("idx-path", base=SHARDED, extra={"model.safetensors.index.json": json.dumps({"weight_map": {"wte.weight": "../etc/passwd"}})})))
    add("loader", "a shard missing", info(model_dir("idx-shard", base=SHARDED, extra={"model-00002-of-00004.safetensors": None})))
    add("loader", "config.json is a FIFO", info(replaced("fifo-cfg", "config.json", "fifo")))
    add("loader", "model.safetensors is a FIFO", info(replaced("fifo-st", "model.safetensors", "fifo")))
    add("loader", "config.json -> /dev/zero", info(replaced("zero-cfg", "config.json", "zero")))
    add("loader", "index.json -> /dev/zero", info(replaced("zero-idx", "model.safetensors.index.json", "zero", base=SHARDED)))
    add("loader", "a NaN in h.0.mlp.c_fc.weight", load(model_dir("st-nan", weights=poke("h.0.mlp.c_fc.weight", 5, float("nan")))))
    add("loader", "an Inf in wte.weight", load(model_dir("st-inf", weights=poke("wte.weight", 0, float("inf")))))
    add("loader", "tied model with an lm_head.weight unlike wte", load(model_dir("st-head", weights=with_tensor("lm_head.weight", "wte.weight"))))
    add("loader", "h.99.attn.bias in a 2-layer model", info(model_dir("st-h99", weights=with_tensor("h.99.attn.bias", "h.0.ln_1.bias"))))

    tk = lambda d, *a: ["tokenize", "-m", d] + list(a)
    add("tokenizer", "no tokenizer files", tk(tok_dir("tok-none", {}), "hi"))
    add("tokenizer", "tokenizer.json not JSON", tk(tok_dir("tok-json", {"tokenizer.json": "{"}), "hi"))
    add("tokenizer", "tokenizer.json model type WordPiece", tk(tok_dir("tok-wp", {"tokenizer.json": json.dumps({"model": {"type": "WordPiece", "vocab": {}}})}), "hi"))
    add("tokenizer", "tokenizer.json normalizer NFKC", tk(tok_dir("tok-norm", {"tokenizer.json": json.dumps({"normalizer": {"type": "NFKC"}, "pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": V}})}), "hi"))
    add("tokenizer", "tokenizer.json pre_tokenizer Split", tk(tok_dir("tok-split", {"tokenizer.json": json.dumps({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\d"}, "behavior": "Isolated", "invert": False}, "model": {"type": "BPE", "vocab": V}})}), "hi"))
    add("tokenizer", "tokenizer.json added token single_word", tk(tok_dir("tok-sword", {"tokenizer.json": json.dumps({"pre_tokenizer": {"type": "ByteLevel"}, "added_tokens": [{"id": 0, "content": "<x>", "single_word": True, "lstrip": False, "rstrip": False, "normalized": False, "special": True}], "model": {"type": "BPE", "vocab": V}})}), "hi"))
    add("tokenizer", "tokenizer.json added token with a negative id", tk(tok_dir("tok-negid", {"tokenizer.json": json.dumps({"pre_tokenizer": {"type": "ByteLevel"}, "added_tokens": [{"id": -1, "content": "café", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False}], "model": {"type": "BPE", "vocab": V, "merges": []}})}), "hi"))
    add("tokenizer", "tokenizer.json post_processor BertProcessing", tk(tok_dir("tok-bert", {"tokenizer.json": json.dumps({"pre_tokenizer": {"type": "ByteLevel"}, "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 0]}, "model": {"type": "BPE", "vocab": V, "merges": []}})}), "hi"))
    add("tokenizer", "vocab.json lacks byte symbols", tk(tok_dir("tok-bytes", {"vocab.json": '{"a": 0}', "merges.txt": ""}), "hi"))
    add("tokenizer", "vocab.json id is a string", tk(tok_dir("tok-idstr", {"vocab.json": '{"a": "0"}', "merges.txt": ""}), "hi"))
    add("tokenizer", "vocab.json id 2^40", tk(tok_dir("tok-idbig", {"vocab.json": vj[:-1] + ', "zz": 1099511627776}', "merges.txt": ""}), "hi"))
    add("tokenizer", "two tokens with one id", tk(tok_dir("tok-dup", {"vocab.json": vj[:-1] + ', "zz": 5}', "merges.txt": ""}), "hi"))
    add("tokenizer", "merges.txt line with 3 symbols", tk(tok_dir("tok-merge3", {"vocab.json": vj, "merges.txt": "#version: 0.2\na b c\n"}), "hi"))
    add("tokenizer", "merge whose result is not in vocab", tk(tok_dir("tok-mergevocab", {"vocab.json": vj, "merges.txt": "a b\n"}), "hi"))
    add("tokenizer", "text not valid UTF-8", tk(GPT2TOK, "--file", tok_dir("badutf", {"t.txt": b"ab\xc3("}) + "/t.txt"))
    add("tokenizer", "--decode 12a", tk(GPT2TOK, "--decode", "15496 12a"))
    add("tokenizer", "--decode of a file with a NUL byte", tk(GPT2TOK, "--decode", "--file", tok_dir("nul-ids", {"ids.txt": b"15496 1\x002"}) + "/ids.txt"))
    add("tokenizer", "--decode 2147483648", tk(GPT2TOK, "--decode", "2147483648"))
    add("tokenizer", "--decode 99999 (not in vocab)", tk(GPT2TOK, "--decode", "99999"))
    add("tokenizer", "--decode with --special (an encoding flag)", tk(GPT2TOK, "--decode", "--special", "15496"), usage=True)
    add("tokenizer", "--file does not exist", tk(GPT2TOK, "--file", os.path.join(T, "nope.txt")))
    add("tokenizer", "text and --file both", tk(GPT2TOK, "hi", "--file", os.path.join(T, "nope.txt")), usage=True)
    add("tokenizer", "--bogus-flag", tk(GPT2TOK, "--bogus-flag", "hi"), usage=True)
    add("tokenizer", "--file without its value", tk(GPT2TOK, "--file"), usage=True)
    add("tokenizer", "vocab.json -> /dev/zero", tk(replaced("zero-vocab", "vocab.json", "zero", base=SHIPPED_NOJSON), "hi"))
    add("tokenizer", "tokenizer.json is a FIFO", tk(replaced("fifo-tok", "tokenizer.json", "fifo", base=SHIPPED), "hi"))
    add("tokenizer", "--file /dev/zero", tk(GPT2TOK, "--file", "/dev/zero"))
    add("tokenizer", "--file a directory", tk(GPT2TOK, "--file", T))
    add("tokenizer", "stdout is /dev/full", tk(GPT2TOK, "hi"), stdout="/dev/full")

    g = lambda *a: ["generate", "-m", SHIPPED, "-p", "ROMEO:"] + list(a)
    add("generate", "--temperature -1", g("--temperature", "-1"))
    add("generate", "--top-k -1", g("--top-k", "-1"))
    add("generate", "--top-p 0", g("--top-p", "0"))
    add("generate", "--top-p 2", g("--top-p", "2"))
    add("generate", "--min-p 1.5", g("--min-p", "1.5"))
    add("generate", "--repetition-penalty 0", g("--repetition-penalty", "0"))
    add("generate", "--max-new-tokens -2 (-1: until the context is full)", g("--max-new-tokens", "-2"))
    add("generate", "--max-new-tokens abc", g("--max-new-tokens", "abc"), usage=True)
    add("generate", "--max-new-tokens without its value", g("--max-new-tokens"), usage=True)
    add("generate", "--seed -1", g("--seed", "-1"))
    add("generate", "--seed 2^64", g("--seed", "18446744073709551616"))
    add("generate", "--device 1 (the cpu backend)", g("--device", "1"))
    add("generate", "--seed 0x10 (not decimal)", g("--seed", "0x10"), usage=True)
    add("generate", "--max-new-tokens 2^63", g("--max-new-tokens", "9223372036854775808"))
    add("generate", "--context-overflow wrap", g("--context-overflow", "wrap"), usage=True)
    add("generate", "--stop not valid UTF-8", g("--stop", "ab\udcff"))
    add("generate", "-r '' (an empty stop string)", g("-r", ""))
    add("generate", "--temperature '' (an unset variable)", g("--temperature", ""), usage=True)
    add("generate", "--top-p 1e-300 (0 as a float)", g("--top-p", "1e-300"))
    add("generate", "--repetition-penalty 1e300", g("--repetition-penalty", "1e300"))
    add("generate", "--repeat-last-n -2", g("--repeat-last-n", "-2"))
    add("generate", "--presence-penalty nan", g("--presence-penalty", "nan"))
    add("generate", "--logit-bias 101 (no sign and bias)", g("--logit-bias", "101"), usage=True)
    add("generate", "--logit-bias 101+inf", g("--logit-bias", "101+inf"))
    add("generate", "--logit-bias 256+1 (past the vocabulary)", g("--logit-bias", "256+1"))
    add("generate", "--tokenizer ''", g("--tokenizer", ""))
    add("generate", "--tokenizer of another model (256 tokens for 50257)", ["generate", "-m", os.path.join(ROOT, "tests", "fixtures", "gguf", "gpt2-tiny-f32.gguf"), "--tokenizer", SHIPPED, "-p", "x"])
    add("generate", "empty prompt, bos_token_id past the vocabulary", ["generate", "-m", model_dir("bos-past", base=SHIPPED, config=cfg_of(SHIPPED, bos_token_id=999)), "-p", ""])
    add("generate", "--cache-type f8", g("--cache-type", "f8"), usage=True)
    add("generate", "--top-logprobs 100000 --json", g("--json", "--top-logprobs", "100000"))
    add("generate", "--top-logprobs 3 without --json", g("--top-logprobs", "3"), usage=True)
    add("generate", "--dtype f8", g("--dtype", "f8"), usage=True)
    add("generate", "-t 5000", g("-t", "5000"))
    add("generate", "--backend cuda (no GPU)", g("--backend", "cuda"))
    add("generate", "--backend tpu", g("--backend", "tpu"), usage=True)
    add("generate", "--file does not exist", ["generate", "-m", SHIPPED, "--file", os.path.join(T, "nope.txt")])
    add("generate", "-f does not exist", ["generate", "-m", SHIPPED, "-f", os.path.join(T, "nope.txt")])
    add("generate", "-p and --file both", ["generate", "-m", SHIPPED, "-p", "x", "--file", os.path.join(T, "nope.txt")], usage=True)
    add("generate", "prompt not valid UTF-8", ["generate", "-m", SHIPPED, "--file", os.path.join(T, "badutf", "t.txt")])
    add("generate", "prompt longer than the context", ["generate", "-m", SHIPPED, "-p", "x" * 5000])
    add("generate", "--bogus-flag", g("--bogus-flag"), usage=True)
    add("generate", "-i with --json", g("-i", "--json"), usage=True)
    add("generate", "-m a model with a bad header", ["generate", "-m", os.path.join(T, "st-overlap"), "-p", "x"])
    add("generate", "--file /dev/zero", ["generate", "-m", SHIPPED, "--file", "/dev/zero"])
    add("generate", "--file a directory", ["generate", "-m", SHIPPED, "--file", T])
    add("generate", "--file a FIFO", ["generate", "-m", SHIPPED, "--file", special("prompt-fifo", "fifo")])
    add("generate", "-c 99999 (context 128)", g("-c", "99999"))
    add("generate", "-c -1", g("-c", "-1"))
    add("generate", "prompt longer than -c 4", g("-c", "4"))
    add("generate", "-i --context-overflow error with a -p longer than the context", ["generate", "-m", SHIPPED, "-i", "--context-overflow", "error", "-p", "x" * 200])
    add("generate", "weight 1e5 with --dtype f16", ["generate", "-m", model_dir("st-f16", weights=poke("h.1.attn.c_proj.weight", 7, 1e5)), "-p", "x", "--dtype", "f16"])
    add("generate", "logits overflow (ln_f.weight 3e38)", ["generate", "-m", model_dir("st-lnf", base=SHIPPED, weights=poke("ln_f.weight", 0, 3e38, scale=True, base=SHIPPED)), "-p", "x"])
    add("generate", "stdout is /dev/full", g("--max-new-tokens", "4"), stdout="/dev/full")
    add("generate", "stdout is /dev/full (--json)", g("--max-new-tokens", "4", "--json"), stdout="/dev/full")

    b = lambda *a: ["bench", "-m", SHIPPED] + list(a)
    add("bench", "-p -1", b("-p", "-1"))
    add("bench", "-p 0 -n 0", b("-p", "0", "-n", "0"))
    add("bench", "-n -1", b("-n", "-1"))
    add("bench", "-d -5", b("-d", "-5"))
    add("bench", "-r 0", b("-r", "0"))
    add("bench", "-t 5000", b("-t", "5000"))
    add("bench", "--dtype f8", b("--dtype", "f8"), usage=True)
    add("bench", "--cache-type q8_0", b("--cache-type", "q8_0"), usage=True)
    add("bench", "--backend tpu", b("--backend", "tpu"), usage=True)
    add("bench", "-p 99999 (context 128)", b("-p", "99999"))
    add("bench", "-n 300 -d 100 (past the context)", b("-p", "8", "-n", "300", "-d", "100"))
    add("bench", "-p 100 -d 32 (past the context)", b("-p", "100", "-n", "0", "-d", "32"))
    add("bench", "-b 4 with -n 0 (no decode test)", b("-p", "8", "-n", "0", "-b", "4"))
    add("bench", "-o xml", b("-o", "xml"), usage=True)
    add("bench", "--device 1 (the cpu backend)", b("--device", "1"))
    huge = os.path.join(T, "huge.json")
    open(huge, "w").write(json.dumps({"model_type": "gpt2", "n_embd": 65536, "n_head": 1, "n_layer": 4096, "vocab_size": 50257, "n_positions": 1024}))
    add("bench", "--random a shape too big for memory", ["bench", "--random", huge, "-p", "8", "-n", "0"])
    add("bench", "--random gpt5", ["bench", "--random", "gpt5"], usage=True)
    add("bench", "both -m and --random", b("--random", "gpt2"), usage=True)
    add("bench", "-p abc", b("-p", "abc"), usage=True)
    add("bench", "--bogus-flag", b("--bogus-flag"), usage=True)

    add("bench", "stdout is /dev/full", b("-p", "8", "-n", "0", "-r", "1", "-t", "1"), stdout="/dev/full")

    # quantize / convert: nothing may be left at OUT (checked below: OUT never exists after these)
    OUTQ = os.path.join(T, "out.gguf")
    q8 = os.path.join(T, "q8.gguf")
    subprocess.run([EXE, "quantize", SHIPPED, q8, "--type", "q8_0"], capture_output=True, check=True)
    qz = lambda inp, out, *a: ["quantize", inp, out] + list(a)
    add("quantize", "--type q3_k", qz(SHIPPED, OUTQ, "--type", "q3_k"), usage=True)
    add("quantize", "--type missing", qz(SHIPPED, OUTQ), usage=True)
    add("quantize", "output missing", ["quantize", SHIPPED, "--type", "q8_0"], usage=True)
    add("quantize", "-t 5000", qz(SHIPPED, OUTQ, "--type", "q8_0", "-t", "5000"))
    add("quantize", "input does not exist", qz(os.path.join(T, "nope"), OUTQ, "--type", "q8_0"))
    add("quantize", "input directory without config.json", qz(tok_dir("q-empty", {}), OUTQ, "--type", "q8_0"))
    add("quantize", "input a file that is not GGUF", qz(os.path.join(SHIPPED, "config.json"), OUTQ, "--type", "q8_0"))
    add("quantize", "output in a missing directory", qz(SHIPPED, os.path.join(T, "nodir", "x.gguf"), "--type", "q8_0"))
    add("quantize", "output is the input", qz(q8, q8, "--type", "q8_0"))
    add("quantize", "output is the input's model.safetensors", qz(SHIPPED, os.path.join(SHIPPED, "model.safetensors"), "--type", "q8_0"))
    add("quantize", "output is a directory", qz(SHIPPED, T, "--type", "q8_0"))
    add("quantize", "Q8_0 input to q4_0 without --allow-requantize", qz(q8, OUTQ, "--type", "q4_0"))
    add("quantize", "sinusoidal positions (no GGUF key)", qz(os.path.join(ROOT, "tests", "fixtures", "models", "tiny-sinusoidal"), OUTQ, "--type", "q8_0"))
    add("quantize", "--output-tensor-type q9_0 (no such ggml type)", qz(SHIPPED, OUTQ, "--type", "q8_0", "--output-tensor-type", "q9_0"), usage=True)
    add("quantize", "--token-embedding-type iq2_xs (a type minigpt does not write)", qz(SHIPPED, OUTQ, "--type", "q8_0", "--token-embedding-type", "iq2_xs"))
    add("quantize", "--token-embedding-type q4_0 for 8-wide embeddings", qz(os.path.join(ROOT, "tests", "fixtures", "gguf", "gpt2-tiny-f32.gguf"), OUTQ, "--type", "q4_k_m", "--token-embedding-type", "q4_0"))
    add("quantize", "--tensor-type without =TYPE", qz(SHIPPED, OUTQ, "--type", "q4_k_m", "--tensor-type", "attn_qkv"), usage=True)
    add("quantize", "--tensor-type with a broken regular expression", qz(SHIPPED, OUTQ, "--type", "q4_k_m", "--tensor-type", "x[=q8_0"))
    # outputs that are not regular files: refused, never replaced (FIFOs in the scratch folder, so that a
    # regression could replace nothing of the machine's)
    fifo = os.path.join(T, "fifo.gguf")
    os.mkfifo(fifo)
    os.symlink(fifo, os.path.join(T, "link-to-fifo.gguf"))
    add("quantize", "output is a FIFO", qz(SHIPPED, fifo, "--type", "q8_0"))
    add("quantize", "output is a symbolic link to a FIFO", qz(SHIPPED, os.path.join(T, "link-to-fifo.gguf"), "--type", "q8_0"))
    add("convert", "output is a FIFO", ["convert", SHIPPED, fifo])
    text = os.path.join(T, "ppl.txt")
    with open(text, "w") as f:
        f.write(open(os.path.join(SHIPPED, "README.md")).read())
    pp = lambda *a: ["perplexity", "-m", SHIPPED, "-f", text, "--chunks", "2"] + list(a)
    add("perplexity", "--save-logits a FIFO", pp("--save-logits", fifo))
    add("perplexity", "--save-logits the text it scores", pp("--save-logits", text))
    add("perplexity", "--save-logits the model's config.json", pp("--save-logits", os.path.join(SHIPPED, "config.json")))
    add("perplexity", "--kl-top-k without --save-logits", pp("--kl-top-k", "5"), usage=True)
    add("perplexity", "no -f (nor --kl-divergence)", ["perplexity", "-m", SHIPPED], usage=True)
    add("perplexity", "--stride and --chunks both", pp("--stride", "32"), usage=True)
    add("perplexity", "--stride 0", ["perplexity", "-m", SHIPPED, "-f", text, "--stride", "0"])
    add("perplexity", "-c 99999 (context 128)", pp("-c", "99999"))
    add("perplexity", "--bogus-flag", pp("--bogus-flag"), usage=True)
    add("perplexity", "--kl-divergence a FIFO", ["perplexity", "-m", SHIPPED, "--kl-divergence", fifo])
    os.mkfifo(os.path.join(T, "fifo.png"))
    at = lambda *a: ["attention", "-m", SHIPPED, "-p", "hi", "-o", os.path.join(T, "att.png")] + list(a)
    add("attention", "no -p", ["attention", "-m", SHIPPED, "-o", os.path.join(T, "att.json")], usage=True)
    add("attention", "--head x", at("--layer", "0", "--head", "x"), usage=True)
    add("attention", "a .png without --layer", at(), usage=True)
    add("attention", "--layer 99 (the model has 4)", at("--layer", "99"))
    add("attention", "--bogus-flag", at("--bogus-flag"), usage=True)
    add("attention", "-o a FIFO", ["attention", "-m", SHIPPED, "-p", "hi", "--layer", "0", "--head", "0", "-o", os.path.join(T, "fifo.png")])
    own = model_dir("attn-own", base=SHIPPED)
    add("attention", "-o the model's own config.json", ["attention", "-m", own, "-p", "hi", "-o", os.path.join(own, "config.json")])
    add("attention", "-o a file of the --tokenizer directory", ["attention", "-m", SHIPPED, "--tokenizer", own, "-p", "hi", "-o", os.path.join(own, "tokenizer.json")])
    add("convert", "--outtype q8_0", ["convert", SHIPPED, OUTQ, "--outtype", "q8_0"], usage=True)
    add("convert", "output missing", ["convert", SHIPPED], usage=True)
    add("convert", "-t -1", ["convert", SHIPPED, OUTQ, "-t", "-1"])
    add("convert", "a GGUF file as input", ["convert", q8, OUTQ])
    add("convert", "relu activation (no GGUF key)", ["convert", os.path.join(ROOT, "tests", "fixtures", "models", "tiny-relu-legacy"), OUTQ])
    add("convert", "an OPT model (llama.cpp has no OPT architecture)", ["convert", os.path.join(ROOT, "tests", "fixtures", "models", "opt-prenorm"), OUTQ])
    add("convert", "gpt_bigcode with activation gelu (no GGUF key)", ["convert", os.path.join(ROOT, "tests", "fixtures", "models", "bigcode-mha"), OUTQ])
    add("quantize", "gpt_neox directory without tokenizer files", qz(os.path.join(ROOT, "tests", "fixtures", "models", "neox-parallel"), OUTQ, "--type", "q8_0"))

    # serve: a port another minigpt serve listens on (a server started here, stopped after the table)
    probe = __import__("socket").socket()
    probe.bind(("127.0.0.1", 0))
    busy = probe.getsockname()[1]
    probe.close()
    first = subprocess.Popen([EXE, "serve", "-m", SHIPPED, "--port", str(busy)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first.stderr.readline()  # "minigpt: serving ... on http://127.0.0.1:PORT": listening
    servers.append(first)
    sv = lambda *a: ["serve", "-m", SHIPPED] + list(a)
    add("serve", "--port that another minigpt serve listens on", sv("--port", str(busy)))
    add("serve", "--port 70000", sv("--port", "70000"))
    add("serve", "--port abc", sv("--port", "abc"), usage=True)
    add("serve", "--bogus-flag", sv("--bogus-flag"), usage=True)
    add("serve", "--host that does not resolve", sv("--host", "no-such-host.invalid", "--port", str(busy)))
    add("serve", "--parallel 0", sv("--parallel", "0"))
    add("serve", "--host ''", sv("--host", ""))
    add("serve", "--api-key '' (an unset variable)", sv("--port", "0", "--api-key", ""))
    add("serve", "--allowed-origins with a path", sv("--port", "0", "--allowed-origins", "http://localhost:3000/"))
    fifo_jinja = model_dir("fifo-jinja", base=SHIPPED)
    os.mkfifo(os.path.join(fifo_jinja, "chat_template.jinja"))
    add("serve", "chat_template.jinja is a FIFO", ["serve", "-m", fifo_jinja, "--port", "0"])
    add("serve", "tokenizer_config.json is a FIFO", ["serve", "-m", replaced("fifo-tokcfg", "tokenizer_config.json", "fifo", base=SHIPPED), "--port", "0"])

    # chat: a model without a chat template, and the templates --chat-template names
    chat_tiny = os.path.join(ROOT, "tests", "fixtures", "models", "chatml-tiny")
    add("chat", "a model without a chat template (the shipped model)", ["chat", "-m", SHIPPED], stdin=b"hi\n")
    add("chat", "--chat-template that does not exist", ["chat", "--chat-template", os.path.join(T, "none.jinja")],
        stdin=b"hi\n")
    bad_jinja = os.path.join(T, "bad.jinja")
    open(bad_jinja, "w").write("{% for m in messages %}{{ m.content }}")
    add("chat", "--chat-template that does not parse", ["chat", "--chat-template", bad_jinja], stdin=b"hi\n")
    add("chat", "--chat-template ''", ["chat", "--chat-template", ""], stdin=b"hi\n")
    no_system = os.path.join(T, "no-system.jinja")
    open(no_system, "w").write("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
                               "{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}")
    add("chat", "--system that the template refuses", ["chat", "--chat-template", no_system, "--system", "x"],
        stdin=b"hi\n")
    add("chat", "--temperature -1", ["chat", "-m", chat_tiny, "--temperature", "-1"], stdin=b"hi\n")
    add("chat", "--prompt-log in a directory that does not exist",
        ["chat", "-m", chat_tiny, "--prompt-log", os.path.join(T, "no", "log")], stdin=b"hi\n")

    # GGUF files (-m FILE.gguf): the mixed-type fixture with one field broken in place
    gg = lambda path: ["generate", "-m", path, "-p", "x", "-n", "2"]
    mix = open(GGUF_MIX, "rb").read()
    trunc = lambda n: (lambda b, lay: b.__delitem__(slice(n, None)))
    kv = lambda key, i: (lambda lay: lay["kv"][key][i])
    ti = lambda name, i: (lambda lay: lay["tensors"][name][i])
    add("gguf", "truncated to half", gg(gguf_edit("g-half", trunc(len(mix) // 2))))
    add("gguf", "truncated inside the header (20 bytes)", gg(gguf_edit("g-20", trunc(20))))
    add("gguf", "magic GGUX", gg(gguf_edit("g-magic", put("<4s", 0, b"GGUX"))))
    add("gguf", "version 1", gg(gguf_edit("g-v1", put("<I", 4, 1))))
    add("gguf", "version 99", gg(gguf_edit("g-v99", put("<I", 4, 99))))
    add("gguf", "n_tensors = 2^62", gg(gguf_edit("g-ntensors", put("<Q", 8, 2 ** 62))))
    add("gguf", "n_kv = 2^62", gg(gguf_edit("g-nkv", put("<Q", 16, 2 ** 62))))
    add("gguf", "a key's length 2^63", gg(gguf_edit("g-keylen", put("<Q", kv("general.architecture", 0), 2 ** 63))))
    add("gguf", "a value of type 99", gg(gguf_edit("g-vtype", put("<I", kv("gpt2.block_count", 1), 99))))
    add("gguf", "general.architecture 'gptx'", gg(gguf_edit("g-arch", put("<4s", lambda lay: lay["kv"]["general.architecture"][2] + 8, b"gptx"))))
    add("gguf", "gpt2.block_count 3 (the file has 2)", gg(gguf_edit("g-layers", put("<I", kv("gpt2.block_count", 2), 3))))
    add("gguf", "gpt2.embedding_length 255", gg(gguf_edit("g-embd", put("<I", kv("gpt2.embedding_length", 2), 255))))
    add("gguf", "gpt2.context_length 0", gg(gguf_edit("g-ctx", put("<I", kv("gpt2.context_length", 2), 0))))
    add("gguf", "a tensor with 5 dimensions", gg(gguf_edit("g-ndims", put("<I", ti("output_norm.bias", 0), 5))))
    add("gguf", "a tensor of 2^40 x 2^40", gg(gguf_edit("g-ne", lambda b, lay: struct.pack_into("<QQ", b, lay["tensors"]["token_embd.weight"][1], 2 ** 40, 2 ** 40))))
    add("gguf", "rows not whole blocks (Q8_0 row of 100)", gg(gguf_edit("g-rows", put("<Q", ti("blk.0.attn_qkv.weight", 1), 100))))
    add("gguf", "unknown tensor type 99", gg(gguf_edit("g-type99", put("<I", ti("token_embd.weight", 2), 99))))
    add("gguf", "tensor type IQ2_XXS (not read)", gg(gguf_edit("g-iq2", put("<I", ti("output_norm.bias", 2), 16))))
    add("gguf", "tensor offset not aligned", gg(gguf_edit("g-align", lambda b, lay: struct.pack_into("<Q", b, lay["tensors"]["output_norm.bias"][3], struct.unpack_from("<Q", b, lay["tensors"]["output_norm.bias"][3])[0] + 1))))
    add("gguf", "tensor offset past the end", gg(gguf_edit("g-offset", put("<Q", ti("output_norm.bias", 3), 2 ** 40))))
    add("gguf", "two tensors at the same offset", gg(gguf_edit("g-overlap", lambda b, lay: struct.pack_into("<Q", b, lay["tensors"]["output_norm.bias"][3], struct.unpack_from("<Q", b, lay["tensors"]["output_norm.weight"][3])[0]))))
    add("gguf", "a Q8_0 block scale is NaN", gg(gguf_edit("g-nan", lambda b, lay: struct.pack_into("<H", b, lay["data"] + struct.unpack_from("<Q", b, lay["tensors"]["blk.0.attn_qkv.weight"][3])[0], 0x7E00))))
    add("gguf", "a norm weight is +inf", gg(gguf_edit("g-inf", lambda b, lay: struct.pack_into("<f", b, lay["data"] + struct.unpack_from("<Q", b, lay["tensors"]["output_norm.weight"][3])[0], float("inf")))))
    add("gguf", "token_embd.weight renamed (missing)", gg(gguf_edit("g-noembd", lambda b, lay: b.__setitem__(slice(lay["tensors"]["token_embd.weight"][0] - 17, lay["tensors"]["token_embd.weight"][0]), b"token_embX.weight"))))
    add("gguf", "tokenizer.ggml.model 'bert'", gg(gguf_edit("g-tok", lambda b, lay: b.__setitem__(slice(lay["kv"]["tokenizer.ggml.model"][2] + 8, lay["kv"]["tokenizer.ggml.model"][2] + 12), b"bert"))))

    # llm.c checkpoints (-m FILE.bin): the F32 fixture (maxT 64, V 300, Vp 384, L 2, NH 3, C 24) broken
    lc = lambda path, *a: ["generate", "-m", path, "--tokenizer", BYTELEVEL, "-p", "x", "-n", "2"] + list(a)
    n = os.path.getsize(LLMC)
    add("llmc", "truncated to half", lc(llmc_edit("l-half", cut=n // 2)))
    add("llmc", "the header alone (1024 bytes)", lc(llmc_edit("l-header", cut=1024)))
    add("llmc", "truncated inside the header (8 bytes)", lc(llmc_edit("l-8", cut=8)))
    add("llmc", "one byte after the parameters", lc(llmc_edit("l-extra", extra=b"x")))
    add("llmc", "magic 12345", lc(llmc_edit("l-magic", {0: 12345})))
    add("llmc", "the debug state file's magic", lc(llmc_edit("l-state", {0: 20240327})))
    add("llmc", "the tokenizer file's magic", lc(llmc_edit("l-tok", {0: 20240328})))
    add("llmc", "version 4 (older BF16 layout)", lc(llmc_edit("l-v4", {1: 4})))
    add("llmc", "version 99", lc(llmc_edit("l-v99", {1: 99})))
    add("llmc", "version 5 (BF16) with F32 data", lc(llmc_edit("l-v5", {1: 5})))
    add("llmc", "V 385 > Vp 384", lc(llmc_edit("l-vp", {3: 385})))
    add("llmc", "C = 0", lc(llmc_edit("l-c0", {6: 0})))
    add("llmc", "L = -1", lc(llmc_edit("l-lneg", {4: -1})))
    add("llmc", "NH = 5 (C 24 not divisible)", lc(llmc_edit("l-nh", {5: 5})))
    add("llmc", "C = 2^31 - 1", lc(llmc_edit("l-cmax", {6: 2 ** 31 - 1})))
    add("llmc", "every field at its cap (sizes ~2^58 bytes)", lc(llmc_edit("l-caps", {2: 2 ** 20, 3: 2 ** 24, 4: 4096, 5: 2 ** 20, 6: 2 ** 20, 7: 2 ** 24})))
    add("llmc", "a NaN in qkvw of layer 1", lc(llmc_edit("l-nan", poke=(384 * 24 + 64 * 24 + 4 * 24 + 3 * 24 * 24 + 5, float("nan")))))
    add("llmc", "generate without --tokenizer", ["generate", "-m", LLMC, "-p", "x"])
    add("llmc", "tokenize without --tokenizer", ["tokenize", "-m", LLMC, "x"])
    lt = lambda tok: ["generate", "-m", LLMC, "--tokenizer", tok, "-p", "x", "-n", "2"]
    add("llmc", "--tokenizer a missing directory", lt(os.path.join(T, "nope")))
    add("llmc", "--tokenizer GPT-2's (50257 tokens, the model 300)", lt(GPT2TOK))

    add("info", "--bogus-flag", ["info", "--bogus-flag"], usage=True)
    add("info", "-m without its value", ["info", "-m"], usage=True)
    add("info", "stdout is /dev/full", info(SHIPPED), stdout="/dev/full")
    add("cli", "--version > /dev/full", ["--version"], stdout="/dev/full")
    add("cli", "unknown command", ["frobnicate"], usage=True)
    add("cli", "no command", [], usage=True)

    print("| group | bad input | kind | exit | stderr lines | stdout bytes | what minigpt says (stderr) |")
    print("|---|---|---|---:|---:|---:|---|")
    bad = 0
    for group, desc, args, stdin, stdout, kind in cases:
        rc, out, err = run(args, stdin, stdout)
        lines = err.splitlines()
        msg = " / ".join(lines).replace(T, "$TMP").replace(ROOT + "/", "").replace("|", "\\|")
        msg = msg.replace(":%d" % busy, ":$PORT")
        msg = msg.replace(os.path.realpath(GPT2TOK), "gpt2").replace(GPT2TOK.replace(ROOT + "/", ""), "gpt2")
        want = 2 if kind == "usage" else 1
        ok = rc == want and len(lines) == 1 and len(out) == 0 and not os.path.exists(os.path.join(T, "out.gguf"))
        bad += not ok
        print("| %s | %s | %s | %d | %d | %d | %s`%s` |" % (group, desc, kind, rc, len(lines), len(out),
              "" if ok else "**NOT ONE LINE, OR NOT EXIT %d** " % want, msg))
    for srv in servers:
        srv.terminate()
        srv.wait()
    shutil.rmtree(T, ignore_errors=True)
    print("\n%d cases, %d not one line with the exit status of their kind" % (len(cases), bad), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
