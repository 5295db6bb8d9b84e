"""minigpt.Model (the extension's model with generate()'s and chat()'s keywords spelt out for type checkers),
the Ids type, and the keywords' types (ChatOptions, GenerateOptions). Kept out of the package's __init__ so
that `import minigpt` shows its API and nothing of the typing machinery this file needs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence, TypedDict, Union, overload

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # in annotations only (not evaluated): typing has Unpack from Python 3.11 on
    from typing_extensions import Unpack

from . import _minigpt
from ._minigpt import ArgumentError, GenerateResult, GenerateStream

#: Token ids: a list or tuple of int, or a 1-D numpy array of an integer type.
Ids = Union[Sequence[int], npt.NDArray[np.integer[Any]]]

#: A JSON Schema: a dict, its JSON text, or a class with ``model_json_schema()`` (a pydantic model).
JsonSchema = Union[Mapping[str, Any], str, type[Any]]


class ChatOptions(TypedDict, total=False):
    """The keywords of chat() and generate(): the flags of ``minigpt chat`` and ``minigpt generate`` of the
    same names. One left at None (or not given) takes the model's own default, else the CLI's."""

    temperature: float | None
    top_k: int | None
    top_p: float | None
    min_p: float | None
    repetition_penalty: float | None
    repeat_last_n: int | None
    presence_penalty: float
    frequency_penalty: float
    logit_bias: Mapping[int, float] | None
    seed: int | None
    stop: str | Sequence[str] | None
    ignore_eos: bool
    ctx_size: int | None
    logprobs: int | None
    json_schema: JsonSchema | None
    grammar: str | None
    json_object: bool
    speculative: Literal["prompt_lookup"] | _minigpt.Model | None
    draft_max: int
    draft_min: int
    lookup_ngram_min: int
    lookup_ngram_max: int


class GenerateOptions(ChatOptions, total=False):
    """generate()'s keywords: chat()'s and those of a prompt of its own."""

    context_overflow: Literal["error", "truncate", "slide"]
    special: bool
    show_special: bool


def _engine_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords as the extension takes them: a schema as its JSON text, logit_bias a dict; at most one
    of json_schema, grammar and json_object."""
    out = dict(options)
    given = [k for k in ("json_schema", "grammar") if out.get(k) is not None]
    if out.get("json_object"):
        given.append("json_object")
    if len(given) > 1:
        raise ArgumentError(f"{' and '.join(given)}: give at most one of json_schema, grammar and json_object")
    schema = out.get("json_schema")
    if schema is not None and not isinstance(schema, str):
        to_schema = getattr(schema, "model_json_schema", None)  # a pydantic model (pydantic is not needed)
        if callable(to_schema):
            schema = to_schema()
        if not isinstance(schema, Mapping):
            raise TypeError(
                "json_schema: a dict, a JSON string or a class with model_json_schema() (a pydantic model) "
                f"is needed, got {type(schema).__name__}"
            )
        out["json_schema"] = json.dumps(dict(schema))
    if out.get("logit_bias") is not None:
        out["logit_bias"] = dict(out["logit_bias"])
    return out


def _messages_json(messages: Sequence[Mapping[str, Any]]) -> str:
    """The conversation as the JSON array of messages the chat template renders."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages: a list of {'role': ..., 'content': ...} dicts is needed")
    if len(messages) == 0:
        raise ArgumentError("messages: the list is empty")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ArgumentError(f"messages[{i}]: a dict with a 'role' string is needed")
    return json.dumps([dict(m) for m in messages])


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
        stream: Literal[False] = False,
        **options: Unpack[GenerateOptions],
    ) -> GenerateResult: ...

    @overload
    def generate(
        self,
        prompt: str | Ids = "",
        max_new_tokens: int | None = None,
        *,
        stream: Literal[True],
        **options: Unpack[GenerateOptions],
    ) -> GenerateStream: ...

    def generate(
        self,
        prompt: str | Ids = "",
        max_new_tokens: int | None = None,
        *,
        stream: bool = False,
        **options: Unpack[GenerateOptions],
    ) -> GenerateResult | GenerateStream:
        """Generates text from ``prompt`` as ``minigpt generate`` does.

        ``prompt`` is a text (encoded with the template's special tokens, as ``-p``) or token ids; an empty
        one starts from the model's BOS token. Every keyword is the flag of the same name
        (``max_new_tokens`` is ``-n``, -1 = until the context is full; ``ctx_size`` is ``-c``), with its
        default: a keyword left at None takes the model's own default (generation_config.json, or a GGUF
        file's general.sampling.*), else the CLI's (temperature 1.0, top_k 50, 128 new tokens). So
        ``temperature=0`` is greedy, and the same ``seed`` and keywords give the CLI's tokens.
        The keywords (GenerateOptions): ``temperature``, ``top_k``, ``top_p``, ``min_p``,
        ``repetition_penalty``, ``repeat_last_n``, ``presence_penalty`` and ``frequency_penalty`` (0.0),
        ``logit_bias`` (a dict of ids to biases, ``--logit-bias``), ``seed`` (None draws one:
        ``result.seed`` says which), ``stop`` (one string or several), ``ignore_eos``,
        ``context_overflow`` ("error", "truncate", "slide"), ``ctx_size``, ``special`` (recognise special
        tokens in the prompt), ``show_special`` (give generated special tokens their text), ``logprobs=N``
        (each token's logprob and its N most likely alternatives, ``--json --top-logprobs N``).

        Structured output (at most one): ``json_schema`` (a dict, its JSON text, or a pydantic model class)
        gives JSON valid against it, ``grammar`` the language of a GBNF grammar, ``json_object=True`` any
        JSON object, as ``--json-schema``, ``--grammar-file`` and ``--json-object``; one the engine refuses
        raises ArgumentError (a ValueError) with its message.

        Speculative decoding: ``speculative="prompt_lookup"`` drafts the tokens that followed the latest
        earlier occurrence of the last n-gram (``lookup_ngram_min`` to ``lookup_ngram_max`` tokens, 1 to 4) in
        the prompt or the output, ``speculative=draft`` (a Model of the same vocabulary, smaller or in lower
        precision) drafts greedily, as ``--prompt-lookup`` and ``--draft-model``; the model checks up to
        ``draft_max`` (8) drafted tokens in one step (at least ``draft_min``, 0, once acceptance brings it
        down). The tokens are those plain decoding gives, greedy or sampled with the same seed; the result's
        ``decode_steps``, ``drafted`` and ``accepted`` count the steps and drafts.

        Returns a GenerateResult (text without the prompt, ids, tokens, stop_reason, timings); with
        ``stream=True``, a GenerateStream: an iterator of text pieces as they come, whose ``result`` is the
        GenerateResult once it has ended. Ctrl-C raises KeyboardInterrupt within one token. Errors are
        minigpt.Error with the CLI's messages (which name the setting as the keyword does: ``top_p``).
        """
        return self._generate(prompt, max_new_tokens, _engine_options(options), stream, False)

    @overload
    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        max_new_tokens: int | None = None,
        *,
        stream: Literal[False] = False,
        **options: Unpack[ChatOptions],
    ) -> GenerateResult: ...

    @overload
    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        max_new_tokens: int | None = None,
        *,
        stream: Literal[True],
        **options: Unpack[ChatOptions],
    ) -> GenerateStream: ...

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        max_new_tokens: int | None = None,
        *,
        stream: bool = False,
        **options: Unpack[ChatOptions],
    ) -> GenerateResult | GenerateStream:
        """The assistant's reply to ``messages``, as ``minigpt chat`` gives one turn's.

        ``messages`` is the conversation: a list of ``{"role": ..., "content": ...}`` dicts (system, user,
        assistant), rendered by the model's chat template as transformers' apply_chat_template renders it
        (add_generation_prompt=True) and tokenized as apply_chat_template(tokenize=True). The reply ends at
        an end-of-turn token (the model's eos ids and the template's: <|im_end|>, <|eot_id|>), a stop
        string, ``max_new_tokens`` (default: the model's, else until the context is full) or a full context.
        The keywords are generate()'s (ChatOptions: the sampling settings, ``ctx_size``, ``logprobs``, the
        structured output ones, ``json_schema``, ``grammar``, ``json_object``, and speculative decoding's,
        ``speculative``, ``draft_max``, ``draft_min``, ``lookup_ngram_min``, ``lookup_ngram_max``). Returns what generate()
        returns: ``text`` is the reply, ``prompt_ids`` the rendered conversation's ids. A model without a
        chat template raises ArgumentError saying so.
        """
        return self._generate(_messages_json(messages), max_new_tokens, _engine_options(options), stream, True)
