"""The package against the minigpt CLI of the same build: the same flags give the same tokens, log-probabilities,
text and perplexity (the same library runs both, so these are equal, not close)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import minigpt
from conftest import FIXTURES, SHIPPED, cli_json_tokens, run_cli

PROMPT = "ROMEO:\nBut soft"


def test_greedy_equals_cli(shipped: minigpt.Model) -> None:
    tokens, summary = cli_json_tokens("-m", str(SHIPPED), "-t", "2", "-p", PROMPT, "-n", "80", "--temperature", "0")
    r = shipped.generate(PROMPT, max_new_tokens=80, temperature=0)
    assert r.ids == [t["id"] for t in tokens]
    assert r.text == summary["text"]
    assert r.stop_reason == summary["stop_reason"]
    assert len(r.prompt_ids) == summary["prompt_tokens"]


# (CLI flags, the same as keywords): every sampling processor, stop strings, penalties, the context's overflow.
SAMPLING_CASES: list[tuple[list[str], dict[str, Any]]] = [
    (["--temperature", "0.8", "--seed", "1"], dict(temperature=0.8, seed=1)),
    (["--seed", "7"], dict(seed=7)),  # the CLI's defaults: temperature 1, top_k 50
    (["--temperature", "0.9", "--top-k", "20", "--top-p", "0.9", "--seed", "3"],
     dict(temperature=0.9, top_k=20, top_p=0.9, seed=3)),
    (["--temperature", "1.2", "--top-k", "0", "--min-p", "0.05", "--seed", "11"],
     dict(temperature=1.2, top_k=0, min_p=0.05, seed=11)),
    (["--repetition-penalty", "1.3", "--repeat-last-n", "16", "--seed", "5"],
     dict(repetition_penalty=1.3, repeat_last_n=16, seed=5)),
    (["--presence-penalty", "0.5", "--frequency-penalty", "0.3", "--seed", "9"],
     dict(presence_penalty=0.5, frequency_penalty=0.3, seed=9)),
    (["--logit-bias", "101+2.5", "--logit-bias", "32-inf", "--seed", "4"],
     dict(logit_bias={101: 2.5, 32: float("-inf")}, seed=4)),
    (["--stop", "the", "--stop", "\n\n", "--seed", "2"], dict(stop=["the", "\n\n"], seed=2)),
    (["-c", "64", "--context-overflow", "slide", "--seed", "6"], dict(ctx_size=64, context_overflow="slide", seed=6)),
    (["--seed", "18446744073709551615", "--temperature", "0.7"], dict(seed=2**64 - 1, temperature=0.7)),
]  # fmt: skip


@pytest.mark.parametrize("flags,kwargs", SAMPLING_CASES, ids=[" ".join(c[0]) for c in SAMPLING_CASES])
def test_seeded_sampling_equals_cli(shipped: minigpt.Model, flags: list[str], kwargs: dict[str, Any]) -> None:
    tokens, summary = cli_json_tokens(
        "-m", str(SHIPPED), "-t", "2", "-p", PROMPT, "-n", "100", "--top-logprobs", "2", *flags
    )
    r = shipped.generate(PROMPT, max_new_tokens=100, logprobs=2, **kwargs)
    assert [t.id for t in r.tokens] == [t["id"] for t in tokens]
    assert [t.text for t in r.tokens] == [t["text"] for t in tokens]
    assert r.logprobs == [t["logprob"] for t in tokens]
    assert [[list(p) for p in t.top_logprobs] for t in r.tokens] == [
        [[a["id"], a["logprob"]] for a in t["top_logprobs"]] for t in tokens
    ]
    assert r.text == summary["text"]
    assert r.stop_reason == summary["stop_reason"]
    assert r.slides == summary["slides"]
    assert r.seed == summary["seed"]


def test_stream_gives_the_same_text_as_the_cli(shipped: minigpt.Model) -> None:
    r = run_cli("generate", "-m", str(SHIPPED), "-t", "2", "-p", PROMPT, "-n", "60", "--seed", "12",
                "--stop", "e", "--no-echo")  # fmt: skip
    assert r.returncode == 0, r.stderr
    stream = shipped.generate(PROMPT, max_new_tokens=60, seed=12, stop="e", stream=True)
    pieces = list(stream)
    assert "".join(pieces) + "\n" == r.stdout
    assert all(pieces)
    assert stream.result is not None and stream.result.text == "".join(pieces)


def test_generation_config_defaults_as_the_cli(tmp_path: Path) -> None:
    """A model's generation_config.json fills what is not given, as for the CLI's flags; a keyword, as a flag,
    overrides it."""
    for f in SHIPPED.iterdir():
        if f.name != "generation_config.json":  # written below: never through a link into the shipped model
            (tmp_path / f.name).symlink_to(f)
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"do_sample": True, "temperature": 0.5, "top_k": 5, "max_new_tokens": 7, "eos_token_id": 10})
    )
    m = minigpt.Model(str(tmp_path), threads=2)
    for flags, kwargs in [([], {}), (["-n", "30", "--temperature", "1.5"], dict(max_new_tokens=30, temperature=1.5)),
                          (["--top-k", "0"], dict(top_k=0))]:  # fmt: skip
        tokens, summary = cli_json_tokens("-m", str(tmp_path), "-t", "2", "-p", PROMPT, "--seed", "3", *flags)
        r = m.generate(PROMPT, seed=3, **kwargs)  # type: ignore[arg-type]
        assert r.ids == [t["id"] for t in tokens], flags
        assert r.stop_reason == summary["stop_reason"]


@pytest.mark.parametrize("args,kwargs", [([], {}), (["--stride", "64"], dict(stride=64)),
                                         (["-c", "100", "--chunks", "3"], dict(ctx_size=100, chunks=3))])  # fmt: skip
def test_perplexity_equals_cli(shipped: minigpt.Model, tmp_path: Path, args: list[str], kwargs: dict[str, Any]) -> None:
    text = (FIXTURES / "data" / "tinyshakespeare.txt").read_text()[-4000:]
    path = tmp_path / "text.txt"
    path.write_text(text)
    r = run_cli("perplexity", "-m", str(SHIPPED), "-t", "2", "-f", str(path), "--json", *args)
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)
    got = shipped.perplexity(text, **kwargs)
    assert (got.ppl, got.ppl_error, got.nll_mean, got.nll_stderr) == (
        want["ppl"], want["ppl_error"], want["nll_mean"], want["nll_stderr"])  # fmt: skip
    assert (got.n_tokens, got.n_scored, got.n_windows, got.n_evaluated, got.n_ctx, got.recipe) == (
        want["tokens"], want["scored"], want["windows"], want["evaluated"], want["n_ctx"], want["recipe"])  # fmt: skip
    assert got.stride == want.get("stride")


@pytest.mark.parametrize("text", ["Hello world", " <|endoftext|>x  \n\tü€😀", "don't 123 4567"])
def test_tokenizer_equals_cli(text: str) -> None:
    tok = minigpt.Tokenizer.load(str(FIXTURES / "gpt2-tokenizer"))
    r = run_cli("tokenize", "-m", str(FIXTURES / "gpt2-tokenizer"), "--json", text)
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)
    ids = tok.encode(text)
    assert ids == want["ids"]
    assert [tok.token_symbol(i) for i in ids] == want["tokens"]
    assert tok.decode(ids) == text
    r = run_cli("tokenize", "-m", str(FIXTURES / "gpt2-tokenizer"), "--special", text)
    assert tok.encode(text, special=True) == [int(x) for x in r.stdout.split()]
