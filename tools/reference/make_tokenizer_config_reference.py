#!/usr/bin/env python3
"""Golden ids for GPT-2's vocab.json + merges.txt with a tokenizer_config.json beside them (no tokenizer.json),
as transformers loads such a folder (tests/test_tokenizer.cpp, TokenizerConfig.*).

Usage: python3 tools/reference/make_tokenizer_config_reference.py [--fixtures tests/fixtures]

Writes FIXTURES/tokenizer/gpt2_config/tokenizer_config.json (GPT-2's, plus a non-special added token "[USER]"
as id 50257 and a special "<|sep|>" as id 50258, with lstrip) and golden.json: for each text, the ids of
transformers.AutoTokenizer.from_pretrained(folder) (vocab.json and merges.txt copied from
FIXTURES/gpt2-tokenizer into a scratch folder, so that they are not duplicated in the repository),
encode(text, add_special_tokens=False), and decode of a few ids. Deterministic (checked with transformers
5.23.0, tokenizers 0.23.3).
"""
import argparse
import json
import os
import shutil
import tempfile

import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = ["Hello[USER]world", "[USER]", " [USER] hi", "a<|sep|>b", "a <|sep|> b", "x<|endoftext|>y",
         "[USE R] [user]", "Hello world"]
DECODE = [[50257], [15496, 50257, 6894], [50258, 64], [50256]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures"))
    args = ap.parse_args()
    out = os.path.join(args.fixtures, "tokenizer", "gpt2_config")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(args.fixtures, "gpt2-tokenizer", "tokenizer_config.json")) as f:
        config = json.load(f)
    flags = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    config["added_tokens_decoder"]["50257"] = dict(flags, content="[USER]", special=False)
    config["added_tokens_decoder"]["50258"] = dict(flags, content="<|sep|>", special=True, lstrip=True)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    with tempfile.TemporaryDirectory() as d:
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(os.path.join(args.fixtures, "gpt2-tokenizer", name), d)
        shutil.copy(os.path.join(out, "tokenizer_config.json"), d)
        tok = transformers.AutoTokenizer.from_pretrained(d)
        golden = {"what": "transformers %s AutoTokenizer.from_pretrained(vocab.json + merges.txt + "
                          "tokenizer_config.json): encode(text, add_special_tokens=False); decode(ids). Made by "
                          "tools/reference/make_tokenizer_config_reference.py" % transformers.__version__,
                  "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in CASES],
                  "decode": [{"ids": ids, "text": tok.decode(ids)} for ids in DECODE],
                  "n_tokens": len(tok)}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=True)
        f.write("\n")
    for c in golden["cases"]:
        print(repr(c["text"]), c["ids"])
    for c in golden["decode"]:
        print(c["ids"], repr(c["text"]))


if __name__ == "__main__":
    main()
