"""langchain-openai's with_structured_output against `minigpt serve` (issue: real clients).

Run: a venv with `pip install langchain-openai` (1.8.1 and openai 3.63.0 when the committed output was made),
then
    build/minigpt serve -m SmolLM2-135M-Instruct.Q4_1.gguf --port 18092 &
    python tools/clients/langchain_structured.py http://127.0.0.1:18092/v1 SmolLM2-135M-Instruct.Q4_1.gguf
Each of langchain's three methods asks for a pydantic Cat: json_schema (response_format json_schema),
function_calling (a tool call, tool_choice naming the function), json_mode (response_format json_object,
the schema only in words). Raw output: bench/results/2026-12-07-langchain-structured-output.txt.
"""
import sys
from importlib.metadata import version

from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field


class Cat(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=30)


print("langchain-openai", version("langchain-openai"), "openai", version("openai"))
llm = ChatOpenAI(base_url=sys.argv[1], api_key="none", model=sys.argv[2], temperature=0, max_tokens=100)
for method in ("json_schema", "function_calling", "json_mode"):
    try:
        out = llm.with_structured_output(Cat, method=method).invoke("Describe a cat called Tom, aged 3, as JSON.")
        print(method, type(out).__name__, out)
    except Exception as e:  # noqa: BLE001: the client's own error is the result
        print(method, "ERROR", type(e).__name__, str(e)[:200])
