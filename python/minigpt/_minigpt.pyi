"""Type stubs of minigpt's extension module (python/minigpt/_minigpt.cpp); the package re-exports it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

_Ids = Sequence[int] | npt.NDArray[np.integer[Any]]

class Error(Exception):
    """Every failure minigpt reports, with the one-line message the minigpt command prints."""

    kind: str | None

class IoError(Error, OSError):
    """A file could not be opened, mapped or read."""

    kind: str | None

class FormatError(Error):
    """A file is malformed (truncated, bad header, bad offsets, not JSON, bad UTF-8...)."""

class ConfigError(Error):
    """config.json is inconsistent or lacks a field."""

class ShapeError(Error):
    """A tensor's dtype or shape disagrees with what the config implies."""

class ArgumentError(Error, ValueError):
    """A bad value: a token id outside the vocabulary, a context overflow, an option out of range."""

class UnsupportedError(Error):
    """Valid input this build does not handle (another model_type, no CUDA device...)."""

class DeviceError(Error):
    """A device call failed at run time (CUDA or cuBLAS error, out of device memory)."""

class NumericError(Error):
    """The computation produced NaN or Inf (logits that cannot be sampled from)."""

class Tokenizer:
    """A byte-level BPE tokenizer, as Hugging Face `tokenizers` encodes. Immutable; shareable between threads."""

    @staticmethod
    def load(path: str) -> Tokenizer:
        """Loads the tokenizer of a model directory or of a GGUF file."""
    def encode(self, text: str, *, add_special_tokens: bool = True, special: bool = False) -> list[int]:
        """The ids of `text` (with the template's special tokens unless add_special_tokens=False)."""
    def decode(self, ids: _Ids, *, skip_special_tokens: bool = False) -> str:
        """The text of `ids`; bytes that do not form whole characters become U+FFFD."""
    def token_bytes(self, id: int) -> bytes:
        """The bytes one token stands for."""
    def token_symbol(self, id: int) -> str:
        """The token as the vocabulary spells it ('Ġworld')."""
    def is_special(self, id: int) -> bool:
        """Whether the token is an added token marked special (<|endoftext|>)."""
    @property
    def n_vocab(self) -> int:
        """The number of ids."""
    def __len__(self) -> int: ...
    @property
    def eos_id(self) -> int | None:
        """The file's end of text (a GGUF file's tokenizer.ggml.eos_token_id, SentencePiece's </s>), else
        <|endoftext|>'s id when the vocabulary has it; token_symbol(eos_id) names it."""
    @property
    def bos_id(self) -> int | None:
        """The file's beginning of text (a GGUF file's tokenizer.ggml.bos_token_id, SentencePiece's <s>), else
        eos_id; token_symbol(bos_id) names it."""

class Token:
    """One generated token."""

    @property
    def id(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def logprob(self) -> float | None: ...
    @property
    def top_logprobs(self) -> list[tuple[int, float]]: ...

class GenerateResult:
    """What Model.generate() and Model.chat() return (stream=False)."""

    @property
    def text(self) -> str: ...
    @property
    def ids(self) -> list[int]: ...
    @property
    def prompt_ids(self) -> list[int]: ...
    @property
    def tokens(self) -> list[Token]: ...
    @property
    def logprobs(self) -> list[float] | None: ...
    @property
    def stop_reason(self) -> Literal["length", "eos", "stop", "context", "cancelled"]: ...
    @property
    def stop(self) -> str | None: ...
    @property
    def seed(self) -> int: ...
    @property
    def prompt_dropped(self) -> int: ...
    @property
    def slides(self) -> int: ...
    @property
    def prefill_seconds(self) -> float: ...
    @property
    def first_token_seconds(self) -> float: ...
    @property
    def decode_seconds(self) -> float: ...
    @property
    def decode_steps(self) -> int: ...
    @property
    def drafted(self) -> int: ...
    @property
    def accepted(self) -> int: ...

class GenerateStream(Iterator[str]):
    """What Model.generate(stream=True) and chat(stream=True) return: text pieces as they come; `result` once
    it has ended."""

    def __iter__(self) -> GenerateStream: ...
    def __next__(self) -> str: ...
    def close(self) -> None:
        """Ends the generation now (stop_reason 'cancelled')."""
    @property
    def result(self) -> GenerateResult | None: ...
    def __enter__(self) -> GenerateStream: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

class PerplexityResult:
    """What Model.perplexity() returns, as `minigpt perplexity --json`."""

    @property
    def ppl(self) -> float: ...
    @property
    def ppl_error(self) -> float: ...
    @property
    def nll_mean(self) -> float: ...
    @property
    def nll_stderr(self) -> float: ...
    @property
    def n_tokens(self) -> int: ...
    @property
    def n_scored(self) -> int: ...
    @property
    def n_windows(self) -> int: ...
    @property
    def n_evaluated(self) -> int: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def stride(self) -> int | None: ...
    @property
    def recipe(self) -> Literal["chunks", "stride"]: ...
    @property
    def seconds(self) -> float: ...

class Session:
    """One run's KV cache over a model: eval() appends tokens and gives logits, step by step."""

    def eval(self, ids: _Ids, *, all_logits: bool = False) -> npt.NDArray[np.float32]:
        """Appends `ids`; the logits of the last one ([n_vocab]), or of every one with all_logits=True."""
    @property
    def logits(self) -> npt.NDArray[np.float32] | None:
        """The logits after the last eval() ([n_vocab]); None before."""
    def reset(self) -> None:
        """Forgets every token (keeps the memory)."""
    def keep(self, n: int) -> None:
        """Keeps the first n positions and forgets the rest."""
    @property
    def n_past(self) -> int: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def tokens(self) -> list[int]: ...

class Model:
    """A loaded model (any path `minigpt -m` takes). Immutable after load; shareable between threads."""

    def __init__(
        self,
        path: str,
        *,
        dtype: Literal["f32", "f16", "bf16", "stored"] | str = "stored",
        threads: int = 0,
        backend: str = "cpu",
        device: int = 0,
        cache_type: Literal["f32", "f16", "bf16"] | str | None = None,
        tokenizer: str | None = None,
        bf16_math: Literal["auto", "f32", "bf16"] | str = "auto",
    ) -> None: ...
    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer; raises the error that loading it gave when it has none."""
    @property
    def has_tokenizer(self) -> bool: ...
    def _generate(
        self,
        prompt: str | _Ids,
        max_new_tokens: int | None,
        options: Mapping[str, Any],
        stream: bool,
        chat: bool,
    ) -> GenerateResult | GenerateStream: ...
    def logits(self, ids: _Ids) -> npt.NDArray[np.float32]:
        """The logits of every token of `ids` ([len(ids), n_vocab]), from an empty context."""
    def attention(self, text_or_ids: str | _Ids, *, special: bool = False) -> npt.NDArray[np.float32]:
        """Attention probabilities [n_layer, n_head, T, T], as transformers' output_attentions."""
    def perplexity(
        self,
        text_or_ids: str | _Ids,
        *,
        ctx_size: int | None = None,
        stride: int | None = None,
        chunks: int | None = None,
        batch_size: int = 512,
    ) -> PerplexityResult:
        """Perplexity as `minigpt perplexity` (llama.cpp's chunks, or transformers' stride windows)."""
    def session(self, *, ctx_size: int | None = None) -> Session:
        """A Session for step-by-step evaluation."""
    @property
    def config(self) -> dict[str, int | str]: ...
    @property
    def path(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def n_params(self) -> int: ...

def backends() -> list[tuple[str, str]]:
    """The backends of this build: (name, why it cannot run here; empty when it can)."""
