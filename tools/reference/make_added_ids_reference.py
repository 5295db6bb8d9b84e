#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/added_ids/: GPT-2's tokenizer with added tokens whose file ids disagree with
the ids the reference gives them, and what `tokenizers` / `transformers` encode with them.

Usage: python3 tools/reference/make_added_ids_reference.py [--fixtures tests/fixtures]

Neither reference takes an added token's id from the file. `tokenizers` (Tokenizer.from_file, and so
transformers' AutoTokenizer over a tokenizer.json) adds the tokens in file order: a text the vocabulary or an
earlier added token has keeps that id, any other gets the next id past the vocabulary. transformers 5.23
over vocab.json + merges.txt does the same with tokenizer_config.json's added_tokens_decoder, taken in order of
its keys (the ids). A file written by either agrees with that; a hand-edited one may not, and then the ids the
reference encodes to are not the file's.

Writes golden.json only (the test makes the same files from tests/fixtures/gpt2-tokenizer/ in memory): the two
inputs, "added_tokens" (GPT-2's tokenizer.json with its added_tokens replaced by ADDED, file order as listed)
and "added_tokens_decoder" (its vocab.json + merges.txt with a tokenizer_config.json whose added_tokens_decoder
is ADDED_DECODER), both made by editing the JSON, not by saving a tokenizer (which would write the assigned
ids); and for each, "token_ids" {content: id} as the reference resolves them and per case the text, "ids"
(special tokens as text), "ids_special" (recognised) and "decoded" (decode(ids_special), special tokens kept).
"""
import argparse
import json
import os
import shutil
import tempfile

from tokenizers import Tokenizer
from transformers import AutoTokenizer


def added(id_, content, special, normalized=False):
    a = {"content": content, "single_word": False, "lstrip": False, "rstrip": False, "normalized": normalized,
         "special": special}
    return a if id_ is None else {"id": id_, **a}


# tokenizer.json, in this order. Assigned by tokenizers: <|endoftext|> 50256 (in the vocabulary), <|sep|>
# 50257, [USER] 50258, " the" 50259 (the vocabulary has "Ġthe", not " the"), hello 31373 (the vocabulary's),
# <|sep|> again 50257, café 50260, é! 50261 (the pair at one id that fuzzing found).
ADDED = [added(50256, "<|endoftext|>", True, True), added(50300, "<|sep|>", True), added(50257, "[USER]", False),
         added(50259, " the", False), added(60000, "hello", False), added(50258, "<|sep|>", False),
         added(50262, "caf\u00e9", False), added(50262, "\u00e9!", False)]

# tokenizer_config.json's added_tokens_decoder (keys are ids; transformers takes them in id order).
ADDED_DECODER = {"50300": added(None, "<|sep|>", True), "50256": added(None, "<|endoftext|>", True, True),
                 "50257": added(None, "hello", False), "50280": added(None, "[USER]", False),
                 "50270": added(None, "caf\u00e9", False)}

CASES = [
    ("all", "a<|sep|>b [USER] hello the caf\u00e9 \u00e9! <|endoftext|>x"),
    ("adjacent", "<|sep|><|sep|>[USER][USER]hellohello"),
    ("inside_words", "Othello thee theatre hello, café!"),
    ("none", "Nothing added here."),
]


def golden_tokenizers(path):
    tok = Tokenizer.from_file(path)
    plain = Tokenizer.from_file(path)
    plain.encode_special_tokens = True
    contents = sorted({a["content"] for a in ADDED})
    out = {"token_ids": {c: tok.token_to_id(c) for c in contents}, "cases": []}
    for name, text in CASES:
        special = tok.encode(text, add_special_tokens=False).ids
        out["cases"].append({"name": name, "text": text, "ids": plain.encode(text, add_special_tokens=False).ids,
                             "ids_special": special, "decoded": tok.decode(special, skip_special_tokens=False)})
    return out


def golden_transformers(d):
    tok = AutoTokenizer.from_pretrained(d)
    contents = sorted({a["content"] for a in ADDED_DECODER.values()})
    out = {"class": type(tok).__name__, "token_ids": {c: tok.convert_tokens_to_ids(c) for c in contents},
           "cases": []}
    for name, text in CASES:
        special = tok(text, add_special_tokens=False)["input_ids"]
        plain = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        out["cases"].append({"name": name, "text": text, "ids": plain, "ids_special": special,
                             "decoded": tok.decode(special, skip_special_tokens=False)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
    args = ap.parse_args()
    src = os.path.join(args.fixtures, "gpt2-tokenizer")
    out = os.path.join(args.fixtures, "tokenizer", "added_ids")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
            j = json.load(f)
        j["added_tokens"] = ADDED
        tj = os.path.join(tmp, "tokenizer.json")
        with open(tj, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        cfg_dir = os.path.join(tmp, "tokenizer_config")
        os.makedirs(cfg_dir)
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(os.path.join(src, name), os.path.join(cfg_dir, name))
        with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        cfg["added_tokens_decoder"] = ADDED_DECODER
        with open(os.path.join(cfg_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False)
        golden = {"what": "tokenizers.Tokenizer.from_file over GPT-2's tokenizer.json with these added_tokens, and "
                          "transformers.AutoTokenizer over GPT-2's vocab.json + merges.txt with a "
                          "tokenizer_config.json holding this added_tokens_decoder: the ids they give the added "
                          "tokens and encode to. Made by tools/reference/make_added_ids_reference.py",
                  "added_tokens": ADDED, "added_tokens_decoder": ADDED_DECODER,
                  "tokenizer.json": golden_tokenizers(tj), "tokenizer_config": golden_transformers(cfg_dir)}
    with open(os.path.join(out, "golden.json"), "w", encoding="ascii") as f:
        json.dump(golden, f, ensure_ascii=True, indent=1)
        f.write("\n")
    for k in ("tokenizer.json", "tokenizer_config"):
        print(k, golden[k]["token_ids"])


if __name__ == "__main__":
    main()
