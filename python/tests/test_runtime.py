"""What a Python user expects beyond the numbers: the GIL released during compute, Ctrl-C stopping a generation
within a token, sessions step by step, streams, arrays without copies, a model usable after an exception, and
stubs that describe the module."""

from __future__ import annotations

import ast
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import minigpt
from conftest import ROOT, SHIPPED


def test_two_threads_on_two_models_overlap_in_time() -> None:
    """With the GIL held during compute, the second call could not start before the first ended: the two
    intervals would not overlap at all. Released, they overlap for most of their length (on one core too, as
    the threads then take turns)."""
    models = [minigpt.Model(str(SHIPPED), threads=1) for _ in range(2)]
    spans: list[tuple[float, float]] = [(0.0, 0.0), (0.0, 0.0)]
    ready = threading.Barrier(2)

    def run(i: int) -> None:
        ready.wait()
        t0 = time.perf_counter()
        models[i].generate("ROMEO:", max_new_tokens=1500, temperature=0, ignore_eos=True, context_overflow="slide")
        spans[i] = (t0, time.perf_counter())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    overlap = min(spans[0][1], spans[1][1]) - max(spans[0][0], spans[1][0])
    shorter = min(e - s for s, e in spans)
    assert overlap > 0.5 * shorter, (spans, overlap)


def test_python_threads_run_while_a_generation_computes(shipped: minigpt.Model) -> None:
    """The main thread keeps running Python while another thread's generate() computes."""
    done = threading.Event()
    ticks = 0

    def run() -> None:
        shipped.generate("ROMEO:", max_new_tokens=3000, temperature=0, ignore_eos=True, context_overflow="slide")
        done.set()

    t = threading.Thread(target=run)
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    assert ticks > 10


def test_ctrl_c_stops_generate_within_a_token(shipped: minigpt.Model) -> None:
    """SIGINT to this process while generate() runs (Ctrl-C in a terminal): KeyboardInterrupt, soon after."""
    per_token = 0.0
    r = shipped.generate("ROMEO:", max_new_tokens=400, temperature=0, ignore_eos=True)
    per_token = r.decode_seconds / max(1, len(r.ids) - 1)
    sent = 0.0

    def interrupt() -> None:
        nonlocal sent
        sent = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.3, interrupt)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        shipped.generate("ROMEO:", max_new_tokens=10**7, temperature=0.8, ignore_eos=True, context_overflow="slide")
    late = time.perf_counter() - sent
    timer.join()
    # One token is ~per_token (a slide re-evaluates half the context: 64 tokens); the rest is the signal's way
    # to the main thread. 0.2 s of slack for a loaded machine.
    assert late < 64 * per_token + 0.2, (late, per_token)
    # The model goes on working, and so does the stream form.
    assert len(shipped.generate("ROMEO:", max_new_tokens=5, temperature=0).ids) == 5
    stream = shipped.generate("ROMEO:", max_new_tokens=10**7, ignore_eos=True, context_overflow="slide", stream=True)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        for _ in stream:
            pass
    assert stream.result is not None and stream.result.stop_reason == "cancelled"
    assert len(shipped.generate("ROMEO:", max_new_tokens=5, temperature=0).ids) == 5


def test_session_steps_as_generate(shipped: minigpt.Model) -> None:
    tok = shipped.tokenizer
    prompt = tok.encode("ROMEO:")
    s = shipped.session()
    assert s.n_ctx == 128 and s.logits is None
    logits = s.eval(prompt)
    assert logits.shape == (256,) and s.logits is logits
    ids = []
    for _ in range(20):
        nxt = int(np.argmax(s.logits))
        ids.append(nxt)
        s.eval([nxt])
    assert ids == shipped.generate("ROMEO:", max_new_tokens=20, temperature=0, ignore_eos=True).ids
    assert s.n_past == len(prompt) + 20 and s.tokens == prompt + ids
    # Every row at once, equal to logits(); keep() goes back.
    s.reset()
    rows = s.eval(prompt + ids, all_logits=True)
    assert np.array_equal(rows, shipped.logits(prompt + ids))
    assert np.array_equal(s.logits, rows[-1])
    s.keep(len(prompt))
    assert np.allclose(s.eval([ids[0]]), rows[len(prompt)], atol=1e-5)


def test_stream_and_result(shipped: minigpt.Model) -> None:
    with shipped.generate("ROMEO:", max_new_tokens=30, seed=3, stream=True) as stream:
        assert stream.result is None
        pieces = [next(stream), next(stream)]
    assert stream.result is not None and stream.result.stop_reason == "cancelled"
    assert "".join(pieces) == stream.result.text
    full = shipped.generate("ROMEO:", max_new_tokens=30, seed=3)
    assert full.text.startswith(stream.result.text)
    assert list(stream) == []
    r = shipped.generate("", max_new_tokens=4, temperature=0)  # an empty prompt: the BOS
    assert r.prompt_ids == [10]


def test_arrays_are_not_copies(shipped: minigpt.Model) -> None:
    """logits() and attention() hand numpy the memory the library wrote into: no copy, freed with the array."""
    x = shipped.logits([1, 2, 3])
    assert x.dtype == np.float32 and x.flags.c_contiguous and not x.flags.owndata
    assert x.base is not None
    a = shipped.attention([1, 2, 3])
    assert a.shape == (4, 4, 3, 3) and not a.flags.owndata
    x[:] = 0  # the caller's to change
    assert not np.array_equal(shipped.logits([1, 2, 3]), x)


def test_model_properties(shipped: minigpt.Model) -> None:
    assert shipped.config["n_layer"] == 4 and shipped.config["n_vocab"] == 256
    assert shipped.n_params == 842496
    assert shipped.backend == "cpu"
    assert "cpu" in [name for name, _ in minigpt.backends()]
    tok = shipped.tokenizer
    assert len(tok) == tok.n_vocab == 256
    assert tok.decode(tok.encode("ROMEO: thou")) == "ROMEO: thou"
    assert tok.token_bytes(65) == b"A"
    assert tok.decode([0xE2, 0x82]) == "\ufffd"


def test_stubs_describe_the_module() -> None:
    """Every public name of the extension module is in its stub, and the stub names nothing else."""
    stub = ast.parse((ROOT / "python" / "minigpt" / "_minigpt.pyi").read_text())
    stubbed = {n.name for n in stub.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    module = {n for n in dir(minigpt._minigpt) if not n.startswith("_")}
    assert stubbed - {"_Ids"} == module
    for cls in stub.body:
        if isinstance(cls, ast.ClassDef):
            members = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
            real = {n for n in dir(getattr(minigpt._minigpt, cls.name)) if not n.startswith("__")}
            missing = members - real - {"__init__", "__iter__", "__next__", "__len__", "__enter__", "__exit__"}
            assert not missing, (cls.name, missing)
    assert set(minigpt.__all__) <= set(dir(minigpt))
    assert (Path(minigpt.__file__).parent / "py.typed").exists()


def test_the_namespace_is_the_api() -> None:
    """dir(minigpt) shows the API (__all__) and nothing of how the package is written: no typing or numpy
    names (private names and the module's own dunders aside)."""
    assert {n for n in dir(minigpt) if not n.startswith("_")} == set(minigpt.__all__)
    assert minigpt.Model.__module__ == "minigpt"


def test_ids_in_any_integer_form(shipped: minigpt.Model) -> None:
    ids = [82, 79, 77, 69, 79, 58]
    want = shipped.logits(ids)
    forms: list[minigpt.Ids] = [tuple(ids), np.array(ids, dtype=np.int64), np.array(ids, dtype=np.uint8),
             np.repeat(np.array(ids, dtype=np.int16), 2)[::2]]  # fmt: skip
    for form in forms:
        assert np.array_equal(shipped.logits(form), want)
    with pytest.raises(TypeError):
        shipped.logits(np.array(ids, dtype=np.float32))
