"""The package against transformers' own outputs (the fixtures tools/reference/ made): logits, attention maps,
greedy tokens and perplexity. numpy only; transformers is not needed to run these."""

from __future__ import annotations

import json

import numpy as np
import pytest

import minigpt
from conftest import FIXTURES, LOGIT_FIXTURES, ROOT, SHIPPED, read_safetensors


# Tolerance 1e-4 absolute, the project's bar for F32 logits against transformers (docs/correctness.md): sums of
# a few hundred products in F32 differ from PyTorch's order of summation by ~1e-6 here.
# BF16 weights are multiplied in BF16 by default where the CPU can (activations rounded to 8 bits: logits
# within ~0.1, tests/test_model.cpp); bf16_math="f32" asks for the exact F32 product, which this bound is for.
@pytest.mark.parametrize("name", LOGIT_FIXTURES)
def test_logits_equal_transformers(name: str) -> None:
    ref = read_safetensors(FIXTURES / "models" / name / "reference.safetensors")
    m = minigpt.Model(str(FIXTURES / "models" / name), threads=2, bf16_math="f32")
    got = m.logits(ref["tokens"])  # a numpy int32 array as ids
    assert got.dtype == np.float32
    assert got.shape == ref["logits"].shape
    assert float(np.max(np.abs(got - ref["logits"]))) <= 1e-4
    # The same ids as a list give the same array.
    assert np.array_equal(m.logits(ref["tokens"].tolist()), got)


def test_llmc_checkpoint_logits_equal_llmc_reference() -> None:
    """An llm.c checkpoint (no tokenizer: ids alone need none) against llm.c's PyTorch reference."""
    ref = read_safetensors(FIXTURES / "llmc" / "reference.safetensors")
    m = minigpt.Model(str(FIXTURES / "llmc" / "gpt2-f32.bin"), threads=2)
    assert not m.has_tokenizer
    got = m.logits(ref["tokens"])
    assert float(np.max(np.abs(got - ref["logits_f32"]))) <= 1e-4


# Tolerance 1e-5: minigpt computes the probabilities in double from the forward pass's F32 q and k; transformers
# in F32 (tests/test_attention.cpp uses the same bound).
@pytest.mark.parametrize("name", ["tiny", "tiny-untied", "tiny-sinusoidal", "tiny-relu-legacy", "shakespeare-char"])
def test_attention_equals_output_attentions(name: str) -> None:
    ref = json.loads((FIXTURES / "attention" / f"{name}.json").read_text())
    m = minigpt.Model(str(ROOT / ref["model"]), threads=2)
    want = np.array(ref["attentions"], dtype=np.float64)
    got = m.attention(ref["ids"])
    assert got.shape == want.shape == (ref["n_layer"], ref["n_head"], len(ref["ids"]), len(ref["ids"]))
    assert float(np.max(np.abs(got - want))) <= 1e-5
    if "text" in ref:  # a text is encoded as `minigpt attention -p` encodes it
        assert np.array_equal(m.attention(ref["text"]), got)


@pytest.mark.parametrize(
    "name",
    ["neox-parallel", "neox-sequential", "neox-f16", "neox-bf16", "opt-prenorm", "opt-postnorm-proj",
     "opt-nobias-untied", "opt-bf16", "bigcode-mqa", "bigcode-mha", "bigcode-4x", "bigcode-f16"],
)  # fmt: skip
def test_family_greedy_equals_transformers(name: str) -> None:
    ref = json.loads((FIXTURES / "models" / name / "greedy.json").read_text())
    m = minigpt.Model(str(FIXTURES / "models" / name), threads=2)
    r = m.generate(ref["prompt"], max_new_tokens=len(ref["greedy"]), temperature=0, ignore_eos=True)
    assert r.ids == ref["greedy"]


def test_shipped_greedy_equals_transformers(shipped: minigpt.Model) -> None:
    ref = json.loads((FIXTURES / "shakespeare-char" / "greedy.json").read_text())
    for case in ref["cases"]:
        new = case["output_ids"][len(case["prompt_ids"]) :]
        # As ids (transformers started the empty prompt from [10], "\n"), and as text.
        r = shipped.generate(case["prompt_ids"], max_new_tokens=len(new), temperature=0, ignore_eos=True)
        assert r.ids == new, case["name"]
        if case["prompt"]:
            r = shipped.generate(case["prompt"], max_new_tokens=len(new), temperature=0, ignore_eos=True)
            assert r.ids == new, case["name"]
            assert r.text == case["new_text"], case["name"]


# The perplexity recipes against transformers' NLLs: relative 1e-5 on the perplexity, as
# tests/test_perplexity.cpp (F32 logits within ~1e-6 of transformers', averaged).
def test_perplexity_equals_transformers(shipped: minigpt.Model) -> None:
    ref = json.loads((FIXTURES / "perplexity" / "reference.json").read_text())
    text_bytes = (FIXTURES / "data" / "tinyshakespeare.txt").read_bytes()
    checked = 0
    for c in ref["cases"]:
        if c["model"] != "shakespeare-char" or c["text_length"] > 10000:
            continue
        text = text_bytes[c["text_offset"] : c["text_offset"] + c["text_length"]].decode()
        if c["recipe"] == "stride":
            r = shipped.perplexity(text, ctx_size=c["n_ctx"], stride=c["stride"])
        else:
            r = shipped.perplexity(text, ctx_size=c["n_ctx"], chunks=c["max_chunks"] or None)
        assert r.n_scored == c["scored"]
        assert r.n_windows == c["windows"]
        assert r.ppl == pytest.approx(c["ppl"], rel=1e-5)
        checked += 1
    assert checked >= 6
