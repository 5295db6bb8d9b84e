"""minigpt serve driven by the official `openai` Python client (tests/python/requirements.txt, installed into
.venv by scripts/setup.sh): completions streamed and not, n > 1, token-id prompts, echo + logprobs, usage in
streams, errors; the text and logprobs must equal `minigpt generate --json` for the same seed and flags.

Run by ctest (OpenAIClient.Python) as: .venv/bin/python tests/python/test_openai_client.py
with MINIGPT_CLI naming the built CLI (default build/minigpt).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.request
from typing import Literal

import openai
import pydantic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("MINIGPT_CLI", os.path.join(ROOT, "build", "minigpt"))
MODEL = os.path.join(ROOT, "models", "shakespeare-char")
# The same F32 computation in the server (a request alone in its step, its whole prompt evaluated: the tests
# that compare at TOL send cache_prompt false) and in `generate`: the logprobs agree to the last printed digit;
# 1e-6 leaves room for the decimal round trip of JSON only.
TOL = 1e-6
# With the prompt cache, the prompt's last token is evaluated alone and the rest comes from an earlier step:
# F32 sums grouped differently (measured ~2e-6).
CACHED_TOL = 1e-4


CHAT_MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "chatml-tiny")


class Server:
    def __init__(self, *extra, model=MODEL):
        self.proc = subprocess.Popen([CLI, "serve", "-m", model, "--port", "0", "-np", "4", "-t", "2", *extra],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("minigpt serve did not start: " + line + self.proc.stderr.read())
        self.base_url = "http://127.0.0.1:%s/v1" % m.group(1)
        # The server logs a line per request on stderr: read it all along, or a full pipe would block it.
        self.log = []
        self.reader = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        self.proc.stderr.close()
        return rc


def generate_json(prompt, seed, max_tokens, temperature, top_logprobs=0, extra=(), model=MODEL):
    """`minigpt generate --json`: per-token lines, then the summary."""
    args = [CLI, "generate", "-m", model, "-p", prompt, "--seed", str(seed), "-n", str(max_tokens),
            "--temperature", str(temperature), "--top-k", "0", "--json", "-t", "2", *extra]
    if top_logprobs:
        args += ["--top-logprobs", str(top_logprobs)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    lines = [json.loads(x) for x in out.splitlines()]
    return lines[:-1], lines[-1]["summary"]


class OpenAIClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = openai.OpenAI(base_url=cls.server.base_url, api_key="none", max_retries=0, timeout=120)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        # SIGTERM: a clean exit 0
        assert cls.server.stop() == 0

    def complete(self, **kw):
        return self.client.completions.create(model=self.model, **kw)

    def test_models(self):
        self.assertEqual(self.model, "shakespeare-char")

    def test_text_and_logprobs_equal_generate_json(self):
        for prompt, seed, temperature in [("ROMEO:", 7, 0.0), ("JULIET:\nO", 42, 0.8), ("First Citizen:", 3, 1.3)]:
            tokens, summary = generate_json(prompt, seed, 40, temperature, top_logprobs=3)
            r = self.complete(prompt=prompt, max_tokens=40, seed=seed, temperature=temperature, logprobs=3,
                              extra_body={"top_k": 0, "cache_prompt": False})
            c = r.choices[0]
            self.assertEqual(c.text, summary["text"], prompt)
            self.assertEqual(len(c.logprobs.token_logprobs), len(tokens))
            for got, want in zip(c.logprobs.token_logprobs, tokens):
                self.assertAlmostEqual(got, want["logprob"], delta=TOL)
            for got, want in zip(c.logprobs.top_logprobs, tokens):
                self.assertEqual(sorted(got.values(), reverse=True)[0], max(t["logprob"] for t in want["top_logprobs"]))
            self.assertEqual(r.usage.completion_tokens, summary["generated_tokens"])
            self.assertEqual(r.usage.prompt_tokens, summary["prompt_tokens"])
            self.assertEqual(c.finish_reason, "length")

    def test_streaming_equals_generate_json(self):
        tokens, summary = generate_json("KING:", 11, 32, 1.0)
        stream = self.complete(prompt="KING:", max_tokens=32, seed=11, temperature=1.0, stream=True, logprobs=0,
                               stream_options={"include_usage": True},
                               extra_body={"top_k": 0, "cache_prompt": False})
        text, lps, finish, usage = "", [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.text
                if c.logprobs is not None:
                    lps += c.logprobs.token_logprobs
                if c.finish_reason is not None:
                    finish = c.finish_reason
        self.assertEqual(text, summary["text"])
        self.assertEqual(len(lps), len(tokens))
        for got, want in zip(lps, tokens):
            self.assertAlmostEqual(got, want["logprob"], delta=TOL)
        self.assertEqual(finish, "length")
        self.assertIsNotNone(usage, "stream_options.include_usage gave no usage chunk")
        self.assertEqual(usage.completion_tokens, 32)

    def test_prompt_cache_is_reported_and_agrees(self):
        prompt = "BRUTUS:\nThe games are done and Caesar is returning."
        tokens, summary = generate_json(prompt, 5, 24, 0.9)
        runs = [self.complete(prompt=prompt, max_tokens=24, seed=5, temperature=0.9, logprobs=0,
                              extra_body={"top_k": 0}) for _ in range(2)]
        # The second finds the first's slot holding the prompt: all but its last token come from the cache.
        self.assertEqual(runs[1].usage.prompt_tokens_details.cached_tokens, summary["prompt_tokens"] - 1)
        for r in runs:
            c = r.choices[0]
            self.assertEqual(c.text, summary["text"])
            for got, want in zip(c.logprobs.token_logprobs, tokens):
                self.assertAlmostEqual(got, want["logprob"], delta=CACHED_TOL)
        off = self.complete(prompt=prompt, max_tokens=1, extra_body={"cache_prompt": False})
        self.assertEqual(off.usage.prompt_tokens_details.cached_tokens, 0)

    def test_n_choices_are_seed_plus_j(self):
        r = self.complete(prompt="HAMLET:", n=3, max_tokens=20, seed=100, temperature=1.0, extra_body={"top_k": 0})
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        for j, c in enumerate(r.choices):
            _, summary = generate_json("HAMLET:", 100 + j, 20, 1.0)
            self.assertEqual(c.text, summary["text"], "choice %d" % j)
        self.assertGreater(len({c.text for c in r.choices}), 1)

    def test_token_id_prompt(self):
        req = urllib.request.Request(self.server.base_url[: -len("/v1")] + "/tokenize",
                                     data=json.dumps({"content": "ROMEO:"}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            ids = json.load(resp)["tokens"]
        by_text = self.complete(prompt="ROMEO:", max_tokens=10, temperature=0)
        by_ids = self.complete(prompt=ids, max_tokens=10, temperature=0)
        self.assertEqual(by_ids.choices[0].text, by_text.choices[0].text)

    def test_echo_logprobs_scores_text_as_lm_eval_does(self):
        # The prompt is "P" + the greedy continuation generate gives: scoring it with echo and max_tokens 0
        # must give, for the continuation's tokens, the logprobs generate reported when it produced them.
        tokens, summary = generate_json("MENENIUS:", 0, 12, 0.0)
        text = "MENENIUS:" + summary["text"]
        r = self.complete(prompt=text, max_tokens=0, echo=True, logprobs=1, temperature=0)
        lp = r.choices[0].logprobs
        self.assertEqual(r.choices[0].text, text)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertEqual("".join(lp.tokens), text)
        self.assertEqual(lp.text_offset[:3], [0, 1, 2])
        n_prompt = len(lp.tokens) - len(tokens)
        for got, want in zip(lp.token_logprobs[n_prompt:], tokens):
            self.assertAlmostEqual(got, want["logprob"], delta=1e-4)  # a prefill step, not decode steps
        self.assertEqual(r.usage.completion_tokens, 0)

    def test_penalties_and_logit_bias_equal_generate_json(self):
        # The client's presence_penalty, frequency_penalty and logit_bias ({"101": -100}: no "e") as the same
        # generate flags give them.
        lines, summary = generate_json("ROMEO:", 7, 60, 0.8, extra=("--presence-penalty", "0.6",
                                                                    "--frequency-penalty", "0.3",
                                                                    "--logit-bias", "101-100"))
        r = self.complete(prompt="ROMEO:", max_tokens=60, temperature=0.8, seed=7, presence_penalty=0.6,
                          frequency_penalty=0.3, logit_bias={"101": -100}, extra_body={"cache_prompt": False})
        self.assertEqual(r.choices[0].text, summary["text"])
        self.assertNotIn("e", r.choices[0].text)
        self.assertEqual(summary["sampling"]["logit_bias"], {"101": -100.0})
        self.assertEqual(len(lines), 60)

    def test_stop_string_spanning_tokens_is_never_streamed(self):
        _, summary = generate_json("ROMEO:", 0, 30, 0.0)
        stop = summary["text"][5:8]
        want = summary["text"][: summary["text"].find(stop)]
        seen = ""
        for chunk in self.complete(prompt="ROMEO:", max_tokens=30, temperature=0, stop=[stop], stream=True):
            for c in chunk.choices:
                seen += c.text
                self.assertNotIn(stop[0], seen[len(want):])
        self.assertEqual(seen, want)

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.complete(prompt="x", max_tokens=-1)
        self.assertIn("max_tokens", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.complete(prompt="x", presence_penalty=3.0)
        self.assertIn("presence_penalty: must be in [-2, 2], got 3.0", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.complete(prompt="x", logit_bias={"256": 1})
        self.assertIn("token id 256 is outside the vocabulary [0, 256)", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.complete(prompt="x" * 500)
        self.assertIn("maximum context length", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "hi"}])
        self.assertIn("no chat template", str(e.exception))
        # a model this server does not serve: the OpenAI API's 404, not another model's answer
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.completions.create(model="gpt-4o", prompt="x", max_tokens=1)
        self.assertIn("this server serves: shakespeare-char", str(e.exception))
        self.assertEqual(e.exception.body["code"], "model_not_found")


class Chat(unittest.TestCase):
    """/v1/chat/completions on chatml-tiny (a random GPT-2 with Qwen2.5's ChatML template): the server renders
    the messages with the model's template; its text and logprobs must equal `minigpt generate --json` on the
    prompt transformers' apply_chat_template renders (tests/fixtures/models/chatml-tiny/reference.json)."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(model=CHAT_MODEL)
        cls.client = openai.OpenAI(base_url=cls.server.base_url, api_key="none", max_retries=0, timeout=120)
        with open(os.path.join(CHAT_MODEL, "reference.json"), encoding="utf-8") as f:
            cls.ref = json.load(f)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def generate(self, case, seed, max_tokens, temperature, top_logprobs=0):
        return generate_json(case["prompt"], seed, max_tokens, temperature, top_logprobs, extra=("--special",),
                             model=CHAT_MODEL)

    def test_chat_equals_generate_json_on_transformers_prompt(self):
        for case, seed, temperature in zip(self.ref["cases"], [1, 2, 3, 4], [0.0, 0.7, 1.0, 1.2]):
            tokens, summary = self.generate(case, seed, 16, temperature, top_logprobs=2)
            r = self.client.chat.completions.create(model="chatml-tiny", messages=case["messages"], max_tokens=16,
                                                    seed=seed, temperature=temperature, logprobs=True,
                                                    top_logprobs=2, extra_body={"top_k": 0, "cache_prompt": False})
            c = r.choices[0]
            self.assertEqual(c.message.role, "assistant")
            self.assertEqual(c.message.content, summary["text"], case["name"])
            self.assertEqual(r.usage.prompt_tokens, len(case["ids"]))
            self.assertEqual(r.usage.prompt_tokens, summary["prompt_tokens"])
            self.assertEqual(r.usage.completion_tokens, summary["generated_tokens"])
            self.assertEqual(len(c.logprobs.content), len(tokens))
            for got, want in zip(c.logprobs.content, tokens):
                self.assertAlmostEqual(got.logprob, want["logprob"], delta=TOL)
                self.assertEqual(len(got.top_logprobs), 2)

    def test_chat_streaming_equals_generate_json(self):
        case = self.ref["cases"][1]
        tokens, summary = self.generate(case, 9, 20, 1.0)
        stream = self.client.chat.completions.create(model="chatml-tiny", messages=case["messages"], max_tokens=20,
                                                     seed=9, temperature=1.0, stream=True, logprobs=True,
                                                     stream_options={"include_usage": True},
                                                     extra_body={"top_k": 0, "cache_prompt": False})
        text, lps, roles, finish, usage = "", [], [], None, None
        for chunk in stream:
            self.assertEqual(chunk.object, "chat.completion.chunk")
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                if c.delta.role:
                    roles.append(c.delta.role)
                text += c.delta.content or ""
                if c.logprobs is not None and c.logprobs.content:
                    lps += [x.logprob for x in c.logprobs.content]
                if c.finish_reason is not None:
                    finish = c.finish_reason
        self.assertEqual(roles, ["assistant"])
        self.assertEqual(text, summary["text"])
        self.assertEqual(len(lps), len(tokens))
        for got, want in zip(lps, tokens):
            self.assertAlmostEqual(got, want["logprob"], delta=TOL)
        self.assertEqual(finish, "stop" if summary["stop_reason"] == "eos" else "length")
        self.assertEqual(usage.completion_tokens, summary["generated_tokens"])

    def test_chat_n_choices_are_seed_plus_j(self):
        case = self.ref["cases"][0]
        r = self.client.chat.completions.create(model="chatml-tiny", messages=case["messages"], n=2, max_tokens=12,
                                                seed=50, temperature=1.0, extra_body={"top_k": 0})
        for j, c in enumerate(r.choices):
            _, summary = self.generate(case, 50 + j, 12, 1.0)
            self.assertEqual(c.message.content, summary["text"], "choice %d" % j)

    def test_chat_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="chatml-tiny", messages=[])
        self.assertIn("messages: must not be empty", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="chatml-tiny", messages=[{"role": "user", "content": [{"type": "image_url",
                                                                              "image_url": {"url": "x"}}]}])
        self.assertIn("only text content", str(e.exception))
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        self.assertIn("The model 'gpt-4o' does not exist; this server serves: chatml-tiny", str(e.exception))


def whitespace_bias(base_url):
    """A logit bias of -100 on the tokens that are only whitespace: a random-weight model writes whitespace as
    often as anything, and JSON with up to 20 spaces between its tokens would not end inside chatml-tiny's 128
    positions (the bias applies under a constraint, as OpenAI's does)."""
    root = base_url[: -len("/v1")]
    with open(os.path.join(CHAT_MODEL, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    n_vocab = 1 + max([*tok["model"]["vocab"].values(), *(t["id"] for t in tok["added_tokens"])])
    bias = {}
    for i in range(n_vocab):
        req = urllib.request.Request(root + "/detokenize", data=json.dumps({"tokens": [i]}).encode(),
                                     headers={"Content-Type": "application/json"})
        text = json.load(urllib.request.urlopen(req))["prompt"]
        if text and not text.strip(" \t\r\n"):
            bias[str(i)] = -100
    return bias


class Weather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=3)
    unit: Literal["C", "F"]


class OpenAIClientStructured(unittest.TestCase):
    """What programs do with the openai client: parse() into a pydantic model, tools with tool_choice, the
    stream helper's tool calls (its accumulated arguments parsed into the tool's model), on chatml-tiny (its
    own Qwen 2.5 template: the <tool_call> format)."""

    # Qwen 2.5's tool format in a few lines: its own template's tool instructions alone are longer than
    # chatml-tiny's 128 positions.
    HERMES = (
        "{%- if tools %}<|im_start|>system\ntools:{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n"
        "{% endif %}{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
        "{% for c in m.tool_calls %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
        "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n{% elif m.role == 'tool' %}"
        "<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n{% else %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        template = os.path.join(cls.tmp.name, "hermes.jinja")
        with open(template, "w", encoding="utf-8") as f:
            f.write(cls.HERMES)
        cls.server = Server("--chat-template", template, model=CHAT_MODEL)
        cls.client = openai.OpenAI(base_url=cls.server.base_url, api_key="none", max_retries=0, timeout=120)
        cls.bias = whitespace_bias(cls.server.base_url)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.tmp.cleanup()

    def test_parse_returns_the_pydantic_model(self):
        parsed = 0
        for seed in range(4):
            r = self.client.chat.completions.parse(
                model="chatml-tiny", messages=[{"role": "user", "content": "Weather, as JSON"}],
                response_format=Weather, seed=seed, temperature=1.0, logit_bias=self.bias)
            c = r.choices[0]
            if c.finish_reason == "length":
                continue
            self.assertIsInstance(c.message.parsed, Weather)
            parsed += 1
        self.assertGreaterEqual(parsed, 3)

    def test_tool_calls_and_the_stream_helper(self):
        tools = [openai.pydantic_function_tool(Weather, name="get_weather", description="The weather in a city")]
        called = 0
        for seed in range(3):
            kw = dict(model="chatml-tiny", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools,
                      tool_choice="required", seed=seed, temperature=1.0, logit_bias=self.bias)
            whole = self.client.chat.completions.create(**kw).choices[0]
            if whole.finish_reason != "tool_calls":  # cut by the context (the helper raises on those)
                self.assertEqual(whole.finish_reason, "length")
                continue
            with self.client.chat.completions.stream(**kw) as stream:
                final = stream.get_final_completion().choices[0]
            self.assertEqual(final.finish_reason, "tool_calls")
            called += 1
            self.assertEqual(len(final.message.tool_calls), len(whole.message.tool_calls))
            for got, want in zip(final.message.tool_calls, whole.message.tool_calls):
                self.assertEqual(got.function.name, "get_weather")
                self.assertEqual(json.loads(got.function.arguments), json.loads(want.function.arguments))
                # the helper parses a strict tool's arguments into its model
                self.assertIsInstance(got.function.parsed_arguments, Weather)
        self.assertGreaterEqual(called, 2)

    def test_unknown_tool_choice_is_400(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="chatml-tiny", messages=[{"role": "user", "content": "hi"}],
                tools=[openai.pydantic_function_tool(Weather, name="get_weather")],
                tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertIn("not in tools", str(e.exception))


def smollm2_gguf():
    path = os.environ.get("MINIGPT_SMOLLM2_GGUF") or os.path.join(
        os.environ.get("MINIGPT_MODEL_CACHE", os.path.expanduser("~/.cache/minigpt-models")),
        "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


@unittest.skipIf(smollm2_gguf() is None, "the real SmolLM2-135M-Instruct GGUF is absent (set MINIGPT_SMOLLM2_GGUF)")
class RealSmolLM2ToolLoop(unittest.TestCase):
    """The tool-calling loop of the openai client's docs against the real SmolLM2-135M-Instruct, whose template
    knows no tools (llama.cpp's generic JSON format): a call, its result sent back as a tool message, then an
    answer in words."""

    def test_loop_completes(self):
        server = Server(model=smollm2_gguf())
        try:
            client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=300)
            tools = [{"type": "function", "function": {
                "name": "get_weather", "description": "The current temperature in a city, in Celsius",
                "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                               "required": ["city"]}}}]
            messages = [{"role": "user", "content": "What is the temperature in Paris?"}]
            model = client.models.list().data[0].id
            # One call (the 135M model repeats a call in a list without end), then its answer in words: it asks
            # for the same tool again where it may choose, so the last turn is tool_choice "none".
            first = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="required",
                                                   parallel_tool_calls=False, temperature=0, max_tokens=200)
            c = first.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c)
            call = c.message.tool_calls[0]
            self.assertEqual(call.function.name, "get_weather")
            self.assertEqual(json.loads(call.function.arguments), {"city": "Paris"})
            messages.append(c.message.model_dump(exclude_none=True))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "21"})
            final = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="none",
                                                   temperature=0, max_tokens=200)
            f = final.choices[0]
            self.assertEqual(f.finish_reason, "stop", f)
            self.assertIsNone(f.message.tool_calls)
            self.assertTrue(f.message.content)
        finally:
            self.assertEqual(server.stop(), 0)


class ApiKey(unittest.TestCase):
    def test_wrong_key_is_401(self):
        server = Server("--api-key", "k3y")
        try:
            bad = openai.OpenAI(base_url=server.base_url, api_key="nope", max_retries=0)
            with self.assertRaises(openai.AuthenticationError):
                bad.completions.create(model="shakespeare-char", prompt="x", max_tokens=1)
            good = openai.OpenAI(base_url=server.base_url, api_key="k3y", max_retries=0)
            self.assertEqual(good.completions.create(model="shakespeare-char", prompt="x",
                                                     max_tokens=2).usage.completion_tokens, 2)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    if not os.access(CLI, os.X_OK):
        sys.exit("test_openai_client.py: no minigpt CLI at %s (set MINIGPT_CLI)" % CLI)
    unittest.main(verbosity=2)
