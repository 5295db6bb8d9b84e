"""minigpt from Python: models, tokenizers, generation and chat (JSON schemas, grammars), logits, attention
maps and perplexity as arrays.

    import minigpt
    m = minigpt.Model("models/shakespeare-char")                 # any path `minigpt -m` takes
    print(m.generate("ROMEO:", max_new_tokens=40, temperature=0).text)
    c = minigpt.Model("SmolLM2-135M-Instruct.Q4_1.gguf")         # a model with a chat template
    print(c.chat([{"role": "user", "content": "A cat?"}], json_schema={"type": "object"}).text)

The same engine as the `minigpt` command (one C++ library), with its defaults and its error messages:
`generate()`'s and `chat()`'s keywords are `minigpt generate`'s and `minigpt chat`'s flags, and every failure
is a `minigpt.Error` (or the subclass of its kind) carrying the line the command prints. Compute runs with the GIL released; Ctrl-C stops a
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
from ._model import ChatOptions, GenerateOptions, Ids, JsonSchema, Model

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "ChatOptions",
    "ConfigError",
    "DeviceError",
    "Error",
    "FormatError",
    "GenerateOptions",
    "GenerateResult",
    "GenerateStream",
    "Ids",
    "IoError",
    "JsonSchema",
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
