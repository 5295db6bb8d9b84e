#!/usr/bin/env python3
"""Structured output's validity check (issue 70): for each schema of a fixture (tests/fixtures/json-schema/),
minigpt either refuses it in one line naming a keyword that docs/structured-output.md lists as refused, or
every output sampled under it (minigpt_schema_sample: temperature 1, seeds 1..N) validates against it with
the `jsonschema` package (draft 2020-12,
where `format` is an annotation; the formats the engine enforces are checked apart and reported). An output that generation cut (max new
tokens, a full context) is not complete JSON: it is counted apart as cut, never as valid; with
--cut-fails (the random schemas, bounded so that their outputs end) a cut output fails the check.

Usage: check.py --sampler BIN --model PATH --fixture FILE [--samples 20] [--max-new-tokens 256] [--every 1]
                [--cut-fails] [--raw OUT.jsonl] [--threads 1]
Prints the figures (schemas, refused by keyword, sampled, outputs valid / cut / invalid) and each failure;
exit status 1 on any failure. --raw keeps the sampler's output.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

import jsonschema

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOCS = os.path.join(ROOT, "docs", "structured-output.md")


# `format` is an annotation in draft 2020-12 (jsonschema asserts none by default): outputs are valid without
# it. The formats the engine enforces are checked apart, those jsonschema can check without optional packages,
# and reported (the engine's are looser in places).
FORMATS = jsonschema.FormatChecker(())
FORMATS.checkers = {f: c for f, c in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers.items()
                    if f in ("date", "time", "date-time", "email", "ipv4", "ipv6", "uuid", "hostname", "uri",
                             "duration")}


def refused_keywords() -> list[str]:
    """The keywords docs/structured-output.md lists under its heading "Refused keywords": each in backticks."""
    text = open(DOCS, encoding="utf-8").read()
    m = re.search(r"^### Refused keywords\n(.*?)(?=^#)", text, re.S | re.M)
    if not m:
        sys.exit(f"{DOCS}: no section '### Refused keywords'")
    return sorted(set(re.findall(r"`([$A-Za-z]+)`", m.group(1))), key=len, reverse=True)


def named_keyword(message: str, keywords: list[str]) -> str | None:
    """The keyword a refusal names, where docs/structured-output.md lists it among the refused: the first
    quoted word (minigpt's own checks: '"uniqueItems" at /a is not supported', '"maximum" at / is not
    supported without "type": "integer"' names both) or else the first bare one (the engine's own messages:
    "multipleOf for type:integer must be an integer"); None when the message names none of them."""
    quoted: list[str] = re.findall(r'"([$A-Za-z]+)"', message)
    if any(w in keywords for w in quoted):
        return quoted[0]
    text = message.replace("not supported", "")
    best = None
    for k in keywords:
        m = re.search(r"(?<![$A-Za-z])" + re.escape(k) + r"(?![A-Za-z])", text)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), k)
    return best[1] if best else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sampler")
    ap.add_argument("--model", help="a model directory or GGUF file")
    ap.add_argument("--real-smollm2", action="store_true",
                    help="the model: the real SmolLM2-135M-Instruct Q4_1 GGUF ($MINIGPT_SMOLLM2_GGUF, else the model "
                         "cache); exit 77 (ctest's skip) saying so where it is absent")
    ap.add_argument("--fixture", required=True, action="append", help="a fixture; may be given again")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cut-fails", action="store_true")
    ap.add_argument("--raw", help="write the sampler's output (JSON lines) here")
    ap.add_argument("--from-raw", help="check this sampler output (a run's --raw, or the sampler's stdout, "
                                       "whole or cut short) instead of running the sampler")
    args = ap.parse_args()

    if args.real_smollm2:
        cache = os.environ.get("MINIGPT_MODEL_CACHE") or os.path.expanduser("~/.cache/minigpt-models")
        args.model = os.environ.get("MINIGPT_SMOLLM2_GGUF") or os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")
        if not os.path.exists(args.model):
            print(f"skipped: {args.model} is absent (set MINIGPT_SMOLLM2_GGUF)")
            return 77
    if not args.model and not args.from_raw:
        ap.error("--model or --real-smollm2")
    args.model = args.model or args.from_raw
    keywords = refused_keywords()
    if args.from_raw and len(args.fixture) > 1:
        ap.error("--from-raw takes one --fixture")
    status = 0
    for fixture_path in args.fixture:
        status = max(status, check_fixture(args, fixture_path, keywords))
    return status


def check_fixture(args: argparse.Namespace, fixture_path: str, keywords: list[str]) -> int:
    """Samples (or reads) the outputs under one fixture's schemas and checks them: 1 on any failure."""
    fixture = json.load(open(fixture_path, encoding="utf-8"))["schemas"]
    cmd = [args.sampler, args.model, fixture_path, "--samples", str(args.samples), "--max-new-tokens",
           str(args.max_new_tokens), "--every", str(args.every), "--threads", str(args.threads)]
    if args.from_raw:
        stdout = open(args.from_raw, encoding="utf-8", errors="replace").read()
    else:
        run = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        stdout = run.stdout
        if args.raw:
            with open(args.raw, "w", encoding="utf-8") as f:
                f.write(stdout)
        if run.returncode != 0:
            print(f"{' '.join(cmd)}: exit {run.returncode}: {run.stderr.strip()}")
            return 1

    failures: list[str] = []
    refused: collections.Counter[str] = collections.Counter()
    n_schemas = n_sampled = n_valid = n_cut = n_invalid = 0
    schemas_with_cut = 0
    formats: collections.Counter[str] = collections.Counter()
    format_examples: list[str] = []
    for line in stdout.split("\n"):
        if not line:
            continue
        r = json.loads(line)
        n_schemas += 1
        entry = fixture[r["index"]]
        name = f"#{r['index']} {entry['file']}: {entry['description']}"
        if "refused" in r:
            msg = r["refused"]
            kw = named_keyword(msg, keywords)
            if "\n" in msg or kw is None:
                failures.append(f"{name}: refused without naming a documented keyword: {msg!r}")
            refused[kw or "(none)"] += 1
            continue
        n_sampled += 1
        validator = jsonschema.Draft202012Validator(entry["schema"])
        format_validator = jsonschema.Draft202012Validator(entry["schema"], format_checker=FORMATS)
        cut_here = 0
        for seed, s in enumerate(r["samples"], start=1):
            if s["reason"] in ("length", "context"):
                n_cut += 1
                cut_here += 1
                if args.cut_fails:
                    failures.append(f"{name}: seed {seed}: cut ({s['reason']}) before the JSON ended: {s['text']!r}")
                continue
            try:
                value = json.loads(s["text"])
            except json.JSONDecodeError as e:
                n_invalid += 1
                failures.append(f"{name}: seed {seed}: not JSON ({e}): {s['text']!r}")
                continue
            try:
                errors = sorted(validator.iter_errors(value), key=lambda err: list(err.path))
            except Exception as e:  # a $ref jsonschema cannot resolve (another document): no verdict
                n_invalid += 1
                failures.append(f"{name}: seed {seed}: jsonschema cannot validate against it: {e!r}")
                continue
            if errors:
                n_invalid += 1
                failures.append(f"{name}: seed {seed}: {s['text']!r} does not validate: {errors[0].message} "
                                f"(schema {json.dumps(entry['schema'])})")
            else:
                n_valid += 1
                for err in format_validator.iter_errors(value):
                    formats[err.validator_value] += 1
                    if len(format_examples) < 5:
                        format_examples.append(f"{name}: seed {seed}: {err.message}")
        schemas_with_cut += cut_here > 0

    expected = len(range(0, len(fixture), args.every))
    if n_schemas != expected and not args.from_raw:
        failures.append(f"the sampler reported {n_schemas} schemas of {expected}")
    print(f"{os.path.basename(fixture_path)} on {os.path.basename(args.model.rstrip('/'))}: {n_schemas} schemas, "
          f"{sum(refused.values())} refused, {n_sampled} sampled ({args.samples} outputs each, max "
          f"{args.max_new_tokens} new tokens): {n_valid} outputs valid, {n_cut} cut by length "
          f"(in {schemas_with_cut} schemas), {n_invalid} invalid")
    print("refused by keyword: " + ", ".join(f"{k} {n}" for k, n in refused.most_common()))
    if formats:
        # Not failures: `format` asserts nothing in draft 2020-12 unless a validator opts in.
        print("valid outputs whose format jsonschema's format checker rejects: " +
              ", ".join(f"{k} {n}" for k, n in formats.most_common()))
        for x in format_examples:
            print("  e.g. " + x)
    for failure in failures:
        print("FAIL " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
