"""Every bad input the CLI refuses raises a minigpt.Error (of the kind's subclass) with the CLI's message: the
message is compared with what `minigpt` prints after 'minigpt: error: ' for the same input, where the CLI names
its flag (--top-p) and Python the keyword (top_p). A model stays usable after each."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any, Callable

import pytest

import minigpt
from conftest import FIXTURES, SHIPPED, cli_error

S = str(SHIPPED)


# The CLI's flags in its messages, and the keywords a Python caller gave for them.
KEYWORDS = {
    "-p/--prompt": "prompt", "prompt (-p)": "prompt", "--dtype": "dtype", "--cache-type": "cache_type",
    "--threads": "threads", "--backend": "backend", "--context-overflow": "context_overflow",
    "--seed": "seed", "--logit-bias": "logit_bias", "--stride": "stride", "--chunks": "chunks",
    "-b/--batch-size": "batch_size", "top_logprobs": "logprobs", "--bf16-math": "bf16_math",
    "--draft-max": "draft_max", "--draft-min": "draft_min", "--lookup-ngram-min": "lookup_ngram_min",
    "--lookup-ngram-max": "lookup_ngram_max",
}  # fmt: skip


def cli_error_as_python(*args: str) -> str:
    """The CLI's message for `args`, its flags named as Python's keywords."""
    message = cli_error(*args)
    for flag, keyword in KEYWORDS.items():
        message = message.replace(flag, keyword)
    return message


def raises(cls: type[minigpt.Error], fn: Callable[[], Any]) -> str:
    with pytest.raises(cls) as info:
        fn()
    assert isinstance(info.value, minigpt.Error)
    message = str(info.value)
    # A Python caller passed no flag: none is named (a path, a number or a word with '-' inside is no flag).
    assert not re.search(r"(^|[\s(/])--?(?!inf\b)[a-z]", message), message
    return message


def bad_gguf(tmp_path: Path) -> str:
    """A GGUF header that claims more tensors than the file could hold."""
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0))
    return str(p)


def bad_config(tmp_path: Path) -> str:
    d = tmp_path / "badconfig"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text('{"model_type": "gpt2", "n_layer": ')
    return str(d)


def no_weights(tmp_path: Path) -> str:
    d = tmp_path / "noweights"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text((SHIPPED / "config.json").read_text())
    return str(d)


def truncated_safetensors(tmp_path: Path) -> str:
    d = tmp_path / "truncated"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text((SHIPPED / "config.json").read_text())
    data = (SHIPPED / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    return str(d)


# (what is wrong, the Python call, its error class, the CLI's arguments for the same input)
LOAD_CASES: list[tuple[str, Callable[[Path], Any], type[minigpt.Error], Callable[[Path], list[str]]]] = [
    ("missing path", lambda t: minigpt.Model("/nonexistent/model"), minigpt.IoError,
     lambda t: ["generate", "-m", "/nonexistent/model", "-p", "x"]),
    ("bad dtype", lambda t: minigpt.Model(S, dtype="f64"), minigpt.ArgumentError,
     lambda t: ["generate", "-m", S, "--dtype", "f64", "-p", "x"]),
    ("bad cache type", lambda t: minigpt.Model(S, cache_type="q8"), minigpt.ArgumentError,
     lambda t: ["generate", "-m", S, "--cache-type", "q8", "-p", "x"]),
    ("bad bf16 math", lambda t: minigpt.Model(S, bf16_math="half"), minigpt.ArgumentError,
     lambda t: ["generate", "-m", S, "--bf16-math", "half", "-p", "x"]),
    ("too many threads", lambda t: minigpt.Model(S, threads=2000), minigpt.ArgumentError,
     lambda t: ["generate", "-m", S, "-t", "2000", "-p", "x"]),
    ("unknown backend", lambda t: minigpt.Model(S, backend="tpu"), minigpt.ArgumentError,
     lambda t: ["generate", "-m", S, "--backend", "tpu", "-p", "x"]),
    ("bad GGUF", lambda t: minigpt.Model(bad_gguf(t)), minigpt.FormatError,
     lambda t: ["generate", "-m", bad_gguf(t), "-p", "x"]),
    ("config.json not JSON", lambda t: minigpt.Model(bad_config(t)), minigpt.ConfigError,
     lambda t: ["generate", "-m", bad_config(t), "-p", "x"]),
    ("no weights", lambda t: minigpt.Model(no_weights(t)), minigpt.Error,
     lambda t: ["generate", "-m", no_weights(t), "-p", "x"]),
    ("truncated safetensors", lambda t: minigpt.Model(truncated_safetensors(t)), minigpt.Error,
     lambda t: ["generate", "-m", truncated_safetensors(t), "-p", "x"]),
    ("model without a tokenizer", lambda t: minigpt.Model(str(FIXTURES / "models" / "tiny")).tokenizer, minigpt.IoError,
     lambda t: ["generate", "-m", str(FIXTURES / "models" / "tiny"), "-p", "x"]),
    ("llm.c checkpoint without a tokenizer", lambda t: minigpt.Model(str(FIXTURES / "llmc" / "gpt2-f32.bin")).generate("x"),
     minigpt.UnsupportedError, lambda t: ["generate", "-m", str(FIXTURES / "llmc" / "gpt2-f32.bin"), "-p", "x"]),
    ("another model's tokenizer", lambda t: minigpt.Model(S, tokenizer=str(FIXTURES / "gpt2-tokenizer")).tokenizer,
     minigpt.ConfigError, lambda t: ["generate", "-m", S, "--tokenizer", str(FIXTURES / "gpt2-tokenizer"), "-p", "x"]),
]  # fmt: skip


@pytest.mark.parametrize("what,call,cls,cli", LOAD_CASES, ids=[c[0] for c in LOAD_CASES])
def test_load_errors_carry_the_cli_message(
    tmp_path: Path, what: str, call: Callable[[Path], Any], cls: type[minigpt.Error], cli: Callable[[Path], list[str]]
) -> None:
    assert raises(cls, lambda: call(tmp_path)) == cli_error_as_python(*cli(tmp_path))


# generate()'s keywords refused as the CLI refuses its flags, on a model that goes on working.
GENERATE_CASES: list[tuple[dict[str, Any], list[str]]] = [
    (dict(temperature=-1.0), ["--temperature", "-1"]),
    (dict(top_p=2.0), ["--top-p", "2"]),
    (dict(top_k=-3), ["--top-k", "-3"]),
    (dict(min_p=1.5), ["--min-p", "1.5"]),
    (dict(repetition_penalty=0.0), ["--repetition-penalty", "0"]),
    (dict(max_new_tokens=0), ["-n", "0"]),
    (dict(max_new_tokens=-5), ["-n", "-5"]),
    (dict(seed=-1), ["--seed", "-1"]),
    (dict(ctx_size=100000), ["-c", "100000"]),
    (dict(ctx_size=-1), ["-c", "-1"]),
    (dict(stop=""), ["--stop", ""]),
    (dict(context_overflow="wrap"), ["--context-overflow", "wrap"]),
    (dict(logprobs=100000), ["--json", "--top-logprobs", "100000"]),
    (dict(logit_bias={300: 1.0}), ["--logit-bias", "300+1"]),
    (dict(draft_max=0, speculative="prompt_lookup"), ["--prompt-lookup", "--draft-max", "0"]),
    (dict(draft_max=65), ["--draft-max", "65"]),
    (dict(draft_min=-1, speculative="prompt_lookup"), ["--prompt-lookup", "--draft-min", "-1"]),
    (dict(draft_min=9, speculative="prompt_lookup"), ["--prompt-lookup", "--draft-min", "9"]),
    (dict(draft_max=2, draft_min=3, speculative="prompt_lookup"), ["--prompt-lookup", "--draft-max", "2", "--draft-min", "3"]),
    (dict(lookup_ngram_min=0, speculative="prompt_lookup"), ["--prompt-lookup", "--lookup-ngram-min", "0"]),
    (dict(lookup_ngram_max=65, speculative="prompt_lookup"), ["--prompt-lookup", "--lookup-ngram-max", "65"]),
    (dict(prompt="x" * 200), []),  # longer than the context of 128
]  # fmt: skip


@pytest.mark.parametrize("kwargs,flags", GENERATE_CASES, ids=[str(c[0])[:40] for c in GENERATE_CASES])
def test_generate_errors_carry_the_cli_message(shipped: minigpt.Model, kwargs: dict[str, Any], flags: list[str]) -> None:
    prompt = kwargs.pop("prompt", "ROMEO:")
    if not flags and prompt == "ROMEO:":
        shipped.generate(prompt, max_new_tokens=2, **kwargs)  # accepted by both
        return
    message = raises(minigpt.ArgumentError, lambda: shipped.generate(prompt, **kwargs))
    assert message == cli_error_as_python("generate", "-m", S, "-p", prompt, *flags)
    assert len(shipped.generate("ROMEO:", max_new_tokens=3, temperature=0).ids) == 3


def test_session_and_logits_errors(shipped: minigpt.Model) -> None:
    # Ids outside the vocabulary, and more than the context: the session's messages, the model unchanged.
    assert raises(minigpt.ArgumentError, lambda: shipped.logits([1, 256])) == (
        "eval: token id 256 at index 1 is outside the vocabulary [0, 256)")
    assert "outside the vocabulary" in raises(minigpt.ArgumentError, lambda: shipped.logits([2**40]))
    assert "context overflow" in raises(minigpt.ArgumentError, lambda: shipped.logits([1] * 129))
    s = shipped.session(ctx_size=8)
    s.eval([1, 2, 3])
    assert "context overflow: 3 tokens in the context + 6 new > n_ctx 8" in raises(
        minigpt.ArgumentError, lambda: s.eval([1] * 6))
    assert s.n_past == 3 and s.tokens == [1, 2, 3]
    s.eval([4])
    assert s.n_past == 4
    with pytest.raises(TypeError):
        shipped.logits("not ids")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        shipped.logits([1.5])  # type: ignore[list-item]


def test_perplexity_errors_carry_the_cli_message(shipped: minigpt.Model, tmp_path: Path) -> None:
    text_file = tmp_path / "short.txt"
    text_file.write_text("ROMEO: ")
    cases: list[tuple[dict[str, Any], list[str]]] = [
        (dict(stride=0), ["--stride", "0"]),
        (dict(chunks=0), ["--chunks", "0"]),
        (dict(batch_size=0), ["-b", "0"]),
        (dict(), []),  # too short for one chunk
        (dict(stride=200, ctx_size=64), ["--stride", "200", "-c", "64"]),
        (dict(stride=4, chunks=2), ["--stride", "4", "--chunks", "2"]),
    ]
    for kwargs, flags in cases:
        message = raises(minigpt.ArgumentError, lambda: shipped.perplexity("ROMEO: ", **kwargs))
        assert message == cli_error_as_python("perplexity", "-m", S, "-f", str(text_file), *flags), kwargs


def test_attention_errors_carry_the_cli_message(shipped: minigpt.Model) -> None:
    assert raises(minigpt.ArgumentError, lambda: shipped.attention("")) == cli_error_as_python(
        "attention", "-m", S, "-p", "", "-o", "/tmp/x.json")
    assert raises(minigpt.ArgumentError, lambda: shipped.attention("x" * 130)) == cli_error_as_python(
        "attention", "-m", S, "-p", "x" * 130, "-o", "/tmp/x.json")


def test_error_classes() -> None:
    assert issubclass(minigpt.ArgumentError, ValueError)
    assert issubclass(minigpt.IoError, OSError)
    for cls in (minigpt.IoError, minigpt.FormatError, minigpt.ConfigError, minigpt.ShapeError,
                minigpt.ArgumentError, minigpt.UnsupportedError, minigpt.DeviceError, minigpt.NumericError):  # fmt: skip
        assert issubclass(cls, minigpt.Error)
        assert isinstance(cls.kind, str)
    with pytest.raises(minigpt.Error) as info:
        minigpt.Model("/nonexistent")
    assert info.value.kind == "io"
    assert str(info.value) == "/nonexistent: no such file or directory"
