#!/usr/bin/env python3
"""Builds small tokenizers shaped like those of GPT-NeoX/Pythia, OPT and StarCoder (gpt_bigcode) with Hugging
Face `tokenizers`, and the golden ids `tokenizers` gives for them (tests/test_tokenizer_families.cpp).

Usage: python3 tools/reference/make_family_tokenizers.py [--fixtures tests/fixtures] [--out tests/fixtures/tokenizer]

No pretrained tokenizer can be downloaded here, so each one is trained (BpeTrainer, deterministic) on
FIXTURES/data/tinyshakespeare.txt plus the hand-picked strings of tools/reference/make_tokenizer_reference.py (so that
accented letters, CJK and emoji get merges too), with a small vocabulary, and given the structure of the real
file. Deterministic: re-running it gives byte-identical files (checked with tokenizers 0.23.3, transformers
5.23.0).

  neox/        EleutherAI/gpt-neox-20b's tokenizer.json, as the Hub holds it (written by tokenizers ~0.12, so no
               "use_regex" / "byte_fallback" / "ignore_merges" keys, merges as "a b" strings): normalizer NFC;
               pre_tokenizer, post_processor and decoder ByteLevel (add_prefix_space false, trim_offsets true);
               BPE with <|endoftext|> = 0 and <|padding|> = 1 first in the vocabulary and as special added
               tokens (normalized false); then 23 added tokens for runs of 24 down to 2 spaces (ids right after
               the vocabulary, special false, normalized true), as the real file has them at 50254..50276.
  pythia/      the same tokenizer loaded and saved by transformers 5.23's GPTNeoXTokenizer, which rebuilds it
               (continuing_subword_prefix "", current serialization) and sets a TemplateProcessing
               post_processor ("$A:0": no BOS/EOS unless add_bos_token/add_eos_token).
  opt/         facebook/opt-*'s tokenizer as transformers 5.23 makes it from the repo's vocab.json, merges.txt
               and tokenizer_config.json (GPT2Tokenizer, add_bos_token true): vocabulary <s>=0, <pad>=1, </s>=2,
               <unk>=3 first; TemplateProcessing "</s> $A" (OPT's BOS is </s>, id 2); no normalizer.
  starcoder/   bigcode/starcoder's: pre_tokenizer Sequence[Digits(individual_digits=true), ByteLevel], no
               normalizer, its 19 special tokens (<|endoftext|>, <fim_prefix>, ...) at ids 0..18.
  added_flags/ neox/ plus added tokens with lstrip / rstrip, and normalized true / false around text that NFC
               changes (no real file of these families sets lstrip / rstrip; RoBERTa's <mask> does).

Each directory gets tokenizer.json and golden.json: for each case, "text", "ids" (encode(text,
add_special_tokens=False) with encode_special_tokens=True: special added tokens are text, non-special ones
still split, as minigpt's encode(text)), "ids_special" (the same recognising special tokens, omitted when equal
to "ids"), "ids_add" (add_special_tokens=True, omitted when equal to "ids_special"), "decoded"
(decode(ids_special), omitted when equal to the text); and "shakespeare": the whole of tinyshakespeare.txt in
chunks (each encoded on its own, no special tokens): chunk byte offsets, count and FNV-1a of the ids of each.
neox/nfc.json: the normalizer's output over (almost) all of Unicode, as block hashes, plus the decompositions of
all composed characters (Hangul: every 37th); starcoder/digits.json: the pre-token boundaries of
Sequence[Digits, ByteLevel] over Unicode, as tools/reference/make_tokenizer_reference.py's codepoints.json does for GPT-2;
starcoder/contiguous.json: the ids of the digit cases with Digits(individual_digits=false) instead.
"""
import argparse
import importlib.util
import json
import os
import random
import tempfile

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_reference_module():
    """tools/reference/make_tokenizer_reference.py: its hand-picked strings, random text and hash."""
    spec = importlib.util.spec_from_file_location("make_tokenizer_reference",
                                                  os.path.join(ROOT, "tools", "make_tokenizer_reference.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = load_reference_module()
fnv1a64 = REF.fnv1a64

VOCAB_SIZE = 2000
NEOX_SPACES = [" " * n for n in range(24, 1, -1)]  # the real file: ids 50254 (24 spaces) .. 50276 (2 spaces)
STARCODER_SPECIALS = ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<filename>",
                      "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>",
                      "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<empty_output>", "<commit_before>",
                      "<commit_msg>", "<commit_after>", "<reponame>"]

# Cases beyond make_tokenizer_reference.py's HAND_PICKED: what the normalizer, the added tokens and the Digits
# pre-tokenizer change.
FAMILY_CASES = [
    ("nfc_decomposed_accents", "cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m"),
    ("nfc_decomposed_alone", "e\u0301"),
    ("nfc_reorder_marks", "a\u0301\u0316 q\u0307\u0323 x\u0345\u0301\u0316\u05b0\u0334"),
    ("nfc_singletons", "\u212b \u2126 \u212a \u2000\u2001 \uf900 \u0340\u0341 \u0374 \u037e \u0387"),
    ("nfc_exclusions", "\u0958\u0959 \u0915\u093c \u2adc \u0344 \u0f73"),
    ("nfc_hangul_jamo", "\u1100\u1161 \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af"),
    ("nfc_unchanged_compat", "\ufb01le \ufb03 \u2163 \u2460 \uff12\uff10\uff12\uff14 \uff76\uff80 \u2122 \u00bd \u00b2 \u3382"),
    ("nfc_after_unicode9", "\U00011935\U00011930 a\u1ac1\u0316 \u09fe"),
    ("nfc_greek_polytonic", "\u03b1\u0313\u0301 \u1f04 \u03c9\u0342\u0345"),
    ("nfc_vietnamese", "Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u"),
    ("spaces_1_to_30", "".join("x" + " " * n for n in range(1, 31)) + "x"),
    ("spaces_long_run", " " * 60 + "y" + " " * 25 + "\n" + " " * 24 + "z"),
    ("spaces_and_newlines", "  \n   \n\n    \t  x  \r\n  "),
    ("indented_code", "def f(x):\n    if x:\n        return [\n            1,\n        ]\n    return 0\n"),
    ("digits_runs", "0 12 345 6789 1234567890 3.14159 1,000,000 0x1F 2024-06-01 v1.2.3 x86_64"),
    ("digits_other_scripts", "\u0661\u0662\u0663 \u0967\u0968 \u0e51\u0e52 \uff11\uff12 \U0001d7d9\U0001d7da"),
    ("digits_numeric_non_decimal", "\u2163 \u216b \u00bd\u00bc \u00b2\u00b3 \u2460\u2461 \u3007 \u4e00\u4e8c"),
    ("digits_letters_mixed", "abc123def 4ever h2o CO2 1st 2nd 3rd 10th"),
    ("added_in_text", "a<|endoftext|>b<|padding|>c<s>d</s>e<pad>f<unk>g<fim_prefix>h<fim_middle>i<fim_suffix>j"),
    ("added_with_spaces", "  <|endoftext|>  <|padding|>   <s>  </s>    <filename>  "),
    ("added_then_mark", "<|endoftext|>\u0301 x<|padding|>\u0308 e<s>\u0301 e\u0301</s>"),
    ("added_broken_by_mark", "<|endof\u0301text|> <|pad\u0308ding|>"),
    ("added_adjacent", "<|endoftext|><|endoftext|><|padding|><s></s><s><reponame><gh_stars>"),
    ("added_partial", "<|endoftext| <|padding <s </s <fim_ <reponame>x"),
    ("fim_prompt", "<fim_prefix>def add(a, b):\n    <fim_suffix>\n    return c<fim_middle>"),
    ("flags_mask", "I saw a <mask> here,  <mask>  twice\t<mask>\nand<mask>x <mask>"),
    ("flags_rstrip", "[R]   next [R]\n\nnext [R]x  [R]"),
    ("flags_both", "a  <both>  b <both><both>   <both>"),
    ("flags_normalized_content", "cafe\u0301 caf\u00e9 cafe\u0301! e\u0301! \u00e9!"),
    ("flags_strip_then_spaces", "<mask>    [R]      <both>        x"),
]


# Pieces of random texts that exercise the added tokens' flags, NFC across their edges, white space of every
# kind lstrip / rstrip take, and the Digits split.
FRAGMENTS = ["<mask>", "[R]", "<both>", "cafe\u0301", "caf\u00e9", "e\u0301!", "<|endoftext|>", "<|padding|>", " ",
             "  ", "   ", "\t", "\n", "\u3000", "\u2000", "\u00a0", "\u0085", "e", "\u0301", "\u0316", "!", "a", "1",
             "\u2163", "\u0662", "x", "<fim_prefix>", "</s>", "<s>", "<pad>", "\u1100", "\u1161", "\U0001F600"]


def training_text(fixtures):
    with open(os.path.join(fixtures, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        shakes = f.read()
    extra = "\n".join(t for _, t in REF.HAND_PICKED) + "\n"
    chunks = [shakes[i:i + 10000] for i in range(0, len(shakes), 10000)]
    return chunks + [extra] * 50


def train(texts, specials, pre_tokenizer, normalizer=None):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.decoder = decoders.ByteLevel()
    return tok


def old_serialization(tok):
    """tokenizer.json as tokenizers 0.12 wrote it in 2022 (gpt-neox-20b's file): no use_regex, byte_fallback,
    ignore_merges; merges as "a b" strings; added tokens' keys in that release's order."""
    j = json.loads(tok.to_str())
    for key in ("pre_tokenizer", "post_processor", "decoder"):
        j[key] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
    m = j["model"]
    j["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "vocab": m["vocab"],
                  "merges": [a + " " + b for a, b in m["merges"]]}
    j["added_tokens"] = [{"id": a["id"], "special": a["special"], "content": a["content"],
                          "single_word": a["single_word"], "lstrip": a["lstrip"], "rstrip": a["rstrip"],
                          "normalized": a["normalized"]} for a in j["added_tokens"]]
    return json.dumps(j, ensure_ascii=False, separators=(",", ":"))


def write_json(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.write("\n")


def make_neox(texts, out):
    tok = train(texts, ["<|endoftext|>", "<|padding|>"],
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
                normalizers.NFC())
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.add_tokens([AddedToken(s, special=False, normalized=True) for s in NEOX_SPACES])
    d = os.path.join(out, "neox")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "tokenizer.json"), old_serialization(tok))
    return d


def make_pythia(neox_dir, out):
    from transformers import GPTNeoXTokenizer

    d = os.path.join(out, "pythia")
    with tempfile.TemporaryDirectory() as tmp:
        GPTNeoXTokenizer.from_pretrained(neox_dir).save_pretrained(tmp)
        saved = Tokenizer.from_file(os.path.join(tmp, "tokenizer.json"))
    os.makedirs(d, exist_ok=True)
    saved.save(os.path.join(d, "tokenizer.json"), pretty=False)
    return d


def make_opt(texts, out):
    from transformers import GPT2Tokenizer

    base = train(texts, ["<s>", "<pad>", "</s>", "<unk>"],
                 pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True))
    m = json.loads(base.to_str())["model"]
    d = os.path.join(out, "opt")
    with tempfile.TemporaryDirectory() as tmp:
        # The files an OPT repository holds (facebook/opt-125m), with this vocabulary.
        with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(m["vocab"], f, ensure_ascii=False)
        with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join(a + " " + b + "\n" for a, b in m["merges"]))

        def added(content):
            return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True,
                    "rstrip": False, "single_word": False}
        config = {"errors": "replace", "unk_token": added("</s>"), "bos_token": added("</s>"),
                  "eos_token": added("</s>"), "pad_token": added("<pad>"), "add_prefix_space": False,
                  "add_bos_token": True, "model_max_length": 1000000000000000019884624838656,
                  "tokenizer_class": "GPT2Tokenizer"}
        with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
        with open(os.path.join(tmp, "special_tokens_map.json"), "w") as f:
            json.dump({"bos_token": added("</s>"), "eos_token": added("</s>"), "unk_token": added("</s>"),
                       "pad_token": added("<pad>")}, f)
        t = GPT2Tokenizer.from_pretrained(tmp)
        assert t("Hi").input_ids[0] == 2, t("Hi").input_ids
        saved_dir = os.path.join(tmp, "saved")
        t.save_pretrained(saved_dir)
        saved = Tokenizer.from_file(os.path.join(saved_dir, "tokenizer.json"))
    os.makedirs(d, exist_ok=True)
    saved.save(os.path.join(d, "tokenizer.json"), pretty=False)
    return d


def make_starcoder(texts, out):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok = train(texts, STARCODER_SPECIALS, pre)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    d = os.path.join(out, "starcoder")
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    return d


def make_added_flags(neox_dir, out):
    tok = Tokenizer.from_file(os.path.join(neox_dir, "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("[R]", rstrip=True, special=False, normalized=True),
                    AddedToken("<both>", lstrip=True, rstrip=True, special=False, normalized=False),
                    # Matched as NFC("cafe\u0301") = "caf\u00e9" in the normalized text.
                    AddedToken("cafe\u0301", special=False, normalized=True),
                    # Matched in the text as given: only the decomposed spelling.
                    AddedToken("e\u0301!", special=False, normalized=False)])
    d = os.path.join(out, "added_flags")
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    return d


def golden(d, cases, shakes):
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # what was written is what is checked
    plain = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    plain.encode_special_tokens = True
    out = []
    for name, text in cases:
        c = {"name": name, "text": text, "ids": plain.encode(text, add_special_tokens=False).ids}
        special = tok.encode(text, add_special_tokens=False).ids
        add = tok.encode(text, add_special_tokens=True).ids
        if special != c["ids"]:
            c["ids_special"] = special
        if add != special:
            c["ids_add"] = add
        decoded = tok.decode(special, skip_special_tokens=False)
        if decoded != text:
            c["decoded"] = decoded
        out.append(c)
    # tinyshakespeare in chunks of about 64 KiB, each cut after a blank line.
    offsets, pos = [], 0
    while pos < len(shakes):
        offsets.append(pos)
        cut = shakes.find("\n\n", pos + 65536)
        pos = len(shakes) if cut < 0 else cut + 2
    raw = shakes.encode("utf-8")
    assert len(raw) == len(shakes)  # ASCII: character offsets are byte offsets
    chunks = []
    for k, start in enumerate(offsets):
        end = offsets[k + 1] if k + 1 < len(offsets) else len(shakes)
        ids = plain.encode(shakes[start:end], add_special_tokens=False).ids
        chunks.append({"offset": start, "count": len(ids), "fnv1a64": fnv1a64(ids)})
    first = plain.encode(shakes[offsets[0]:offsets[1]], add_special_tokens=False).ids[:64]
    lines = ['{"what": %s,' % json.dumps(
        "tokenizers.Tokenizer.from_file(tokenizer.json): ids = encode(text, add_special_tokens=False) with "
        "encode_special_tokens=True; ids_special = the same recognising special tokens (omitted: = ids); "
        "ids_add = encode(text) (omitted: = ids_special); decoded = decode(ids_special) (omitted: = text); "
        "shakespeare: tinyshakespeare.txt cut at the offsets, each chunk encoded alone (ids). Made by "
        "tools/reference/make_family_tokenizers.py"),
        ' "shakespeare": {"file": "data/tinyshakespeare.txt", "head": %s, "chunks": [' % json.dumps(first)]
    lines += ["  " + json.dumps(c) + ("," if i + 1 < len(chunks) else "") for i, c in enumerate(chunks)]
    lines.append(' ]},')
    lines.append(' "cases": [')
    lines += ["  " + json.dumps(c, ensure_ascii=True) + ("," if i + 1 < len(out) else "") for i, c in enumerate(out)]
    lines.append(" ]}")
    with open(os.path.join(d, "golden.json"), "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")
    return len(out), sum(c["count"] for c in chunks)


def unicode_blocks():
    return [(lo, lo + 0x1000) for lo in range(0, 0x40000, 0x1000)] + \
           [(lo, lo + 0x10000) for lo in range(0xE0000, 0x110000, 0x10000)]


# After each code point: marks of canonical combining classes 240, 230, 220, 10 and 1, in descending order,
# so that canonical reordering moves every one of them and the code point's own class decides where it lands.
NFC_MARKS = "\u0345\u0301\u0316\u05b0\u0334"


def nfc_block_text(lo, hi):
    """The text of nfc.json's blocks, rebuilt identically by the C++ test: for each code point c (surrogates
    skipped), "a" c NFC_MARKS " " c "\\n"."""
    return "".join("a" + chr(cp) + NFC_MARKS + " " + chr(cp) + "\n" for cp in range(lo, hi)
                   if not 0xD800 <= cp <= 0xDFFF)


def utf8_hash(s):
    return fnv1a64(s.encode("utf-8"))


def write_nfc(neox_dir):
    norm = Tokenizer.from_file(os.path.join(neox_dir, "tokenizer.json")).normalizer
    nfd = normalizers.NFD()
    blocks = []
    for lo, hi in unicode_blocks():
        blocks.append({"lo": lo, "hi": hi, "fnv1a64": utf8_hash(norm.normalize_str(nfc_block_text(lo, hi)))})
    # Every composed character's decomposition (as the reference's NFD gives it), recomposed by the NFC.
    decomposed, hangul = [], 0
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        d = nfd.normalize_str(chr(cp))
        if d == chr(cp):
            continue
        if 0xAC00 <= cp <= 0xD7A3:
            hangul += 1
            if hangul % 37 != 1:
                continue
        decomposed.append(d)
    text = "|".join(decomposed)
    nfc = norm.normalize_str(text)
    with open(os.path.join(neox_dir, "nfc.json"), "w", encoding="ascii") as f:
        json.dump({"what": "tokenizers' NFC normalizer (neox/tokenizer.json): blocks: fnv1a64 of the UTF-8 bytes "
                           "of normalize(text) where text is, for each code point c in [lo, hi) but surrogates, "
                           "\"a\" c MARKS \" \" c \"\\n\"; decomposed: NFD of composed characters, joined by |, "
                           "and fnv1a64 of its NFC. Made by tools/reference/make_family_tokenizers.py",
                   "marks": NFC_MARKS, "blocks": blocks, "decomposed": text, "decomposed_nfc_fnv1a64": utf8_hash(nfc),
                   "decomposed_nfc_changes": nfc != text}, f, ensure_ascii=True, indent=0)
        f.write("\n")


def write_digits(starcoder_dir):
    pre = Tokenizer.from_file(os.path.join(starcoder_dir, "tokenizer.json")).pre_tokenizer
    blocks = []
    for lo, hi in unicode_blocks():
        lengths = [len(p) for p, _ in pre.pre_tokenize_str(REF.codepoint_text(lo, hi))]
        blocks.append({"lo": lo, "hi": hi, "pieces": len(lengths), "fnv1a64": fnv1a64(lengths)})
    with open(os.path.join(starcoder_dir, "digits.json"), "w") as f:
        json.dump({"what": "pre-token byte lengths of Sequence[Digits(individual_digits=true), ByteLevel] "
                           "(starcoder/tokenizer.json) over tools/reference/make_tokenizer_reference.py's codepoint_text "
                           "of each block. Made by tools/reference/make_family_tokenizers.py", "blocks": blocks}, f, indent=0)
        f.write("\n")


def write_contiguous(starcoder_dir, cases):
    """starcoder/ with Digits(individual_digits=false) (runs of numeric characters kept together): the C++
    test makes the same change to the JSON."""
    j = json.load(open(os.path.join(starcoder_dir, "tokenizer.json"), encoding="utf-8"))
    assert j["pre_tokenizer"]["pretokenizers"][0] == {"type": "Digits", "individual_digits": True}
    j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = False
    tok = Tokenizer.from_str(json.dumps(j))
    tok.encode_special_tokens = True
    picked = [(n, t) for n, t in cases if n.startswith(("digits", "numbers", "long_number", "random_0"))]
    out = [{"name": n, "text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for n, t in picked]
    lines = ['{"what": %s,' % json.dumps("starcoder/tokenizer.json with its Digits' individual_digits set to false: "
                                         "ids = encode(text, add_special_tokens=False) with encode_special_tokens="
                                         "True. Made by tools/reference/make_family_tokenizers.py"), ' "cases": [']
    lines += ["  " + json.dumps(c) + ("," if i + 1 < len(out) else "") for i, c in enumerate(out)]
    lines.append(" ]}")
    with open(os.path.join(starcoder_dir, "contiguous.json"), "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "tokenizer"))
    args = ap.parse_args()
    texts = training_text(args.fixtures)
    with open(os.path.join(args.fixtures, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        shakes = f.read()

    neox = make_neox(texts, args.out)
    dirs = [neox, make_pythia(neox, args.out), make_opt(texts, args.out), make_starcoder(texts, args.out),
            make_added_flags(neox, args.out)]

    rng = random.Random(20250101)
    cases = [(n, t) for n, t in REF.HAND_PICKED] + FAMILY_CASES
    cases += [("random_%03d" % i, REF.random_text(rng)) for i in range(60)]
    cases += [("fragments_%03d" % i, "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 20))))
              for i in range(120)]
    for d in dirs:
        n, count = golden(d, cases, shakes)
        print(f"{os.path.relpath(d, ROOT)}: {n} cases, tinyshakespeare {count} ids")
    write_nfc(neox)
    write_digits(dirs[3])
    write_contiguous(dirs[3], cases)
    print("wrote nfc.json, digits.json, contiguous.json")


if __name__ == "__main__":
    main()
