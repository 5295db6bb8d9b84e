#!/usr/bin/env python3
"""Reference data for minigpt's quantizers, GGUF writer, `minigpt convert` and `minigpt quantize`.

Writes tests/fixtures/quantize/:
  blocks.gguf        `x`: 16 rows of 256 float32 values (seeded random normal and uniform rows, a constant row, an
                     all-zero row, one with a zero sub-block, tiny values (1e-30: the eps paths), huge ones (1e6,
                     1e9: F16 scales overflow to inf), mixed magnitudes (1e-6 .. 1e4), exact rounding ties, a
                     single outlier), and for each type the bytes the reference makes of `x`:
                       Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 F16 BF16   gguf.quants.quantize (the `gguf` package, numpy)
                       Q4_K Q5_K Q6_K                       llama.cpp's quantize_row_q{4,5,6}_K_ref (libggml-base,
                                                            called through ctypes)
                     The script also checks that libggml's quantize_row_{q8_0,q4_0,q4_1,q5_0,q5_1}_ref give the
                     same bytes as the gguf package (they must: the package was written to match them).
  gpt2-tiny-hf/      config.json and model.safetensors of the random GPT-2 from which
                     tools/reference/make_gguf_model_reference.py made tests/fixtures/gguf/gpt2-tiny-f32.gguf (same seed,
                     same transformers): the HF input of the `minigpt convert` test. The script converts it again
                     with llama.cpp's convert_hf_to_gguf.py and checks that every tensor equals the committed file's.
  llama-quantize-types.json
                     for five GPT-2 shapes (the real 124M file, the 8-wide gpt2-tiny-f32.gguf, and zero-weight files
                     of the shipped model's shape, 128 wide, of gpt2-xl's width, 1600, with 6 layers, and a 256-wide
                     one with an untied head, output.weight), the type llama-quantize --dry-run chooses for every
                     tensor under each preset minigpt offers and under OPTION_CASES (a preset with
                     --output-tensor-type, --token-embedding-type, --pure, --leave-output-tensor), and how many
                     tensors fell back. (--types-only remakes only this file.)

With --check-cli BUILD/minigpt [--check-hf DIR...] it only runs minigpt (not needed by the tests): `convert` and `quantize` outputs
are read back with gguf.GGUFReader (every key and tensor), and every Q8_0 / Q4_0 tensor minigpt wrote is compared
byte for byte with gguf.quants.quantize of the F32 tensor of `minigpt convert --outtype f32` of the same model.

Needs numpy, gguf (0.19.0), torch + transformers (gpt2-tiny-hf), and llama.cpp: its source (convert_hf_to_gguf.py)
and a build (libggml-base.so, llama-quantize), e.g. bench/peer.sh's:

    python3 tools/reference/make_quantize_reference.py --llama-cpp /path/to/llama_cpp_python-X/vendor/llama.cpp \\
        --llama-build ~/.cache/minigpt-peer/llama.cpp/build [--gpt2-f32 ~/.cache/minigpt-peer/gpt2-124m-f32.gguf]
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "quantize")
TOK = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
N = 256  # values per row: one K super-block, eight 32-blocks

# llama-quantize's type names, the presets minigpt offers
PRESETS = ["Q4_0", "Q8_0", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "F16", "BF16", "F32"]
# llama-quantize's type-changing options, with a preset each (every model of make_type_choices is run with each;
# the 8-wide gpt2-tiny cannot hold the Q4_0 named for its embeddings: --dry-run lists it all the same, a real run
# corrupts llama-quantize's heap, and minigpt refuses it, tests/test_gguf_convert.cpp)
OPTION_CASES = [
    ("Q8_0", ["--output-tensor-type", "f16"]),
    ("Q8_0", ["--token-embedding-type", "bf16"]),
    ("Q4_K_M", ["--output-tensor-type", "q8_0"]),
    ("Q4_K_M", ["--token-embedding-type", "q4_0", "--output-tensor-type", "q8_0"]),
    ("Q4_K_M", ["--output-tensor-type", "q6_k"]),
    ("Q4_K_M", ["--pure"]),
    ("Q5_K_M", ["--pure", "--output-tensor-type", "q8_0"]),
    ("Q6_K", ["--pure"]),
    ("Q4_K_M", ["--leave-output-tensor"]),
    ("Q4_0", ["--leave-output-tensor", "--output-tensor-type", "q5_1"]),
    ("F16", ["--token-embedding-type", "q8_0"]),
    ("F16", ["--output-tensor-type", "q8_0"]),
    ("BF16", ["--pure", "--token-embedding-type", "f32"]),
    ("Q4_K_M", ["--tensor-type", "attn_qkv=q8_0"]),
    ("Q4_K_M", ["--tensor-type", "ffn=q5_k", "--tensor-type", "ffn_up=q8_0"]),
    ("Q4_0", ["--tensor-type", r"blk\.1\.=q8_0", "--tensor-type", "token_embd=q4_0"]),
    ("Q8_0", ["--tensor-type", "ATTN_OUTPUT=f16", "--pure"]),
    ("Q5_K_M", ["--tensor-type", "^blk\\.[0-3]\\.ffn_down=q4_k", "--output-tensor-type", "q8_0"]),
    ("F16", ["--tensor-type", "attn_qkv=q8_0"]),
]


def find_lib(build, name):
    for d, _, files in os.walk(build):
        if name in files:
            return os.path.join(d, name)
    sys.exit(f"{name} not found under {build}")


def rows():
    rng = np.random.default_rng(20261124)
    r = []
    r.append(rng.standard_normal(N))                       # 0 random normal
    r.append(rng.standard_normal(N) * 0.02)                # 1 GPT-2-like weights
    r.append(rng.uniform(-1, 1, N))                        # 2 uniform
    r.append(rng.uniform(0.5, 3, N))                       # 3 all positive (min > 0 paths)
    r.append(-rng.uniform(0.5, 3, N))                      # 4 all negative
    r.append(np.full(N, 0.3))                              # 5 constant
    r.append(np.zeros(N))                                  # 6 all zero
    x = rng.standard_normal(N)
    x[32:64] = 0
    x[200:216] = 0
    r.append(x)                                            # 7 a zero 32-block and a zero 16-group
    r.append(rng.standard_normal(N) * 1e-30)               # 8 tiny: below GROUP_MAX_EPS
    r.append(rng.standard_normal(N) * 1e6)                 # 9 huge: Q8_0 d fits F16
    r.append(rng.standard_normal(N) * 1e9)                 # 10 huger: scales overflow F16 to inf
    r.append(rng.standard_normal(N) * np.exp(rng.uniform(np.log(1e-6), np.log(1e4), N)))  # 11 mixed magnitudes
    x = np.tile(np.array([127, 0.5, 1.5, -2.5, 63.5, -0.5, 3.5, -127], dtype=np.float64), N // 8)
    r.append(x)                                            # 12 ties for round-half-away (Q8_0 d = 1)
    x = np.tile(np.array([-8, 0.5, 1.5, -2.5, 3.5, -4.5, 7.5, 6.5], dtype=np.float64), N // 8)
    r.append(x)                                            # 13 ties for Q4_0 (d = 1)
    x = rng.standard_normal(N) * 0.01
    x[77] = 40.0
    r.append(x)                                            # 14 one outlier
    r.append(rng.laplace(size=N))                          # 15 heavy tails
    return np.stack(r).astype(np.float32)


def ggml_ref(lib, fn, qtype, x):
    f = getattr(lib, fn)
    f.restype = None
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    out = np.zeros((x.shape[0], x.shape[1] // block * size), dtype=np.uint8)
    for i in range(x.shape[0]):
        row = np.ascontiguousarray(x[i])
        f(row.ctypes.data, out[i].ctypes.data, row.size)
    return out


def make_blocks(build):
    lib = ctypes.CDLL(find_lib(build, "libggml-base.so"))
    x = rows()
    w = gguf.GGUFWriter(os.path.join(OUT, "blocks.gguf"), "minigpt-quantize-test")
    w.add_string("minigpt.generator", "tools/reference/make_quantize_reference.py")
    w.add_tensor("x", x)
    with np.errstate(all="ignore"):
        for qtype in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
            mine = gguf.quants.quantize(x, qtype)
            ref = ggml_ref(lib, f"quantize_row_{qtype.name.lower()}_ref", qtype, x)
            same = np.array_equal(mine, ref)
            print(f"{qtype.name}: gguf.quants {'==' if same else '!='} libggml quantize_row_{qtype.name.lower()}_ref")
            assert same, qtype.name
            w.add_tensor(qtype.name, mine, raw_dtype=qtype)
        for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
            ref = ggml_ref(lib, f"quantize_row_{qtype.name.lower().replace('_k', '_K')}_ref", qtype, x)
            w.add_tensor(qtype.name, ref, raw_dtype=qtype)
        w.add_tensor("F16", gguf.quants.quantize(x, T.F16))
        w.add_tensor("BF16", gguf.quants.quantize(x, T.BF16), raw_dtype=T.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", os.path.join(OUT, "blocks.gguf"), os.path.getsize(os.path.join(OUT, "blocks.gguf")), "bytes")


def tiny_hf_dir(dst):
    """The random GPT-2 of tools/reference/make_gguf_model_reference.py (same seed and config), saved by transformers."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(20261123)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=8, n_positions=32, n_ctx=32, vocab_size=50257,
                     initializer_range=0.5)
    GPT2LMHeadModel(cfg).eval().save_pretrained(dst)


def with_tokenizer(hf, dst):
    """A copy of the HF dir `hf` with the GPT-2 tokenizer files, as the converter needs them."""
    os.makedirs(dst)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(hf, f), dst)
    for f in os.listdir(TOK):
        if f.endswith((".json", ".txt")):
            shutil.copy(os.path.join(TOK, f), dst)


def make_tiny_hf(llama_cpp):
    out = os.path.join(OUT, "gpt2-tiny-hf")
    with tempfile.TemporaryDirectory() as tmp:
        hf = os.path.join(tmp, "hf")
        tiny_hf_dir(hf)
        os.makedirs(out, exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(hf, f), os.path.join(out, f))
        # The converter on it must give the committed fixture's tensors: then this is the HF model that
        # fixture was made from.
        conv = os.path.join(tmp, "gpt2-tiny")
        with_tokenizer(out, conv)
        gg = os.path.join(tmp, "again.gguf")
        subprocess.run([sys.executable, os.path.join(llama_cpp, "convert_hf_to_gguf.py"), conv, "--outfile", gg,
                        "--outtype", "f32"], check=True, capture_output=True)
        a = gguf.GGUFReader(gg)
        b = gguf.GGUFReader(os.path.join(ROOT, "tests", "fixtures", "gguf", "gpt2-tiny-f32.gguf"))
        assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
        for x, y in zip(a.tensors, b.tensors):
            assert x.tensor_type == y.tensor_type and np.array_equal(x.data, y.data), x.name
    print("wrote", out, "(the converter gives the committed gpt2-tiny-f32.gguf's tensors from it)")


def zero_gpt2_gguf(path, n_layer, n_embd, n_ctx, untied=False):
    """A GPT-2 GGUF of the given shape with zero weights (matrices F16, the rest F32) and GPT-2's tokenizer:
    all llama-quantize --dry-run needs to choose types. untied: with its own head, `output.weight`."""
    tiny = gguf.GGUFReader(os.path.join(ROOT, "tests", "fixtures", "gguf", "gpt2-tiny-f32.gguf"))
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(4 * n_embd)
    w.add_head_count(n_embd // 64)
    w.add_layer_norm_eps(1e-5)
    w.add_file_type(1)
    for k, f in tiny.fields.items():
        if k.startswith("tokenizer."):
            v = f.contents()
            if k == "tokenizer.ggml.token_type":
                w.add_array(k, v)
            elif isinstance(v, list):
                w.add_array(k, v)
            elif isinstance(v, bool):
                w.add_bool(k, v)
            elif isinstance(v, int):
                w.add_uint32(k, v)
            else:
                w.add_string(k, v)
    V, C, F = 50257, n_embd, 4 * n_embd
    def t(name, shape):
        w.add_tensor(name, np.zeros(shape, dtype=np.float16 if len(shape) == 2 and name != "position_embd.weight"
                                    else np.float32))
    t("token_embd.weight", (V, C))
    t("position_embd.weight", (n_ctx, C))
    for i in range(n_layer):
        b = f"blk.{i}."
        for n, shape in (("attn_norm.weight", (C,)), ("attn_norm.bias", (C,)), ("attn_qkv.weight", (3 * C, C)),
                         ("attn_qkv.bias", (3 * C,)), ("attn_output.weight", (C, C)), ("attn_output.bias", (C,)),
                         ("ffn_norm.weight", (C,)), ("ffn_norm.bias", (C,)), ("ffn_up.weight", (F, C)),
                         ("ffn_up.bias", (F,)), ("ffn_down.weight", (C, F)), ("ffn_down.bias", (C,))):
            t(b + n, shape)
    t("output_norm.weight", (C,))
    t("output_norm.bias", (C,))
    if untied:
        t("output.weight", (V, C))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dry_run(quantize_bin, lib_dir, path, preset, options=()):
    """llama-quantize --dry-run's choice for every tensor: [(name, type)] in its order, and its fallback count."""
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([quantize_bin, "--dry-run", *options, path, os.path.join(tmp, "out.gguf"), preset, "1"],
                           env=env, capture_output=True, text=True)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        sys.exit(f"llama-quantize failed on {path} {preset}:\n{log[-2000:]}")
    out = []
    for line in log.splitlines():
        m = re.match(r"\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[[^\]]*\], type =\s*(\S+), (.*)$", line)
        if not m:
            continue
        name, cur, rest = m.groups()
        q = re.search(r"\((\w+)\)\s*$", rest)
        out.append((name, (q.group(1) if q and "->" in rest else cur).upper()))
    m = re.search(r"(\d+) of (\d+) tensor\(s\) required fallback", log)
    return out, int(m.group(1)) if m else 0


def make_type_choices(build, gpt2_f32):
    quantize_bin = find_lib(build, "llama-quantize")
    lib_dir = os.path.dirname(find_lib(build, "libllama.so"))
    result = {"generator": "tools/reference/make_quantize_reference.py", "tool": "llama-quantize --dry-run", "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        models = [("gpt2-124m", gpt2_f32, 12),
                  ("gpt2-tiny", os.path.join(ROOT, "tests", "fixtures", "gguf", "gpt2-tiny-f32.gguf"), 2)]
        for name, n_layer, n_embd, n_ctx, untied in (("shipped-char-shape", 4, 128, 128, False),
                                                     ("gpt2-xl-width", 6, 1600, 64, False),
                                                     ("untied-head", 8, 256, 64, True)):
            p = os.path.join(tmp, name + ".gguf")
            zero_gpt2_gguf(p, n_layer, n_embd, n_ctx, untied)
            models.append((name, p, n_layer))
        for name, path, n_layer in models:
            r = gguf.GGUFReader(path)
            info = {t.name: ([int(x) for x in t.shape], t.tensor_type.name) for t in r.tensors}
            entry = {"n_layer": n_layer, "tensors": None, "presets": {}, "fallbacks": {}}
            for preset in PRESETS:
                choice, n_fallback = dry_run(quantize_bin, lib_dir, path, preset)
                names = [n for n, _ in choice]
                if entry["tensors"] is None:
                    entry["tensors"] = [[n, info[n][0], info[n][1]] for n in names]
                assert names == [t[0] for t in entry["tensors"]]
                entry["presets"][preset] = [ty for _, ty in choice]
                entry["fallbacks"][preset] = n_fallback
            # llama-quantize's options that change the types, each with the preset it goes with: the key is
            # "PRESET OPTION..." as on its command line
            for preset, options in OPTION_CASES:
                choice, n_fallback = dry_run(quantize_bin, lib_dir, path, preset, options)
                assert [n for n, _ in choice] == [t[0] for t in entry["tensors"]]
                key = " ".join([preset, *options])
                entry["presets"][key] = [ty for _, ty in choice]
                entry["fallbacks"][key] = n_fallback
            result["models"][name] = entry
            print(name, {p: sorted(set(v)) for p, v in entry["presets"].items()})
    with open(os.path.join(OUT, "llama-quantize-types.json"), "w") as f:
        json.dump(result, f, indent=0)


def check_cli(minigpt, hf_dirs):
    """minigpt's convert/quantize outputs read back by gguf.GGUFReader; its Q8_0 / Q4_0 tensors equal to
    gguf.quants.quantize of the F32 tensors of its own `convert --outtype f32` (itself byte-identical to the
    converter's output: tests/test_gguf_convert.cpp)."""
    with tempfile.TemporaryDirectory() as tmp:
        for hf in hf_dirs:
            base = os.path.join(tmp, os.path.basename(hf.rstrip("/")))
            f32 = base + "-f32.gguf"
            subprocess.run([minigpt, "convert", hf, f32, "--outtype", "f32"], check=True, capture_output=True)
            ref = {t.name: t for t in gguf.GGUFReader(f32).tensors}
            for preset in ("q8_0", "q4_0", "q4_k_m", "q6_k", "f16", "bf16"):
                out = f"{base}-{preset}.gguf"
                subprocess.run([minigpt, "quantize", hf, out, "--type", preset], check=True, capture_output=True)
                r = gguf.GGUFReader(out)
                n_kv = sum(1 for k in r.fields if not k.startswith("GGUF."))
                same = 0
                for t in r.tensors:
                    assert t.name in ref, t.name
                    if t.tensor_type in (T.Q8_0, T.Q4_0):
                        x = np.asarray(ref[t.name].data, dtype=np.float32)
                        want = gguf.quants.quantize(x, t.tensor_type)
                        assert np.array_equal(np.asarray(t.data).reshape(-1), want.reshape(-1)), (out, t.name)
                        same += 1
                types = sorted({t.tensor_type.name for t in r.tensors})
                print(f"{os.path.basename(out)}: gguf.GGUFReader reads {n_kv} keys, {len(r.tensors)} tensors "
                      f"({', '.join(types)}); {same} Q8_0/Q4_0 tensors == gguf.quants.quantize")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", help="llama.cpp source folder (has convert_hf_to_gguf.py)")
    ap.add_argument("--llama-build", help="llama.cpp build folder (libggml-base.so, llama-quantize)")
    ap.add_argument("--gpt2-f32", default=os.path.expanduser("~/.cache/minigpt-peer/gpt2-124m-f32.gguf"),
                    help="GPT-2 124M as convert_hf_to_gguf.py --outtype f32 writes it")
    ap.add_argument("--check-cli", metavar="MINIGPT", help="only check minigpt's convert/quantize outputs")
    ap.add_argument("--check-hf", nargs="*", default=[], help="more HF directories for --check-cli")
    ap.add_argument("--types-only", action="store_true", help="only remake llama-quantize-types.json")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if not args.check_cli and not (args.llama_build and (args.llama_cpp or args.types_only)):
        ap.error("--llama-cpp and --llama-build are needed to make the fixtures (--llama-build for --types-only)")
    if args.check_cli:
        hf = [os.path.join(ROOT, "models", "shakespeare-char")] + args.check_hf
        check_cli(os.path.abspath(args.check_cli), hf)
        return
    if not args.types_only:
        make_blocks(args.llama_build)
        make_tiny_hf(args.llama_cpp)
    make_type_choices(args.llama_build, args.gpt2_f32)


if __name__ == "__main__":
    main()
