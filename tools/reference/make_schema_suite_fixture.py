#!/usr/bin/env python3
"""Writes tests/fixtures/json-schema/suite-draft2020-12.json: every distinct schema of the official
JSON-Schema-Test-Suite's draft 2020-12 cases (its required ones, json/tests/draft2020-12/*.json; not
optional/), as the `jsonschema` package's sdist carries the suite, each once with the file and description
of the first case that has it. The test instances are left out (the check validates minigpt's own outputs
with `jsonschema`, not the suite's instances). Re-run to remake it:

    python3 tools/reference/make_schema_suite_fixture.py [--sdist jsonschema-4.26.0.tar.gz]

Without --sdist it runs `pip download --no-binary :all: --no-deps jsonschema==4.26.0` into a temporary
folder; either way the archive's SHA-256 is checked.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile

VERSION = "4.26.0"
SHA256 = "0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326"
SUITE = f"jsonschema-{VERSION}/json/tests/draft2020-12/"
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "json-schema",
                   "suite-draft2020-12.json")


def write_fixture(path: str, out: dict) -> None:
    """The fixture's JSON with one schema a line (short diffs when the suite changes)."""
    head = {k: v for k, v in out.items() if k != "schemas"}
    with open(path, "w") as f:
        f.write("{\n")
        for k, v in head.items():
            f.write(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write('"schemas": [\n')
        f.write(",\n".join(json.dumps(s, ensure_ascii=False) for s in out["schemas"]))
        f.write("\n]}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", help="the jsonschema sdist (else pip downloads it)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.sdist
        if path is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                            "-d", tmp, f"jsonschema=={VERSION}"], check=True)
            path = os.path.join(tmp, f"jsonschema-{VERSION}.tar.gz")
        got = hashlib.sha256(open(path, "rb").read()).hexdigest()
        if got != SHA256:
            sys.exit(f"{path}: SHA-256 {got}, expected {SHA256} (jsonschema {VERSION})")
        schemas, seen, cases = [], set(), 0
        with tarfile.open(path) as tar:
            names = sorted(m.name for m in tar.getmembers()
                           if m.name.startswith(SUITE) and m.name.endswith(".json") and "/" not in m.name[len(SUITE):])
            for name in names:
                for case in json.load(tar.extractfile(name)):
                    cases += 1
                    key = json.dumps(case["schema"], sort_keys=True)
                    if key in seen:
                        continue
                    seen.add(key)
                    schemas.append({"file": name[len(SUITE):], "description": case["description"],
                                    "schema": case["schema"]})
    out = {
        "source": f"JSON-Schema-Test-Suite, draft 2020-12 (json/tests/draft2020-12/*.json, not optional/), as the "
                  f"jsonschema {VERSION} sdist on PyPI carries it (sha256 {SHA256}); each distinct schema of its "
                  f"{cases} cases once, without the test instances; made by "
                  "tools/reference/make_schema_suite_fixture.py",
        "schemas": schemas,
    }
    write_fixture(OUT, out)
    print(f"{OUT}: {len(schemas)} schemas from {cases} cases in {len(names)} files")


if __name__ == "__main__":
    main()
