#!/usr/bin/env python3
"""Writes tests/fixtures/json-schema/random-schemas.json: 200 random JSON Schemas (draft 2020-12), seeded
and so the same on every run, built from the keywords minigpt's engine enforces: objects (properties,
required, additionalProperties), arrays (items, prefixItems, minItems/maxItems), enum, const, strings
(minLength/maxLength, or a pattern, or a format), integers and numbers (minimum/maximum, their exclusive
forms, multipleOf on a bounded integer), booleans, null, anyOf, and $ref to $defs, nested up to 3 levels.
Strings and arrays are bounded (maxLength, maxItems) so that a random-weight model's output can end within
a bounded number of tokens. Each schema is checked against the draft 2020-12 metaschema when `jsonschema`
is importable. Usage: python3 tools/reference/make_random_schemas.py [--count 200] [--seed 70]
"""
import argparse
import json
import os
import random

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "json-schema", "random-schemas.json")
WORDS = ["name", "id", "age", "tags", "kind", "value", "items", "ok", "score", "city", "note", "count", "when",
         "owner", "size", "color", "level", "email", "path", "code"]
PATTERNS = ["^[a-z]{1,8}$", "^[A-Z][a-z]{0,6}$", "^[0-9]{3}-[0-9]{4}$", "^(yes|no|maybe)$", "^[a-f0-9]{4,8}$",
            "^x[0-9]{1,3}$"]
# Formats whose strings have a bounded length (an email address has none).
FORMATS = ["date", "time", "date-time", "ipv4", "ipv6", "uuid"]


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.defs: dict = {}

    def string(self) -> dict:
        r = self.rng.random()
        if r < 0.2:
            return {"type": "string", "pattern": self.rng.choice(PATTERNS)}
        if r < 0.3:
            return {"type": "string", "format": self.rng.choice(FORMATS)}
        lo = self.rng.randint(0, 3)
        s = {"type": "string", "maxLength": self.rng.randint(max(lo, 1), 12)}
        if lo:
            s["minLength"] = lo
        return s

    def integer(self) -> dict:
        lo = self.rng.randint(-1000, 1000)
        hi = lo + self.rng.randint(0, 5000)
        s: dict = {"type": "integer"}
        r = self.rng.random()
        if r < 0.3:
            s["minimum"], s["maximum"] = lo, hi
        elif r < 0.45:
            s["exclusiveMinimum"], s["maximum"] = lo, hi + 1
        elif r < 0.6:
            s["minimum"], s["maximum"], s["multipleOf"] = lo, hi + 20, self.rng.choice([2, 3, 5, 10])
        elif r < 0.75:
            s["minimum"] = lo
        return s

    def number(self) -> dict:
        lo = round(self.rng.uniform(-100, 100), 2)
        s: dict = {"type": "number"}
        r = self.rng.random()
        if r < 0.4:
            s["minimum"], s["maximum"] = lo, round(lo + self.rng.uniform(0.5, 500), 2)
        elif r < 0.6:
            s["exclusiveMinimum"], s["exclusiveMaximum"] = lo, round(lo + self.rng.uniform(0.5, 500), 2)
        elif r < 0.75:
            s["maximum"] = lo
        return s

    def scalar(self) -> dict:
        r = self.rng.random()
        if r < 0.3:
            return self.string()
        if r < 0.5:
            return self.integer()
        if r < 0.62:
            return self.number()
        if r < 0.72:
            return {"type": "boolean"}
        if r < 0.77:
            return {"type": "null"}
        if r < 0.9:
            vals = self.rng.sample(["red", "green", "blue", 1, 2.5, None, True, "a b", "é", "x\"y"],
                                   self.rng.randint(1, 4))
            return {"enum": vals}
        return {"const": self.rng.choice(["fixed", 7, False, None, [1, 2], {"k": "v"}])}

    def any(self, depth: int) -> dict:
        if depth >= 3:
            return self.scalar()
        r = self.rng.random()
        if r < 0.3:
            return self.obj(depth)
        if r < 0.45:
            return self.array(depth)
        if r < 0.55:
            return {"anyOf": [self.any(depth + 1) for _ in range(self.rng.randint(2, 3))]}
        if r < 0.65:
            return self.ref(depth)
        return self.scalar()

    def ref(self, depth: int) -> dict:
        made = sorted(n for n, d in self.defs.items() if d is not None)
        if made and self.rng.random() < 0.4:
            return {"$ref": "#/$defs/" + self.rng.choice(made)}
        name = f"d{len(self.defs)}"
        self.defs[name] = None  # while it is made: its own $refs name only defs already made
        self.defs[name] = self.any(depth + 1)
        return {"$ref": f"#/$defs/{name}"}

    def obj(self, depth: int) -> dict:
        names = self.rng.sample(WORDS, self.rng.randint(1, 4))
        props = {n: self.any(depth + 1) for n in names}
        s = {"type": "object", "properties": props,
             "required": [n for n in names if self.rng.random() < 0.7]}
        if self.rng.random() < 0.5:
            s["additionalProperties"] = False
        return s

    def array(self, depth: int) -> dict:
        if self.rng.random() < 0.25:
            return {"type": "array", "prefixItems": [self.any(depth + 1) for _ in range(self.rng.randint(1, 3))],
                    "items": False}
        lo = self.rng.randint(0, 2)
        return {"type": "array", "items": self.any(depth + 1), "minItems": lo,
                "maxItems": self.rng.randint(max(lo, 1), 4)}


def make(rng: random.Random) -> dict:
    g = Gen(rng)
    root = g.obj(0) if rng.random() < 0.6 else g.any(0)
    if g.defs:
        root = {**root, "$defs": g.defs} if "$ref" not in root else {"$ref": root["$ref"], "$defs": g.defs}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **root}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=70)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    schemas = [{"file": "random", "description": f"seed {args.seed}, schema {i}", "schema": make(rng)}
               for i in range(args.count)]
    try:
        import jsonschema
        for s in schemas:
            jsonschema.Draft202012Validator.check_schema(s["schema"])
    except ImportError:
        pass
    from make_schema_suite_fixture import write_fixture
    write_fixture(OUT, {"source": f"tools/reference/make_random_schemas.py --count {args.count} --seed {args.seed}",
                        "schemas": schemas})
    print(f"{OUT}: {len(schemas)} schemas")


if __name__ == "__main__":
    main()
