#!/usr/bin/env python3
"""Encoding speed of each tokenizer minigpt reads against its reference implementation: build/bench_tokenizer
(minigpt, 1 thread, median of RUNS) and Hugging Face `tokenizers` (or `sentencepiece` for tokenizer.model and
llama2.c's tokenizer.bin), one call on the whole file each, single-threaded, median of RUNS, in MB/s.

Usage: python3 bench/compare_tokenizers.py [--runs 9] [--build build] [--file FILE ...]
       (files: tinyshakespeare.txt and the tokenizer corpus's texts, joined and repeated to ~1 MB)

Run it on a quiet machine (no compiler, no other benchmark): the figures are meaningless while other jobs share
the cores. Prints one Markdown table, a row per tokenizer and file: minigpt MB/s, reference MB/s, their ratio,
and whether the ids are equal (minigpt's are checked against the reference's on every file).

Tokenizers: the fixtures (GPT-2; the trained Llama 3, Qwen2 and SentencePiece ones of
tools/reference/make_spm_llama3_qwen2_tokenizers.py) and the real vocabularies of llama.cpp's GGUF files in
tests/fixtures/ggml-vocab/ (Llama 3, Qwen2, Llama 2 (SentencePiece), StarCoder, GPT-NeoX), for which the reference
is `tokenizers` over the same tokens and merges with the family's tokenizer.json structure.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
TOK = os.path.join(FIX, "tokenizer")
VOCAB = os.path.join(FIX, "ggml-vocab")

sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import make_spm_llama3_qwen2_tokenizers as ref  # noqa: E402  (the regexes and the GGUF reader's pieces)


def gguf_reference(path, kind):
    """tokenizers over a GGUF file's tokens and merges (or scores), with the structure of the family's
    tokenizer.json."""
    import gguf
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    tokens = strings("tokenizer.ggml.tokens")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    if kind == "spm":
        # The merges the scores imply, highest score first (the classic SentencePieceExtractor; transformers
        # 5.23's generate_merges orders them by id, which puts Llama's "▁▁" (-1e9) first).
        f = r.fields["tokenizer.ggml.scores"]
        scores = [float(f.parts[i][0]) for i in f.data]
        normal = {t: i for i, t in enumerate(tokens) if types[i] in (1, 4)}
        merges = []
        for piece, i in sorted(normal.items(), key=lambda kv: (-scores[kv[1]], kv[1])):
            local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in normal and piece[k:] in normal]
            merges += sorted(local, key=lambda lr: (normal[lr[0]], normal[lr[1]]))
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    else:
        merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=(kind == "llama3")))
        bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=kind in ("gpt2", "starcoder"))
        if kind == "llama3":
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(ref.LLAMA3_SPLIT), "isolated"), bl])
        elif kind == "qwen2":
            tok.normalizer = normalizers.NFC()
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(ref.QWEN2_SPLIT), "isolated"), bl])
        elif kind == "starcoder":
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
        else:
            tok.pre_tokenizer = bl
        tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(t, special=(ty == 3), normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)])
    tok.encode_special_tokens = True
    return tok


def references():
    from tokenizers import Tokenizer
    import sentencepiece as spm

    def hf(path):
        t = Tokenizer.from_file(path)
        t.encode_special_tokens = True
        return lambda text: t.encode(text, add_special_tokens=False).ids

    def sp(path):
        p = spm.SentencePieceProcessor(model_file=path)
        return lambda text: p.encode(text)

    def gg(path, kind):
        t = gguf_reference(path, kind)
        return lambda text: t.encode(text, add_special_tokens=False).ids
    return [
        ("gpt2 (tokenizer.json)", os.path.join(FIX, "gpt2-tokenizer"), lambda: hf(os.path.join(FIX, "gpt2-tokenizer", "tokenizer.json"))),
        ("llama3 fixture (tokenizer.json)", os.path.join(TOK, "llama3"), lambda: hf(os.path.join(TOK, "llama3", "tokenizer.json"))),
        ("qwen2 fixture (tokenizer.json)", os.path.join(TOK, "qwen2"), lambda: hf(os.path.join(TOK, "qwen2", "tokenizer.json"))),
        ("spm fixture legacy (tokenizer.json)", os.path.join(TOK, "spm", "legacy"), lambda: hf(os.path.join(TOK, "spm", "legacy", "tokenizer.json"))),
        ("spm fixture metaspace (tokenizer.json)", os.path.join(TOK, "spm", "metaspace"), lambda: hf(os.path.join(TOK, "spm", "metaspace", "tokenizer.json"))),
        ("spm fixture (tokenizer.model) vs sentencepiece", os.path.join(TOK, "spm", "tokenizer.model"), lambda: sp(os.path.join(TOK, "spm", "tokenizer.model"))),
        ("spm fixture (llama2.c tokenizer.bin) vs sentencepiece", os.path.join(TOK, "spm", "tokenizer.bin"), lambda: sp(os.path.join(TOK, "spm", "tokenizer.model"))),
        ("Llama 3 (ggml-vocab-llama-bpe.gguf)", os.path.join(VOCAB, "ggml-vocab-llama-bpe.gguf"), lambda: gg(os.path.join(VOCAB, "ggml-vocab-llama-bpe.gguf"), "llama3")),
        ("Qwen2 (ggml-vocab-qwen2.gguf)", os.path.join(VOCAB, "ggml-vocab-qwen2.gguf"), lambda: gg(os.path.join(VOCAB, "ggml-vocab-qwen2.gguf"), "qwen2")),
        ("Llama 2 (ggml-vocab-llama-spm.gguf)", os.path.join(VOCAB, "ggml-vocab-llama-spm.gguf"), lambda: gg(os.path.join(VOCAB, "ggml-vocab-llama-spm.gguf"), "spm")),
        ("StarCoder (ggml-vocab-starcoder.gguf)", os.path.join(VOCAB, "ggml-vocab-starcoder.gguf"), lambda: gg(os.path.join(VOCAB, "ggml-vocab-starcoder.gguf"), "starcoder")),
        ("GPT-NeoX (ggml-vocab-gpt-neox.gguf)", os.path.join(VOCAB, "ggml-vocab-gpt-neox.gguf"), lambda: gg(os.path.join(VOCAB, "ggml-vocab-gpt-neox.gguf"), "gpt2")),
    ]


def corpus_file(out_dir):
    with open(os.path.join(TOK, "corpus.json"), encoding="utf-8") as f:
        texts = [c["text"] for c in json.load(f) if "\0" not in c["text"]]
    one = "\n".join(texts) + "\n"
    path = os.path.join(out_dir, "corpus_x80.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:  # "\r" stays "\r"
        f.write(one * 80)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--file", action="append")
    args = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    subprocess.run(["cmake", "--build", args.build, "--target", "bench_tokenizer", "-j2"], check=True,
                   stdout=subprocess.DEVNULL)
    files = args.file or [os.path.join(FIX, "data", "tinyshakespeare.txt"), corpus_file(args.build)]
    print("| tokenizer | file | minigpt MB/s | reference MB/s | minigpt / reference | ids equal |")
    print("|---|---|---:|---:|---:|---|")
    for name, model, make in references():
        encode = make()
        for path in files:
            with open(path, encoding="utf-8", newline="") as f:  # the bytes bench_tokenizer reads
                text = f.read()
            mb = len(text.encode("utf-8")) / 1e6
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                ids = encode(text)
                times.append(time.perf_counter() - t0)
            ref_mbs = mb / statistics.median(times)
            out = subprocess.run([os.path.join(args.build, "bench_tokenizer"), model, path, str(args.runs), "--ids"],
                                 check=True, capture_output=True, text=True).stdout
            mine = float(re.search(r"encode median [0-9.]+ ms = ([0-9.]+) MB/s", out).group(1))
            fnv = re.search(r"ids fnv1a64 ([0-9a-f]+)", out).group(1)
            same = "yes" if fnv == ref.fnv1a64_ints(ids) else "NO"
            print(f"| {name} | {os.path.basename(path)} | {mine:.1f} | {ref_mbs:.1f} | {mine / ref_mbs:.2f} | {same} |",
                  flush=True)


if __name__ == "__main__":
    main()
