#!/usr/bin/env python3
"""Writes the post-processor fixtures of tests/test_tokenizer_postprocessor.cpp with Hugging Face `tokenizers`.

Usage: python3 tools/reference/make_postprocessor_reference.py [--fixtures tests/fixtures]
                                                      [--out tests/fixtures/tokenizer/postprocessor]

Every tokenizer.json here is built and saved by `tokenizers` itself (checked with 0.23.3) from a reduced
GPT-2 vocabulary: the 256 byte symbols and the first N_MERGES merges of FIXTURES/gpt2-tokenizer (GPT-2
gives merge r the id 256 + r, so the ids are GPT-2's), plus a few added special tokens. Each directory
differs only in its post_processor:

  bos/                 TemplateProcessing "<s> $A"              (a BOS, as OPT's "</s> $A")
  eos/                 TemplateProcessing "$A </s>"             (an EOS)
  both/                TemplateProcessing "<s> $A [END]" where [END] stands for two ids (</s>, <|endoftext|>)
  bytelevel_template/  Sequence[ByteLevel, TemplateProcessing "<|begin_of_text|> $A"]  (Llama 3's shape)
  bert/                BertProcessing (minigpt refuses it: Unsupported)

golden.json: for each directory (and GPT-2's own tokenizer.json, whose post_processor is ByteLevel), the
ids `Tokenizer.encode(text, add_special_tokens=True)` and `add_special_tokens=False` give for each text
("ids_add", "ids_raw"). `tokenizers` always recognises added tokens in the text, so the C++ test compares
with encode(text, allow_special = true). Deterministic: re-running it gives byte-identical files.
"""
import argparse
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

N_MERGES = 300

# Added tokens, ids right after the reduced vocabulary.
SPECIALS = ["<|endoftext|>", "<s>", "</s>", "<|begin_of_text|>", "<pad>"]

TEXTS = [
    "",
    "Hello world",
    " leading space",
    "the quick brown fox jumps over the lazy dog\n",
    "café naïve 日本語 🍕",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "a<s>b</s>c",  # added tokens in the text: recognised by `tokenizers` (and by minigpt with allow_special)
    "<|endoftext|>",
]


def build_base(tokdir):
    with open(os.path.join(tokdir, "vocab.json"), encoding="utf-8") as f:
        full_vocab = json.load(f)
    with open(os.path.join(tokdir, "merges.txt"), encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if not l.startswith("#version")]
    merges = [tuple(l.split(" ")) for l in lines[:N_MERGES]]
    vocab = {s: i for s, i in full_vocab.items() if i < 256 + N_MERGES}
    for r, (a, b) in enumerate(merges):
        assert vocab[a + b] == 256 + r, (a, b)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    assert sorted(ids.values()) == list(range(256 + N_MERGES, 256 + N_MERGES + len(SPECIALS))), ids
    return tok, ids


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--fixtures", default=os.path.join(root, "tests", "fixtures"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "tokenizer", "postprocessor"))
    args = ap.parse_args()
    tokdir = os.path.join(args.fixtures, "gpt2-tokenizer")

    _, sid = build_base(tokdir)
    post = {
        "bos": processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", sid["<s>"])]),
        "eos": processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                             special_tokens=[("</s>", sid["</s>"])]),
        "both": processors.TemplateProcessing(
            single="<s> $A [END]", pair="<s> $A [END] $B:1 [END]:1",
            special_tokens=[("<s>", sid["<s>"]),
                            {"id": "[END]", "ids": [sid["</s>"], sid["<|endoftext|>"]], "tokens": ["</s>", "<|endoftext|>"]}]),
        "bytelevel_template": processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(single="<|begin_of_text|> $A:0",
                                          pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1",
                                          special_tokens=[("<|begin_of_text|>", sid["<|begin_of_text|>"])]),
        ]),
        "bert": processors.BertProcessing(("</s>", sid["</s>"]), ("<s>", sid["<s>"])),  # (sep, cls)
    }

    golden = []
    for name, pp in post.items():
        tok, _ = build_base(tokdir)
        tok.post_processor = pp
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        tok.save(path, pretty=False)
        # What was written is what the reference encodes with.
        tok = Tokenizer.from_file(path)
        golden.append({"dir": name, "cases": [
            {"text": t, "ids_add": tok.encode(t, add_special_tokens=True).ids,
             "ids_raw": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]})

    gpt2 = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    assert json.loads(gpt2.to_str())["post_processor"]["type"] == "ByteLevel"
    golden.append({"dir": "../../gpt2-tokenizer", "cases": [
        {"text": t, "ids_add": gpt2.encode(t, add_special_tokens=True).ids,
         "ids_raw": gpt2.encode(t, add_special_tokens=False).ids} for t in TEXTS]})

    # One case a line: readable diffs, and a small file.
    lines = ['{"what": %s,' % json.dumps("tokenizers.Tokenizer.from_file(dir/tokenizer.json).encode(text, "
                                          "add_special_tokens=...).ids; dir relative to this file; made by "
                                          "tools/reference/make_postprocessor_reference.py"),
             ' "specials": %s,' % json.dumps(sid), ' "fixtures": [']
    for k, fx in enumerate(golden):
        lines.append('  {"dir": %s, "cases": [' % json.dumps(fx["dir"]))
        lines += ["   " + json.dumps(c) + ("," if i + 1 < len(fx["cases"]) else "") for i, c in enumerate(fx["cases"])]
        lines.append("  ]}" + ("," if k + 1 < len(golden) else ""))
    lines.append(" ]}")
    with open(os.path.join(args.out, "golden.json"), "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(post)} tokenizer.json fixtures and golden.json to {args.out}")


if __name__ == "__main__":
    main()
