"""minigpt from Python: models, tokenizers, generation, logits, attention maps and perplexity as arrays.

    import minigpt
    m = minigpt.Model("models/shakespeare-char")                 # any path `minigpt -m` takes
    print(m.generate("ROMEO:", max_new_tokens=40, temperature=0).text)

The same engine as the `minigpt` command (one C++ library), with its defaults and its error messages:
`generate()`'s keywords are `minigpt generate`'s flags, and every failure is a `minigpt.Error` (or the subclass
of its kind) carrying the line the command prints. Compute runs with the GIL released; Ctrl-C stops a
generation within one token. See docs/python.md.
"""

from ._minigpt import (
    ArgumentError,
    ConfigError,
    DeviceError,
    Error,
    FormatError,
    GenerateResult,
    GenerateStream,
    IoError,
    NumericError,
    PerplexityResult,
    Session,
    ShapeError,
    Token,
    Tokenizer,
    UnsupportedError,
    backends,
)
from ._model import Ids, Model

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "ConfigError",
    "DeviceError",
    "Error",
    "FormatError",
    "GenerateResult",
    "GenerateStream",
    "Ids",
    "IoError",
    "Model",
    "NumericError",
    "PerplexityResult",
    "Session",
    "ShapeError",
    "Token",
    "Tokenizer",
    "UnsupportedError",
    "backends",
]
