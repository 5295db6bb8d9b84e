"""Speculative decoding from Python (speculative="prompt_lookup" or a draft Model): the tokens are plain
decoding's, greedy and seeded sampling alike, in generate(), chat() and their streams, and the result's counts
show that drafts were made and kept. Plain decoding of the same call is the reference (the engine's
Speculative.* tests check it against the model's own step-by-step choice; these check that the keywords reach
it and what comes back)."""

from __future__ import annotations

from typing import Any

import pytest

import minigpt
from conftest import FIXTURES, SHIPPED, cli_error

TINY = FIXTURES / "models" / "tiny"  # a random-weight GPT-2 without a tokenizer (ids only)
CHATML = FIXTURES / "models" / "chatml-tiny"

# A prompt that repeats itself (the shipped model's context is 128 characters): greedy output repeats its
# phrases too, so prompt lookup has something to find.
REPETITIVE = "to be or not to be, " * 2


@pytest.fixture(scope="module")
def shipped_f16() -> minigpt.Model:
    """The shipped model in F16: a draft that mostly agrees with the F32 model."""
    return minigpt.Model(str(SHIPPED), dtype="f16", threads=2)


@pytest.fixture(scope="module")
def tiny() -> minigpt.Model:
    return minigpt.Model(str(TINY), threads=2)


def assert_same(plain: minigpt.GenerateResult, spec: minigpt.GenerateResult) -> None:
    assert spec.ids == plain.ids
    assert spec.text == plain.text
    assert spec.stop_reason == plain.stop_reason
    # Plain decoding: one step per token after the first (which the prompt's step gives), no drafts.
    assert (plain.decode_steps, plain.drafted, plain.accepted) == (len(plain.ids) - 1, 0, 0)


def assert_drafts_kept(spec: minigpt.GenerateResult) -> None:
    assert spec.drafted > 0 and 0 < spec.accepted <= spec.drafted
    # Every accepted draft is a token that took no step of its own.
    assert spec.decode_steps == len(spec.ids) - 1 - spec.accepted


@pytest.mark.parametrize("temperature,seed", [(0.0, None), (0.8, 1234)], ids=["greedy", "sampled"])
def test_prompt_lookup_equals_plain_on_the_shipped_model(
    shipped: minigpt.Model, temperature: float, seed: int | None
) -> None:
    kw: dict[str, Any] = dict(max_new_tokens=80, temperature=temperature, seed=seed)
    plain = shipped.generate(REPETITIVE, **kw)
    # draft_min=1: drafts every step (k may otherwise fall to 0 when sampled drafts are refused)
    spec = shipped.generate(REPETITIVE, speculative="prompt_lookup", draft_min=1, **kw)
    assert_same(plain, spec)
    assert_drafts_kept(spec)
    # draft_max bounds each step's drafts: one at most here, where the default drafts several.
    one = shipped.generate(REPETITIVE, speculative="prompt_lookup", draft_max=1, **kw)
    assert_same(plain, one)
    assert 0 < one.drafted <= one.decode_steps


@pytest.mark.parametrize("temperature,seed", [(0.0, None), (0.8, 7)], ids=["greedy", "sampled"])
def test_prompt_lookup_equals_plain_on_a_fixture(tiny: minigpt.Model, temperature: float, seed: int | None) -> None:
    prompt = [5, 17, 300, 42, 9] * 6
    kw: dict[str, Any] = dict(max_new_tokens=30, temperature=temperature, seed=seed, ignore_eos=True)
    plain = tiny.generate(prompt, **kw)
    for k in (1, 3, 8):
        spec = tiny.generate(prompt, speculative="prompt_lookup", draft_max=k, draft_min=1, **kw)
        assert_same(plain, spec)
        assert spec.drafted > 0
        assert spec.drafted <= k * spec.decode_steps  # draft_max bounds each step's drafts


@pytest.mark.parametrize("temperature,seed", [(0.0, None), (0.8, 99)], ids=["greedy", "sampled"])
def test_a_draft_model_equals_plain(
    shipped: minigpt.Model, shipped_f16: minigpt.Model, temperature: float, seed: int | None
) -> None:
    kw: dict[str, Any] = dict(max_new_tokens=80, temperature=temperature, seed=seed)
    plain = shipped.generate("ROMEO:", **kw)
    spec = shipped.generate("ROMEO:", speculative=shipped_f16, draft_max=4, draft_min=1, **kw)
    assert_same(plain, spec)
    assert_drafts_kept(spec)
    # The model drafting for itself: the same model's lock is taken once (a second would never be had).
    same = shipped.generate("ROMEO:", speculative=shipped, draft_min=1, **kw)
    assert_same(plain, same)
    assert_drafts_kept(same)


def test_streams_speculate(shipped: minigpt.Model, shipped_f16: minigpt.Model) -> None:
    plain = shipped.generate(REPETITIVE, max_new_tokens=60, temperature=0)
    for source in ("prompt_lookup", shipped_f16):
        stream = shipped.generate(REPETITIVE, max_new_tokens=60, temperature=0, speculative=source, stream=True)
        assert "".join(stream) == plain.text
        assert stream.result is not None
        assert_same(plain, stream.result)
        assert_drafts_kept(stream.result)


def test_chat_speculates() -> None:
    m = minigpt.Model(str(CHATML), threads=2)
    messages = [{"role": "user", "content": "Say it again: abc abc abc abc"}]
    sampling: list[dict[str, Any]] = [dict(temperature=0.0), dict(temperature=0.8, seed=5)]
    for kw in sampling:
        kw.update(max_new_tokens=40, ignore_eos=True)
        plain = m.chat(messages, **kw)
        spec = m.chat(messages, speculative="prompt_lookup", **kw)
        assert_same(plain, spec)
        assert spec.drafted > 0
        draft = m.chat(messages, speculative=m, **kw)
        assert_same(plain, draft)
        assert_drafts_kept(draft)
        stream = m.chat(messages, speculative=m, stream=True, **kw)
        assert "".join(stream) == plain.text and stream.result is not None
        assert_same(plain, stream.result)


def test_a_draft_of_another_vocabulary_is_refused(shipped: minigpt.Model, tiny: minigpt.Model) -> None:
    with pytest.raises(minigpt.ArgumentError) as info:
        shipped.generate("ROMEO:", speculative=tiny)
    message = str(info.value)
    assert f"{tiny.config['n_vocab']} tokens" in message and f"{shipped.config['n_vocab']} tokens" in message
    assert tiny.config["n_vocab"] != shipped.config["n_vocab"]
    # The CLI's message for --draft-model, naming the keyword.
    cli = cli_error("generate", "-m", str(SHIPPED), "-p", "ROMEO:", "--draft-model", str(TINY))
    assert message == cli.replace("--draft-model", "speculative")
    assert len(shipped.generate("ROMEO:", max_new_tokens=3, temperature=0).ids) == 3


def test_bad_speculative_keywords(shipped: minigpt.Model) -> None:
    with pytest.raises(minigpt.ArgumentError, match=r"^speculative: foo not in \{prompt_lookup\}"):
        shipped.generate("ROMEO:", speculative="foo")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="^speculative: "):
        shipped.generate("ROMEO:", speculative=3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="^draft_max: an int is needed"):
        shipped.generate("ROMEO:", speculative="prompt_lookup", draft_max="4")  # type: ignore[call-overload]
    # validate() names its field (ngram_max) where the CLI has no flag's range to check; here the keyword.
    with pytest.raises(minigpt.ArgumentError, match=r"^lookup_ngram_max: must be in \[3, 64\], got 2$"):
        shipped.generate("ROMEO:", speculative="prompt_lookup", lookup_ngram_min=3, lookup_ngram_max=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'draft'"):
        shipped.generate("ROMEO:", draft=shipped)  # type: ignore[call-overload]
