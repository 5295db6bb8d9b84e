"""minigpt.Model (the extension's model with generate()'s keywords spelt out for type checkers) and the Ids
type. Kept out of the package's __init__ so that `import minigpt` shows its API and nothing of the typing
machinery this file needs."""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence, Union, overload

import numpy as np
import numpy.typing as npt

from . import _minigpt
from ._minigpt import GenerateResult, GenerateStream

#: Token ids: a list or tuple of int, or a 1-D numpy array of an integer type.
Ids = Union[Sequence[int], npt.NDArray[np.integer[Any]]]


class Model(_minigpt.Model):
    """A loaded model: a Hugging Face directory, a GGUF file or an llm.c checkpoint.

    ``Model(path, dtype="stored", threads=0, backend="cpu", device=0, cache_type=None, tokenizer=None,
    bf16_math="auto")`` loads ``path`` as ``minigpt -m PATH`` does; the keywords are the flags ``--dtype``
    (f32, f16, bf16 or stored: as in the file), ``-t`` (CPU threads, 0 = all cores), ``--backend``,
    ``--device``, ``--cache-type``, ``--tokenizer`` and ``--bf16-math`` (how BF16 weights are multiplied:
    f32 gives transformers' logits, bf16 rounds the activations too where the CPU has it). The model is immutable after load and may be shared between
    threads; its compute runs with the GIL released.
    """

    __module__ = "minigpt"  # where users find it (help(), repr of the class)

    @overload
    def generate(
        self,
        prompt: str | Ids = "",
        max_new_tokens: int | None = None,
        *,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        repeat_last_n: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Mapping[int, float] | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        ignore_eos: bool = False,
        context_overflow: Literal["error", "truncate", "slide"] = "error",
        ctx_size: int | None = None,
        special: bool = False,
        show_special: bool = False,
        logprobs: int | None = None,
        stream: Literal[False] = False,
    ) -> GenerateResult: ...

    @overload
    def generate(
        self,
        prompt: str | Ids = "",
        max_new_tokens: int | None = None,
        *,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        repeat_last_n: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Mapping[int, float] | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        ignore_eos: bool = False,
        context_overflow: Literal["error", "truncate", "slide"] = "error",
        ctx_size: int | None = None,
        special: bool = False,
        show_special: bool = False,
        logprobs: int | None = None,
        stream: Literal[True],
    ) -> GenerateStream: ...

    def generate(
        self,
        prompt: str | Ids = "",
        max_new_tokens: int | None = None,
        *,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        repeat_last_n: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Mapping[int, float] | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        ignore_eos: bool = False,
        context_overflow: Literal["error", "truncate", "slide"] = "error",
        ctx_size: int | None = None,
        special: bool = False,
        show_special: bool = False,
        logprobs: int | None = None,
        stream: bool = False,
    ) -> GenerateResult | GenerateStream:
        """Generates text from ``prompt`` as ``minigpt generate`` does.

        ``prompt`` is a text (encoded with the template's special tokens, as ``-p``) or token ids; an empty
        one starts from the model's BOS token. Every keyword is the flag of the same name
        (``max_new_tokens`` is ``-n``, -1 = until the context is full; ``ctx_size`` is ``-c``), with its
        default: a keyword left at None takes the model's own default (generation_config.json, or a GGUF
        file's general.sampling.*), else the CLI's (temperature 1.0, top_k 50, 128 new tokens). So
        ``temperature=0`` is greedy, and the same ``seed`` and keywords give the CLI's tokens.
        ``logit_bias`` maps ids to biases (``--logit-bias``); ``stop`` is one string or several;
        ``special`` recognises special tokens in the prompt; ``show_special`` gives generated special tokens
        their text. ``logprobs=N`` gives each token's logprob and its N most likely alternatives
        (``--json --top-logprobs N``). A ``seed`` of None draws one (``result.seed`` says which).

        Returns a GenerateResult (text without the prompt, ids, tokens, stop_reason, timings); with
        ``stream=True``, a GenerateStream: an iterator of text pieces as they come, whose ``result`` is the
        GenerateResult once it has ended. Ctrl-C raises KeyboardInterrupt within one token. Errors are
        minigpt.Error with the CLI's messages (which name the setting as the keyword does: ``top_p``).
        """
        return self._generate(
            prompt,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty,
            repeat_last_n,
            presence_penalty,
            frequency_penalty,
            None if logit_bias is None else dict(logit_bias),
            seed,
            stop,
            ignore_eos,
            context_overflow,
            ctx_size,
            special,
            show_special,
            logprobs,
            stream,
        )
