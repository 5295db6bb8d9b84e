#!/usr/bin/env python3
"""Builds the SentencePiece BPE, Llama 3 and Qwen2 tokenizer fixtures and their golden ids
(tests/test_tokenizer_models.cpp), and the golden ids of llama.cpp's GPT-NeoX vocabulary on the corpus.

Usage: python3 tools/reference/make_spm_llama3_qwen2_tokenizers.py [--fixtures tests/fixtures]
           [--run-c PATH/TO/llama2.c/run.c] [--ggml-vocab PATH/TO/ggml-vocab-gpt-neox.gguf]

No pretrained tokenizer can be downloaded here, so each is trained on FIXTURES/data/tinyshakespeare.txt plus the
texts of FIXTURES/tokenizer/corpus.json (so that accented letters, CJK and emoji get pieces too), small, and
given the structure of the real files:

  spm/tokenizer.model   a sentencepiece BPE (sentencepiece's trainer: byte_fallback, normalizer "identity",
                        add_dummy_prefix, remove_extra_whitespaces false, as Llama 2's tokenizer.model has them;
                        character_coverage 0.99, so that rare characters fall back to bytes), vocabulary 2000.
  spm/tokenizer.bin     that model exported as llama2.c's tokenizer.py export() writes it (the longest token's
                        length; per token its score, length and bytes; <s> / </s> as "\\n<s>\\n" / "\\n</s>\\n", U+2581
                        as a space).
  spm/legacy/tokenizer.json     the same model as transformers' LlamaConverter writes it with legacy=True (Llama 2,
                        TinyLlama): normalizer Prepend("\u2581") + Replace(" ", "\u2581"), no pre_tokenizer, BPE with
                        byte_fallback, fuse_unk and unk_token "<unk>", the merges transformers' generate_merges
                        derives from the pieces, decoder Replace / ByteFallback / Fuse / Strip(" ", 1, 0).
  spm/metaspace/tokenizer.json  legacy=False (Mistral's newer files): no normalizer, pre_tokenizer
                        Metaspace(prepend_scheme "first", split false), the same model and decoder.
  llama3/tokenizer.json  a byte-level BPE with Llama 3's pre_tokenizer (Split of its regex, behavior Isolated, then
                        ByteLevel without its regex), BPE ignore_merges true, <|begin_of_text|> and friends as
                        special added tokens.
  qwen2/tokenizer.json   Qwen2's: normalizer NFC, Split of its regex, ByteLevel without regex, <|endoftext|>,
                        <|im_start|>, <|im_end|> special.

Each directory's golden.json: "cases" (corpus.json's texts: name, text, "ids" = encode(text,
add_special_tokens=False) with special tokens as text (encode_special_tokens), "decoded" = decode(ids)) and
"unicode" (every Unicode scalar, in blocks of unicode_blocks(): for each block the count and FNV-1a of the ids
of block_text(lo, hi), and the FNV-1a of the UTF-8 of their decoding). spm/golden.json has a case list per
tokenizer: "sentencepiece" (sentencepiece's encode of tokenizer.model), "llama2c" (llama2.c's own encode() from
run.c on tokenizer.bin, compiled here with -DTESTING; only when --run-c is given, else kept from the previous
file), "legacy", "metaspace" (tokenizers on the two tokenizer.json files).

ggml-vocab/gpt-neox.corpus.json: the corpus's ids from tokenizers over llama.cpp's ggml-vocab-gpt-neox.gguf
(its tokens and merges, ByteLevel with GPT-2's regex, its control tokens special and user-defined ones not; no
normalizer: the GGUF file holds none and llama.cpp applies none, where GPT-NeoX's tokenizer.json has NFC).

Deterministic for a given sentencepiece / tokenizers version (checked with sentencepiece 0.2.3, tokenizers
0.23.3, transformers 5.23.0): single-threaded training, sorted keys.
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def fnv1a64_ints(ints):
    """FNV-1a 64 over each value as 4 little-endian bytes (tests/tokenizer_test_util.h's fnv1a64)."""
    h = FNV_OFFSET
    for v in ints:
        for b in int(v).to_bytes(4, "little", signed=False):
            h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def fnv1a64_bytes(data):
    """FNV-1a 64 over bytes (tests/test_util.h's fnv1a64_hex)."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def unicode_blocks():
    return [(lo, lo + 0x1000) for lo in range(0, 0x40000, 0x1000)] + \
           [(lo, lo + 0x10000) for lo in range(0xE0000, 0x110000, 0x10000)]


def block_text(lo, hi):
    """Rebuilt identically by the C++ test: for each code point c (surrogates skipped), "a" c "1" c "!" c " " c
    "'" c "\\n": c's class decides every split, and "'" c tries the contractions ('s, 'S, and what (?i) folds)."""
    return "".join("a" + chr(cp) + "1" + chr(cp) + "!" + chr(cp) + " " + chr(cp) + "'" + chr(cp) + "\n"
                   for cp in range(lo, hi) if not 0xD800 <= cp <= 0xDFFF)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        f.write("\n")


def corpus(fixtures):
    with open(os.path.join(fixtures, "tokenizer", "corpus.json"), encoding="utf-8") as f:
        return [(c["name"], c["text"]) for c in json.load(f)]


def training_texts(fixtures, cases):
    with open(os.path.join(fixtures, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        shakes = f.read()
    extra = "\n".join(t for _, t in cases)
    return [shakes[i:i + 10000] for i in range(0, len(shakes), 10000)] + [extra] * 20


# ---- SentencePiece ---------------------------------------------------------------------------------

def train_spm(texts, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        train = os.path.join(tmp, "train.txt")
        with open(train, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(t.replace("\r", " ") + "\n")
        prefix = os.path.join(tmp, "m")
        spm.SentencePieceTrainer.train(
            input=train, model_prefix=prefix, model_type="bpe", vocab_size=2000, byte_fallback=True,
            character_coverage=0.99, normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=True, num_threads=1, split_digits=True, allow_whitespace_only_pieces=True,
            max_sentence_length=20000, minloglevel=2)
        with open(prefix + ".model", "rb") as f:
            model = f.read()
    with open(os.path.join(out_dir, "tokenizer.model"), "wb") as f:
        f.write(model)
    return spm.SentencePieceProcessor(model_file=os.path.join(out_dir, "tokenizer.model"))


def export_llama2c(sp, path):
    """llama2.c's tokenizer.py export(), step for step."""
    tokens, scores = [], []
    for i in range(sp.vocab_size()):
        t = sp.id_to_piece(i)
        s = sp.get_score(i)
        if i == sp.bos_id():
            t = "\n<s>\n"
        elif i == sp.eos_id():
            t = "\n</s>\n"
        t = t.replace("\u2581", " ")
        tokens.append(t.encode("utf-8"))
        scores.append(s)
    with open(path, "wb") as f:
        f.write(struct.pack("I", max(len(t) for t in tokens)))
        for b, s in zip(tokens, scores):
            f.write(struct.pack("fI", s, len(b)))
            f.write(b)


def spm_tokenizer_json(sp, model_path, legacy):
    """What transformers' LlamaConverter builds (its normalizer, pre_tokenizer, decoder, model options), made
    with tokenizers directly: transformers 5.23's converter cannot run on a bare tokenizer.model."""
    from transformers.tokenization_utils_base import generate_merges
    vocab = {sp.id_to_piece(i): i for i in range(sp.vocab_size())}
    merges = generate_merges(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if legacy:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    return tok


def llama2c_ids(run_c, bin_path, vocab_size, texts):
    """Encodes each text with llama2.c's own encode() (run.c, compiled with -DTESTING so that its main() is
    left out), no BOS / EOS. Texts holding a NUL (which a C string cannot) get None."""
    harness = r'''
#define TESTING
#include "RUN_C"
int main(int argc, char** argv) {
  Tokenizer t;
  build_tokenizer(&t, argv[1], atoi(argv[2]));
  FILE* f = fopen(argv[3], "rb");
  fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  char* all = malloc(n + 1); fread(all, 1, n, f); all[n] = 0; fclose(f);
  int* ids = malloc((n + 8) * sizeof(int));
  for (char* p = all; p < all + n; p += strlen(p) + 1) {
    int k = 0;
    encode(&t, p, 0, 0, ids, &k);
    for (int i = 0; i < k; ++i) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
  }
  return 0;
}
'''.replace("RUN_C", os.path.abspath(run_c))
    with tempfile.TemporaryDirectory() as tmp:
        src, exe, inp = os.path.join(tmp, "h.c"), os.path.join(tmp, "h"), os.path.join(tmp, "in.bin")
        with open(src, "w") as f:
            f.write(harness)
        subprocess.run(["cc", "-O2", "-w", "-o", exe, src, "-lm"], check=True)
        usable = [t for t in texts if "\0" not in t]
        with open(inp, "wb") as f:
            for t in usable:
                f.write(t.encode("utf-8") + b"\0")
        out = subprocess.run([exe, bin_path, str(vocab_size), inp], check=True, capture_output=True).stdout
        lines = out.decode().split("\n")
    got = {t: [int(x) for x in line.split()] for t, line in zip(usable, lines)}
    return [got.get(t) for t in texts]


# ---- byte-level ------------------------------------------------------------------------------------

def train_byte_level(texts, split, specials, nfc, ignore_merges):
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.decoder = decoders.ByteLevel()
    if ignore_merges:
        j = json.loads(tok.to_str())
        j["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(j))
    return tok


# ---- golden ----------------------------------------------------------------------------------------

def hf_cases(tok, cases):
    tok.encode_special_tokens = True  # special added tokens are text, as minigpt's encode(text)
    out = []
    for name, text in cases:
        ids = tok.encode(text, add_special_tokens=False).ids
        out.append({"name": name, "text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return out


def hf_unicode(tok):
    tok.encode_special_tokens = True
    out = []
    for lo, hi in unicode_blocks():
        ids = tok.encode(block_text(lo, hi), add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        out.append({"lo": lo, "hi": hi, "n_ids": len(ids), "ids_fnv1a64": fnv1a64_ints(ids),
                    "decoded_fnv1a64": fnv1a64_bytes(decoded.encode("utf-8"))})
    return out


def sp_unicode(sp):
    out = []
    for lo, hi in unicode_blocks():
        ids = sp.encode(block_text(lo, hi))
        out.append({"lo": lo, "hi": hi, "n_ids": len(ids), "ids_fnv1a64": fnv1a64_ints(ids),
                    "decoded_fnv1a64": fnv1a64_bytes(sp.decode(ids).encode("utf-8"))})
    return out


def gpt_neox_corpus(gguf_path, cases):
    import gguf
    r = gguf.GGUFReader(gguf_path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ", 1)) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(t, special=(ty == 3), normalized=(ty == 4)) for t, ty in zip(tokens, types)
                    if ty in (3, 4)])
    return {"source": "llama.cpp models/ggml-vocab-gpt-neox.gguf", "cases": hf_cases(tok, cases)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures"))
    ap.add_argument("--run-c", help="llama2.c's run.c, for its encoder's ids (kept from the last run if absent)")
    ap.add_argument("--ggml-vocab", default=os.path.join(ROOT, "tests", "fixtures", "ggml-vocab",
                                                         "ggml-vocab-gpt-neox.gguf"))
    args = ap.parse_args()
    tok_dir = os.path.join(args.fixtures, "tokenizer")
    cases = corpus(args.fixtures)
    texts = training_texts(args.fixtures, cases)

    spm_dir = os.path.join(tok_dir, "spm")
    sp = train_spm(texts[:-19], spm_dir)  # the corpus once: its rarest characters fall back to bytes
    bin_path = os.path.join(spm_dir, "tokenizer.bin")
    export_llama2c(sp, bin_path)
    golden = {"cases": [{"name": n, "text": t, "sentencepiece": sp.encode(t), "sentencepiece_decoded": sp.decode(sp.encode(t))}
                        for n, t in cases], "unicode": {"sentencepiece": sp_unicode(sp)}}
    if args.run_c:
        ids = llama2c_ids(args.run_c, bin_path, sp.vocab_size(), [t for _, t in cases])
        for c, i in zip(golden["cases"], ids):
            c["llama2c"] = i
    else:
        old_path = os.path.join(spm_dir, "golden.json")
        old = json.load(open(old_path, encoding="utf-8")) if os.path.exists(old_path) else {"cases": []}
        kept = {c["text"]: c.get("llama2c") for c in old["cases"]}
        for c in golden["cases"]:
            if kept.get(c["text"]) is not None:
                c["llama2c"] = kept[c["text"]]
    for form, legacy in (("legacy", True), ("metaspace", False)):
        tok = spm_tokenizer_json(sp, os.path.join(spm_dir, "tokenizer.model"), legacy)
        os.makedirs(os.path.join(spm_dir, form), exist_ok=True)
        tok.save(os.path.join(spm_dir, form, "tokenizer.json"))
        tok = Tokenizer.from_file(os.path.join(spm_dir, form, "tokenizer.json"))
        for c, h in zip(golden["cases"], hf_cases(tok, cases)):
            c[form] = h["ids"]
            c[form + "_decoded"] = h["decoded"]
        golden["unicode"][form] = hf_unicode(tok)
    write_json(os.path.join(spm_dir, "golden.json"), golden)

    for name, split, specials, nfc, ignore in (("llama3", LLAMA3_SPLIT, LLAMA3_SPECIALS, False, True),
                                               ("qwen2", QWEN2_SPLIT, QWEN2_SPECIALS, True, False)):
        d = os.path.join(tok_dir, name)
        os.makedirs(d, exist_ok=True)
        train_byte_level(texts, split, specials, nfc, ignore).save(os.path.join(d, "tokenizer.json"))
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        write_json(os.path.join(d, "golden.json"), {"cases": hf_cases(tok, cases), "unicode": hf_unicode(tok)})

    if os.path.exists(args.ggml_vocab):
        write_json(os.path.join(args.fixtures, "ggml-vocab", "gpt-neox.corpus.json"),
                   gpt_neox_corpus(args.ggml_vocab, cases))


if __name__ == "__main__":
    main()
