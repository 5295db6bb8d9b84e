#!/usr/bin/env python3
"""Small GGUF files for minigpt's GGUF reader tests, written and read back with the `gguf` package
(llama.cpp's own Python library: gguf.GGUFWriter, gguf.GGUFReader, gguf.quants).

Writes tests/fixtures/gguf/:
  mixed.gguf       metadata of every value type (scalars, strings with UTF-8, arrays of numbers and of
                   strings, a nested array) and tensors of types F32, F16, BF16, Q8_0, Q4_0 (quantized from seeded
                   random F32 data with gguf.quants.quantize) and Q4_K, Q6_K (random bytes: gguf.quants
                   has no K-quant quantizer), of 1 to 3 dimensions.
  aligned64.gguf   the same tensors with general.alignment = 64.
  quants.gguf      for each type minigpt dequantizes (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): a
                   tensor `<type>` of 3 x 512 values from random bytes (every bit pattern; the f16 scale
                   fields set to finite random values) and `<type>.expected`, F32, what
                   gguf.quants.dequantize makes of it.
  expected.json    for mixed.gguf and aligned64.gguf, what gguf.GGUFReader reads back: version, alignment, data offset, every
                   metadata key with its type and value, every tensor's name, type, ne (innermost first),
                   absolute offset and byte count, and the FNV-1a 64 hash of its bytes.

Re-run from the repository root (deterministic; needs gguf, numpy):

    python3 tools/reference/make_gguf_reference.py
"""

import json
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def tensors():
    rng = np.random.default_rng(7)
    out = []
    for name, shape, qtype in [
        ("token_embd.weight", (16, 32), T.F32),
        ("blk.0.attn_norm.weight", (32,), T.F32),
        ("blk.0.attn_qkv.weight", (96, 32), T.F16),
        ("blk.0.attn_output.weight", (32, 32), T.BF16),
        ("blk.0.ffn_up.weight", (64, 32), T.Q8_0),
        ("blk.0.ffn_down.weight", (32, 64), T.Q4_0),
        ("blk.0.k_quant.weight", (4, 256), T.Q4_K),
        ("output.weight", (2, 2, 256), T.Q6_K),
    ]:
        data = rng.standard_normal(shape).astype(np.float32)
        if qtype == T.F32:
            out.append((name, data, None))
        elif qtype == T.F16:
            out.append((name, data.astype(np.float16), None))
        elif qtype in (T.Q4_K, T.Q6_K):
            # gguf.quants has no K-quant quantizer: random bytes of the block layout (the reader does not
            # look inside blocks; dequantization fixtures come with the quantization work)
            block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
            byte_shape = shape[:-1] + (shape[-1] // block * nbytes,)
            out.append((name, rng.integers(0, 256, size=byte_shape, dtype=np.uint8), qtype))
        else:
            out.append((name, gguf.quants.quantize(data, qtype), qtype))
    return out


def write(path, alignment=None):
    w = gguf.GGUFWriter(path, "gpt2")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_block_count(1)
    w.add_head_count(4)
    w.add_layer_norm_eps(1e-5)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 2**62)
    w.add_int64("test.i64", -(2**62))
    w.add_float32("test.f32", 0.1)
    w.add_float64("test.f64", 1e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo \u2603 \U0001F600")
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_str", ["a", "", "Ġthe"])
    w.add_array("test.nested", [[1, 2], [3]])
    for name, data, qtype in tensors():
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def describe(path):
    r = gguf.GGUFReader(path)
    meta = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = f.types[1] if len(f.types) > 1 else None
            if et == gguf.GGUFValueType.STRING:
                value = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            elif et == gguf.GGUFValueType.ARRAY:
                value = None  # nested: the C++ test checks the shape it knows
            else:
                value = [f.parts[i].tolist()[0] for i in f.data]
            meta[f.name] = {"type": vt.name.lower(), "elem": et.name.lower() if et else None, "value": value}
        elif vt == gguf.GGUFValueType.STRING:
            meta[f.name] = {"type": "string", "value": bytes(f.parts[f.data[0]]).decode("utf-8")}
        else:
            v = f.parts[f.data[0]].tolist()[0]
            meta[f.name] = {"type": vt.name.lower(), "value": v}
    ts = []
    for t in r.tensors:
        raw = np.asarray(t.data).tobytes()
        ts.append({"name": t.name, "type": t.tensor_type.name, "type_id": int(t.tensor_type),
                   "ne": [int(x) for x in t.shape], "offset": int(t.data_offset), "nbytes": int(t.n_bytes),
                   "fnv1a64": fnv1a64(raw)})
    version = int(r.fields["GGUF.version"].parts[-1][0])
    return {"version": version, "alignment": int(r.alignment), "data_offset": int(r.data_offset),
            "metadata": meta, "tensors": ts}


# Byte offsets of the f16 fields (scales, mins) in each type's block.
HALF_FIELDS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q4_K: [0, 2],
               T.Q5_K: [0, 2], T.Q6_K: [208]}


def write_quants(path):
    rng = np.random.default_rng(11)
    w = gguf.GGUFWriter(path, "gpt2")
    for qtype, halves in HALF_FIELDS.items():
        block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
        rows, cols = 3, 512
        raw = rng.integers(0, 256, size=(rows * cols // block, nbytes), dtype=np.uint8)
        for off in halves:
            h = (rng.standard_normal(raw.shape[0]) * 0.05).astype(np.float16)
            raw[:, off:off + 2] = h.view(np.uint8).reshape(-1, 2)
        raw = raw.reshape(rows, cols // block * nbytes)
        expected = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        assert expected.shape == (rows, cols) and np.isfinite(expected).all()
        w.add_tensor(qtype.name, raw, raw_dtype=qtype)
        w.add_tensor(qtype.name + ".expected", expected)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    write_quants(os.path.join(OUT, "quants.gguf"))
    expected = {"generator": "tools/reference/make_gguf_reference.py", "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0"}
    for name, alignment in [("mixed.gguf", None), ("aligned64.gguf", 64)]:
        path = os.path.join(OUT, name)
        write(path, alignment)
        expected[name] = describe(path)
        print(name, os.path.getsize(path), "bytes,", len(expected[name]["tensors"]), "tensors")
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
