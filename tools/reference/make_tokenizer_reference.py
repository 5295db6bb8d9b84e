#!/usr/bin/env python3
"""Writes the golden GPT-2 tokenizer fixtures of tests/test_tokenizer*.cpp from Hugging Face `tokenizers`.

Usage: python3 tools/reference/make_tokenizer_reference.py [--fixtures tests/fixtures] [--out tests/fixtures/tokenizer]

Reads the GPT-2 tokenizer from FIXTURES/gpt2-tokenizer and FIXTURES/data/tinyshakespeare.txt (the project's
copies; see tests/fixtures/gpt2-tokenizer/README.md).

Deterministic (fixed seed, sorted keys): re-running it gives byte-identical files. When tiktoken is
installed, every id sequence is also checked against tiktoken's gpt2 encoding built from the same
vocab.json / merges.txt (no download), and the script stops on any disagreement.

Files:
  corpus.json          hand-picked strings + seeded random strings: text, ids (special tokens as
                       text), ids_special (special tokens recognised), pieces (pre-token byte lengths)
  long.json            long repetitive inputs (unit * times + suffix): count, FNV-1a of the ids, head
  tinyshakespeare.json the whole corpus: count, FNV-1a of all ids and of each 4096-id chunk, head/tail.
                       338,025 ids as binary would be ~0.7-1.3 MB; the hashes catch any change and the
                       chunk hashes say where, for ~2 KB.
  codepoints.json      pre-token boundaries over (almost) all of Unicode, as chunked hashes, to prove
                       the regex classes (\\s, \\p{L}, \\p{N}) agree with the reference engine.
  vocab_bytes.json     a hash of the bytes of every token, from GPT-2's byte decoder in Python
  bytelevel/           a 256-symbol vocab.json + header-only merges.txt (the byte-level models)
"""
import argparse
import json
import os
import random
import sys

from tokenizers import Tokenizer, models, pre_tokenizers

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(ints):
    """FNV-1a 64 over each value as 4 little-endian bytes (the C++ test computes the same)."""
    h = FNV_OFFSET
    for v in ints:
        for b in int(v).to_bytes(4, "little", signed=False):
            h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


HAND_PICKED = [
    ("hello", "Hello world"),
    ("empty", ""),
    ("contractions_lower", "it's don't we're you've I'm we'll he'd"),
    ("contractions_upper", "IT'S DON'T WE'RE YOU'VE I'M WE'LL HE'D"),
    ("contractions_mixed", "It'S dOn'T We'Re yoU'vE i'M wE'lL hE'd 's 't 're 've 'm 'll 'd ''s '"),
    ("contractions_curly", "it\u2019s don\u2019t"),
    ("spaces_runs", "a  b   c    d     e      f"),
    ("spaces_trailing", "trailing spaces   "),
    ("spaces_leading", "   leading spaces"),
    ("spaces_only", "     "),
    ("tabs", "\tone\t\ttwo\t \tthree\t"),
    ("newlines", "line one\nline two\n\nline four\n\n\n"),
    ("crlf", "windows\r\nline\r\n\r\nend\r\n"),
    ("cr_only", "old\rmac\r"),
    ("mixed_ws", " \t\n \r\n\t  x \n\t "),
    ("nbsp", "non\u00a0breaking\u00a0\u00a0space \u00a0x"),
    ("ideographic_space", "\u3000全角\u3000スペース\u3000"),
    ("unicode_spaces", "a\u2000b\u2001c\u2002d\u2003e\u2009f\u200ag\u202fh\u205fi\u1680j\u0085k\u2028l\u2029m"),
    ("not_spaces", "a\u180eb\u200bc\u200cd\u200de\u2060f\ufeffg\u00adh"),
    ("control_chars", "a\x00b\x01c\x1fd\x7fe\x0bf\x0cg"),
    ("accents", "café naïve résumé Ångström façade coöperate"),
    ("accents_combining", "cafe\u0301 nai\u0308ve"),
    ("german", "Größenmaßstäbe Straße Äpfel Öl Übermut"),
    ("greek", "Ελληνικά γλώσσα αβγ ΑΒΓ"),
    ("cyrillic", "Привет, мир! Съешь же ещё этих мягких французских булок."),
    ("cjk_chinese", "我爱自然语言处理。今天天气很好！"),
    ("cjk_japanese", "こんにちは世界。カタカナとひらがな、漢字。"),
    ("cjk_korean", "안녕하세요 세계 한국어"),
    ("arabic", "مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥"),
    ("hebrew", "שלום עולם! מה שלומך?"),
    ("devanagari", "नमस्ते दुनिया। हिन्दी भाषा १२३"),
    ("thai", "สวัสดีชาวโลก ภาษาไทย ๑๒๓"),
    ("emoji", "I ❤️ 🍕 and 🐍! 😀😃😄"),
    ("emoji_zwj", "family: 👨\u200d👩\u200d👧\u200d👦 rainbow flag: 🏳️\u200d🌈 tech: 🧑🏽\u200d💻"),
    ("emoji_flags", "🇺🇸🇬🇧🇯🇵🇫🇷 flags 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"),
    ("emoji_skin", "👍🏻👍🏼👍🏽👍🏾👍🏿"),
    ("digits", "0 1 12 123 1234 12345 123456 1234567"),
    ("long_number", "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899"),
    ("numbers_mixed", "In 2024, 1,000,000 people paid $3.50 (or €2,99) for 10% off; x=-42e-3"),
    ("numbers_other", "٣ ३ ๓ Ⅻ ½ ² ① 𝟙"),
    ("code_python", "def f(x):\n    return x**2 + 1  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n"),
    ("code_cpp", "int main(int argc, char** argv) {\n  std::vector<int> v{1,2,3};\n  return v[0] != 0 ? 0 : -1;\n}\n"),
    ("code_json", '{"key": [1, 2.5, "three"], "nested": {"a": null, "b": true}}'),
    ("url", "See https://example.com/path/to/page?query=1&lang=en#section and http://a.b/c."),
    ("email", "mail me: first.last+tag@sub.example.co.uk"),
    ("html", '<!DOCTYPE html><html><body><p class="x">Hello &amp; welcome&nbsp;!</p><br/></body></html>'),
    ("markdown", "# Title\n\n* item **bold** _it_ `code`\n\n> quote\n"),
    ("punctuation", "Wait... what?! (yes) [no] {maybe} <tag> \"quoted\" 'single' -- — – ‘’ “” «» ¿¡"),
    ("symbols", "@#$%^&*()_+-=[]{}|;':\",./<>?`~\\"),
    ("math", "∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ ≤ ∞ ≠ √2 ≈ 1.414"),
    ("special_alone", "<|endoftext|>"),
    ("special_inside", "Hello<|endoftext|>world <|endoftext|> again<|endoftext|><|endoftext|>"),
    ("special_partial", "<|endoftext| <|endoftext <endoftext|> |endoftext|>"),
    ("special_spaces", " <|endoftext|> \n<|endoftext|>\n"),
    ("mixed_scripts", "Hello世界مرحبا Привет123abc!?"),
    ("apostrophes_edge", "'''' 's's 'S x'sy rock'n'roll"),
    ("repeated_words", "the the the the the the the the the the"),
    ("supplementary", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 𠜎𠜱𠝹 \U0010fffd \U000f0000"),
    ("shakespeare", "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"),
]

# Code point pools for the random strings: weighted towards what real text holds, with the edge
# cases of the split pattern (whitespace classes, marks, formats) well represented.
POOLS = [
    (30, [(0x20, 0x7E)]),
    (8, [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200F),
         (0x2028, 0x202F), (0x205F, 0x2060), (0x3000, 0x3000), (0x180E, 0x180E), (0xFEFF, 0xFEFF)]),
    (6, [(0xA1, 0x24F)]),
    (4, [(0x300, 0x36F), (0x900, 0x97F), (0xE00, 0xE7F)]),
    (4, [(0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF)]),
    (5, [(0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7A3)]),
    (5, [(0x1F300, 0x1F6FF), (0x1F900, 0x1F9FF), (0x1F1E6, 0x1F1FF), (0x1F3FB, 0x1F3FF), (0x200D, 0x200D), (0xFE0F, 0xFE0F)]),
    (3, [(0x30, 0x39), (0x660, 0x669), (0x966, 0x96F), (0x2160, 0x2188), (0xB2, 0xB3), (0x1D7CE, 0x1D7FF)]),
    (2, [(0x27, 0x27), (0x27, 0x27), (0x73, 0x74), (0x2019, 0x2019)]),
    (1, [(0x80, 0x9F), (0xE000, 0xE0FF), (0xFFF0, 0xFFFD), (0x10000, 0x1FFFF), (0xE0000, 0xE007F), (0x100000, 0x10FFFD)]),
]


def random_text(rng):
    weights = [w for w, _ in POOLS]
    n = rng.choice([1, 2, 3, 5, 8, 13, 20, 40, 80])
    out = []
    for _ in range(n):
        ranges = rng.choices(POOLS, weights)[0][1]
        lo, hi = rng.choice(ranges)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0x20
        # Occasionally repeat a character to make runs.
        out.append(chr(cp) * (rng.choice([1, 1, 1, 1, 2, 5])))
    return "".join(out)


def codepoint_text(lo, hi):
    """The text of codepoints.json, rebuilt identically by the C++ test: for each code point c
    (surrogates skipped), "a" c "1" c "!" c " " c "\\n" -- c's class decides every boundary."""
    parts = []
    for cp in range(lo, hi):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        parts.append("a" + c + "1" + c + "!" + c + " " + c + "\n")
    return "".join(parts)


def write_unicode_extra(path, pre):
    """Letters and numbers of Unicode versions newer than PCRE2's tables (Debian 12: PCRE2 10.42 =
    Unicode 14.0), as HF tokenizers' engine classifies them, and the numeric characters of its Digits
    pre-tokenizer (Rust's char::is_numeric, whose Unicode is newer still). Candidates are the code points
    Python's unicodedata (also 14.0 on Python 3.11) calls unassigned; each one's class comes from HF itself."""
    import unicodedata
    if unicodedata.unidata_version != "14.0.0":
        print(f"unicodedata is {unicodedata.unidata_version}, not 14.0.0: leaving {path} as it is", file=sys.stderr)
        return

    def hf_class(c):
        if len(pre.pre_tokenize_str("a" + c)) == 1:
            return "L"
        if len(pre.pre_tokenize_str("1" + c)) == 1:
            return "N"
        return None

    # tokenizers' Digits pre-tokenizer (Rust's char::is_numeric), for StarCoder's Sequence[Digits, ByteLevel].
    digits = pre_tokenizers.Digits(individual_digits=True)

    def hf_numeric(c):
        return len(digits.pre_tokenize_str("a" + c + "a")) == 3

    ranges = {"L": [], "N": [], "NUMERIC": []}

    def add(k, cp):
        r = ranges[k]
        if r and r[-1][1] == cp - 1:
            r[-1][1] = cp
        else:
            r.append([cp, cp])

    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        category = unicodedata.category(chr(cp))
        if category != "Cn":
            # Assigned in PCRE2's Unicode too: its \p{N} must already be what Digits calls numeric.
            if hf_numeric(chr(cp)) != category.startswith("N"):
                sys.exit(f"Digits and \\p{{N}} disagree on assigned U+{cp:04X} ({category}): extend the pattern")
            continue
        k = hf_class(chr(cp))
        if k:
            add(k, cp)
        if hf_numeric(chr(cp)):
            add("NUMERIC", cp)

    def spell(rs):
        return "".join("\\\\x{%X}" % a if a == b else "\\\\x{%X}-\\\\x{%X}" % (a, b) for a, b in rs)

    with open(path, "w") as f:
        f.write("// Generated by tools/reference/make_tokenizer_reference.py: do not edit.\n"
                "// Code points that became letters (L) or numbers (N) after Unicode 14.0, PCRE2 10.42's tables,\n"
                "// as HF tokenizers classifies them; added to \\p{L} / \\p{N} so that the split agrees.\n"
                "#pragma once\n\n")
        f.write('#define MINIGPT_EXTRA_L "%s"\n' % spell(ranges["L"]))
        f.write('#define MINIGPT_EXTRA_N "%s"\n' % spell(ranges["N"]))
        f.write("// Numeric (Rust's char::is_numeric, tokenizers' Digits pre-tokenizer) after Unicode 14.0.\n")
        f.write('#define MINIGPT_EXTRA_NUMERIC "%s"\n' % spell(ranges["NUMERIC"]))


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--fixtures", default=os.path.join(root, "tests", "fixtures"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "tokenizer"))
    args = ap.parse_args()
    tokdir = os.path.join(args.fixtures, "gpt2-tokenizer")
    os.makedirs(args.out, exist_ok=True)

    # Special tokens recognised: the full tokenizer.json (its added_tokens split the text first).
    hf_special = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    # Special tokens as text: the same BPE without added tokens.
    hf_plain = Tokenizer(models.BPE.from_file(os.path.join(tokdir, "vocab.json"), os.path.join(tokdir, "merges.txt")))
    hf_plain.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False)

    try:
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks

        ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(tokdir, "merges.txt"), os.path.join(tokdir, "vocab.json"))
        tk = tiktoken.Encoding(
            "gpt2-local",
            pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
            mergeable_ranks=ranks,
            special_tokens={"<|endoftext|>": 50256},
        )
    except ImportError:
        tk = None
        print("tiktoken not installed: HF tokenizers only", file=sys.stderr)

    def plain_ids(text):
        ids = hf_plain.encode(text).ids
        if tk is not None:
            t = tk.encode(text, disallowed_special=())
            if t != ids:
                sys.exit(f"HF and tiktoken disagree on {text!r}:\n  hf {ids}\n  tk {t}")
        return ids

    def special_ids(text):
        ids = hf_special.encode(text).ids
        if tk is not None:
            t = tk.encode(text, allowed_special="all")
            if t != ids:
                sys.exit(f"HF and tiktoken disagree (specials allowed) on {text!r}:\n  hf {ids}\n  tk {t}")
        return ids

    def piece_lengths(text):
        # The byte-level pieces have one character per byte, so len() is the byte length.
        return [len(p) for p, _ in pre.pre_tokenize_str(text)]

    write_unicode_extra(os.path.join(root, "src", "tokenizer", "unicode_extra.h"), pre)

    cases = [(name, text) for name, text in HAND_PICKED]
    rng = random.Random(20240601)
    cases += [("random_%03d" % i, random_text(rng)) for i in range(400)]
    corpus = []
    for name, text in cases:
        corpus.append({"name": name, "text": text, "ids": plain_ids(text), "ids_special": special_ids(text),
                       "pieces": piece_lengths(text)})
    with open(os.path.join(args.out, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")

    longs = []
    for name, unit, times, suffix in [
            ("spaces_100k", " ", 100000, ""), ("a_100k", "a", 100000, ""), ("spaces_then_x", " ", 99999, "x"),
            ("newlines_50k", "\n", 50000, ""), ("ab_50k", "ab", 50000, ""), ("digits_100k", "7", 100000, ""),
            ("emoji_20k", "😀", 20000, ""), ("cjk_30k", "語", 30000, ""), ("dots_60k", ".", 60000, ""),
            ("word_space_20k", "hello ", 20000, "")]:
        ids = plain_ids(unit * times + suffix)
        longs.append({"name": name, "unit": unit, "times": times, "suffix": suffix, "count": len(ids),
                      "fnv1a64": fnv1a64(ids), "head": ids[:64]})
    with open(os.path.join(args.out, "long.json"), "w", encoding="utf-8") as f:
        json.dump(longs, f, ensure_ascii=True, indent=1)
        f.write("\n")

    with open(os.path.join(args.fixtures, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        shakes = f.read()
    ids = plain_ids(shakes)
    chunk = 4096
    ts = {"file": "data/tinyshakespeare.txt", "count": len(ids), "fnv1a64": fnv1a64(ids), "chunk": chunk,
          "chunk_fnv1a64": [fnv1a64(ids[i:i + chunk]) for i in range(0, len(ids), chunk)],
          "head": ids[:256], "tail": ids[-256:]}
    with open(os.path.join(args.out, "tinyshakespeare.json"), "w") as f:
        json.dump(ts, f, indent=1)
        f.write("\n")

    # Pre-token boundaries over Unicode, in blocks so that a failure names the block.
    blocks = []
    for lo in list(range(0, 0x40000, 0x1000)) + list(range(0xE0000, 0x110000, 0x10000)):
        hi = lo + (0x1000 if lo < 0x40000 else 0x10000)
        lengths = piece_lengths(codepoint_text(lo, hi))
        blocks.append({"lo": lo, "hi": hi, "pieces": len(lengths), "fnv1a64": fnv1a64(lengths)})
    with open(os.path.join(args.out, "codepoints.json"), "w") as f:
        json.dump(blocks, f, indent=0)
        f.write("\n")

    # The bytes of every token, from GPT-2's own byte decoder over vocab.json (decode of each single id).
    byte_decoder = {u: b for b, u in bytes_to_unicode().items()}
    with open(os.path.join(tokdir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    id_to_sym = {i: s for s, i in vocab.items()}
    seq = []
    for i in range(len(id_to_sym)):
        bs = list(id_to_sym[i].encode("utf-8")) if id_to_sym[i] == "<|endoftext|>" else [byte_decoder[c] for c in id_to_sym[i]]
        seq += [len(bs)] + bs
    with open(os.path.join(args.out, "vocab_bytes.json"), "w") as f:
        json.dump({"n_vocab": len(id_to_sym), "fnv1a64": fnv1a64(seq),
                   "what": "FNV-1a over, for each id in order: byte count, then each byte"}, f, indent=1)
        f.write("\n")

    # A byte-level model: the 256 byte symbols, id = byte value, merges.txt with only its header.
    bdir = os.path.join(args.out, "bytelevel")
    os.makedirs(bdir, exist_ok=True)
    b2u = bytes_to_unicode()
    with open(os.path.join(bdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({b2u[b]: b for b in range(256)}, f, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(bdir, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    hf_bytes = Tokenizer(models.BPE.from_file(os.path.join(bdir, "vocab.json"), os.path.join(bdir, "merges.txt")))
    hf_bytes.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    byte_cases = [{"text": t, "ids": hf_bytes.encode(t).ids} for _, t in HAND_PICKED[:40]]
    with open(os.path.join(bdir, "golden.json"), "w") as f:
        json.dump(byte_cases, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(corpus)} corpus cases, {len(longs)} long cases, {len(blocks)} code point blocks, "
          f"tinyshakespeare {len(ids)} ids to {args.out}")


if __name__ == "__main__":
    main()
