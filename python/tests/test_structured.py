"""Model.chat() and structured output (json_schema=, grammar=, json_object=) on chatml-tiny, a random-weight
GPT-2 with Qwen2.5's chat template (tools/reference/make_chat_reference.py):

- chat() renders the prompt transformers' apply_chat_template(tokenize=True, add_generation_prompt=True)
  gives, and its greedy reply is transformers' generate(do_sample=False) (the fixture's reference.json);
- sampled at temperature 1 with several seeds, the model's free output is no JSON of the schema and no word of
  the grammar (so the checks below can fail), and constrained it is, through generate() and chat(), whole
  and streamed; the JSON is checked with the `jsonschema` package where it is installed, else by the schema's
  few keywords here;
- a schema or grammar the engine refuses raises ArgumentError (a ValueError) with the engine's message, the
  one the CLI prints for the same schema;
- the real SmolLM2-135M-Instruct (where present), asked for JSON, replies in a pydantic model's shape only
  with json_schema= that model."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Literal

import pytest

import minigpt
from conftest import FIXTURES, cli_error

CHATML = FIXTURES / "models" / "chatml-tiny"
SEEDS = range(1, 6)

# Bounded strings and numbers, so that even a random model's output ends (tests/test_structured_output.cpp's).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "colour": {"enum": ["red", "green", "blue"]},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "colour", "member"],
}
# What fits a reply in the fixture's context of 128 positions after the chat template's tokens.
SMALL_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
YES_NO = 'root ::= ("yes" | "no")'


@pytest.fixture(scope="module")
def chatml() -> minigpt.Model:
    return minigpt.Model(str(CHATML), threads=2)


def by_hand(value: Any, schema: dict[str, Any]) -> list[str]:
    """The schema keywords these tests use (type, properties, required, enum, minLength, maxLength, minimum,
    maximum), checked on `value`: what fails, empty when it validates."""
    types = {"object": dict, "string": str, "boolean": bool, "integer": int}
    why: list[str] = []
    if "type" in schema:
        t = types[schema["type"]]
        if not isinstance(value, t) or (t is int and isinstance(value, bool)):
            return [f"{value!r} is not of type {schema['type']}"]
    if "enum" in schema and value not in schema["enum"]:
        why.append(f"{value!r} is not one of {schema['enum']}")
    if isinstance(value, str) and not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", 1 << 30):
        why.append(f"{value!r} has {len(value)} characters")
    if isinstance(value, int) and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        why.append(f"{value!r} is out of range")
    if isinstance(value, dict):
        why += [f"no {k!r}" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            why += by_hand(v, schema.get("properties", {}).get(k, {}))
    return why


def violations(text: str, schema: dict[str, Any]) -> list[str]:
    """Why `text` is not JSON valid against `schema` (empty when it is)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return [f"not JSON: {e}"]
    try:
        jsonschema = importlib.import_module("jsonschema")
    except ImportError:
        return by_hand(value, schema)
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]


def answer(m: minigpt.Model, seed: int, **constraint: Any) -> minigpt.GenerateResult:
    """generate() at temperature 1 from a short prompt; the fixture's context of 128 slides."""
    r: minigpt.GenerateResult = m.generate(
        "Answer in JSON: ", 600, temperature=1.0, seed=seed, context_overflow="slide", **constraint)
    return r


def test_chat_renders_and_replies_as_transformers(chatml: minigpt.Model) -> None:
    ref = json.loads((CHATML / "reference.json").read_text())
    for case in ref["cases"]:
        r = chatml.chat(case["messages"], ref["max_new_tokens"], temperature=0)
        assert r.prompt_ids == case["ids"], case["name"]
        assert r.ids == case["generated"], case["name"]
        assert r.text == chatml.tokenizer.decode(r.ids, skip_special_tokens=True)
    # Streamed: the same reply in pieces.
    case = ref["cases"][0]
    stream = chatml.chat(case["messages"], ref["max_new_tokens"], temperature=0, stream=True)
    text = "".join(stream)
    assert stream.result is not None and stream.result.ids == case["generated"] and text == stream.result.text


def test_json_schema_gives_valid_json(chatml: minigpt.Model) -> None:
    for seed in SEEDS:
        free = answer(chatml, seed)
        assert violations(free.text, SCHEMA), free.text  # the check below can fail
        r = answer(chatml, seed, json_schema=SCHEMA)
        assert violations(r.text, SCHEMA) == [], (seed, r.text)
        assert r.stop_reason == "eos", (seed, r.text)
        # The schema as JSON text gives the same grammar, so the same tokens.
        assert answer(chatml, seed, json_schema=json.dumps(SCHEMA)).ids == r.ids


def test_json_schema_streamed(chatml: minigpt.Model) -> None:
    for seed in SEEDS:
        stream = chatml.generate(
            "Answer in JSON: ", 600, temperature=1.0, seed=seed, context_overflow="slide", json_schema=SCHEMA,
            stream=True)  # fmt: skip
        text = "".join(stream)
        assert stream.result is not None and text == stream.result.text
        assert violations(text, SCHEMA) == [], (seed, text)


def test_json_object(chatml: minigpt.Model) -> None:
    # Any object has strings of any length: the quote and EOS favoured, so that a random model ends them.
    (quote,) = chatml.tokenizer.encode('"', add_special_tokens=False)
    bias = {quote: 8.0, chatml.config["eos_token_id"]: 5.0}
    for seed in SEEDS:
        free = answer(chatml, seed, logit_bias=bias).text
        with pytest.raises(json.JSONDecodeError):
            json.loads(free)
        r = answer(chatml, seed, json_object=True, logit_bias=bias)
        assert r.stop_reason == "eos" and isinstance(json.loads(r.text), dict), (seed, r.text)


class Member:
    """A class with pydantic's model_json_schema() (a classmethod) and no pydantic: json_schema= takes it."""

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        return SCHEMA


def test_json_schema_from_a_class(chatml: minigpt.Model) -> None:
    for seed in SEEDS:
        assert answer(chatml, seed, json_schema=Member).ids == answer(chatml, seed, json_schema=SCHEMA).ids


def test_json_schema_from_a_pydantic_model(chatml: minigpt.Model) -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is not installed (json_schema= needs none)")

    class Person(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str = pydantic.Field(min_length=1, max_length=12)
        age: int = pydantic.Field(ge=0, le=150)
        colour: Literal["red", "green", "blue"]
        member: bool

    for seed in SEEDS:
        r = answer(chatml, seed, json_schema=Person)
        person = Person.model_validate_json(r.text)  # raises pydantic.ValidationError if it does not validate
        assert person.model_dump() == json.loads(r.text), r.text


def test_grammar_gives_its_words(chatml: minigpt.Model) -> None:
    for seed in SEEDS:
        free = chatml.generate("Well? ", 8, temperature=1.0, seed=seed).text
        assert free not in ("yes", "no"), free
        r = chatml.generate("Well? ", 8, temperature=1.0, seed=seed, grammar=YES_NO)
        assert r.text in ("yes", "no") and r.stop_reason == "eos", (seed, r.text)
        streamed = "".join(chatml.generate("Well? ", 8, temperature=1.0, seed=seed, grammar=YES_NO, stream=True))
        assert streamed == r.text


def test_chat_with_a_schema(chatml: minigpt.Model) -> None:
    messages = [{"role": "system", "content": "JSON."}, {"role": "user", "content": "ok?"}]
    for seed in SEEDS:
        free = chatml.chat(messages, temperature=1.0, seed=seed)
        assert violations(free.text, SMALL_SCHEMA), free.text
        r = chatml.chat(messages, temperature=1.0, seed=seed, json_schema=SMALL_SCHEMA)
        assert violations(r.text, SMALL_SCHEMA) == [], (seed, r.text)
        assert r.stop_reason == "eos", (seed, r.text)  # the template's end of turn, <|im_end|>
        stream = chatml.chat(messages, temperature=1.0, seed=seed, json_schema=SMALL_SCHEMA, stream=True)
        assert "".join(stream) == r.text
        g = chatml.chat(messages, temperature=1.0, seed=seed, grammar=YES_NO)
        assert g.text in ("yes", "no"), (seed, g.text)


def test_refused_schema_or_grammar_is_a_value_error(chatml: minigpt.Model) -> None:
    m = str(CHATML)
    bad_schema = '{"type": "strnig"}'
    with pytest.raises(ValueError) as info:
        chatml.generate("x", json_schema=bad_schema)
    assert isinstance(info.value, minigpt.ArgumentError)
    # The engine's message, as the CLI gives it for --json-schema.
    cli = cli_error("generate", "-m", m, "-p", "x", "--json-schema", bad_schema)
    assert str(info.value) == cli.replace("--json-schema", "json_schema")
    assert "strnig" in str(info.value)
    with pytest.raises(minigpt.ArgumentError, match="^json_schema: "):
        chatml.chat([{"role": "user", "content": "x"}], json_schema={"type": "strnig"})
    with pytest.raises(minigpt.ArgumentError, match="^grammar: .*undefined_rule"):
        chatml.generate("x", grammar='root ::= "a" undefined_rule')
    with pytest.raises(minigpt.ArgumentError, match="^json_schema and grammar: give at most one"):
        chatml.generate("x", json_schema=SCHEMA, grammar=YES_NO)
    with pytest.raises(minigpt.ArgumentError, match="^grammar and json_object: give at most one"):
        chatml.chat([{"role": "user", "content": "x"}], grammar=YES_NO, json_object=True)
    with pytest.raises(TypeError, match="^json_schema: "):
        chatml.generate("x", json_schema=42)  # type: ignore[call-overload]
    # The model goes on working.
    assert chatml.generate("x", 8, temperature=0, grammar=YES_NO).text in ("yes", "no")


def test_chat_errors(chatml: minigpt.Model, shipped: minigpt.Model) -> None:
    with pytest.raises(minigpt.ArgumentError, match="has no chat template"):
        shipped.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(minigpt.ArgumentError, match=r"^messages\[1\]: a dict with a 'role'"):
        chatml.chat([{"role": "user", "content": "hi"}, {"content": "no role"}])
    with pytest.raises(minigpt.ArgumentError, match="^messages: the list is empty"):
        chatml.chat([])
    with pytest.raises(TypeError):
        chatml.chat("hi")  # type: ignore[arg-type]
    # generate()'s keywords of a prompt of its own are not chat()'s.
    with pytest.raises(TypeError, match=r"^chat\(\) got an unexpected keyword argument 'special'"):
        chatml.chat([{"role": "user", "content": "hi"}], special=True)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"^generate\(\) got an unexpected keyword argument 'temprature'"):
        chatml.generate("hi", temprature=0.5)  # type: ignore[call-overload]
    # A conversation longer than the context leaves no room for a reply.
    with pytest.raises(minigpt.ArgumentError, match="^messages: the conversation is .* tokens, and the context"):
        chatml.chat([{"role": "user", "content": "word " * 100}])


def test_real_smollm2_replies_in_a_pydantic_model(smollm2: Path) -> None:
    """Asked for JSON, the real model wraps it in prose or a Markdown fence; with json_schema=Cat its whole
    reply is a Cat."""
    pydantic = pytest.importorskip("pydantic", reason="pydantic is not installed (json_schema= needs none)")

    class Cat(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str = pydantic.Field(max_length=20)
        age: int

    m = minigpt.Model(str(smollm2), threads=2)
    messages = [{"role": "user", "content": "Write a JSON object with the name and age of a cat."}]
    free = m.chat(messages, 200, temperature=0).text
    with pytest.raises(pydantic.ValidationError):
        Cat.model_validate_json(free)
    r = m.chat(messages, 200, temperature=0, json_schema=Cat)
    assert r.stop_reason == "eos", r.text
    Cat.model_validate_json(r.text)
