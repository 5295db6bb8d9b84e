#!/usr/bin/env python3
"""Golden chat-template data for minigpt's tests (tests/test_chat_template.cpp, tests/python): what
transformers' apply_chat_template renders (its jinja2 sandbox: trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, strftime_now, its own tojson) for real models' templates, and a tiny chat model.

Usage: python3 tools/reference/make_chat_reference.py [--templates DIR] [--names FILE]

1. tests/fixtures/chat/templates.json: the chat templates of real models as llama.cpp's source keeps them
   (models/templates/*.jinja of the llama.cpp that the llama_cpp_python sdist on PyPI vendors; --templates
   names that folder, default: the one bench/peer.sh unpacks into ~/.cache/minigpt-peer), the subset named in
   tests/fixtures/chat/names.txt (the ones minigpt renders; see tests/README.md for those it does not), each
   rendered by transformers for every conversation of CONVERSATIONS with add_generation_prompt false and true:
   "output", or "error" (the TemplateError's message: raise_exception, or a template that cannot handle that
   conversation). Special tokens are generic strings; strftime_now sees 2024-07-26 14:05:09 (a fixed
   datetime.now, so that templates printing today's date stay reproducible).
2. tests/fixtures/models/chatml-tiny/: a random GPT-2 (2 layers, 32 wide) with a byte-level BPE trained on
   tinyshakespeare (tokenizers' BpeTrainer, 384 tokens) plus <|endoftext|>, <|im_start|>, <|im_end|>, saved by
   transformers with Qwen2.5-7B-Instruct's chat template (the ChatML format) and eos <|im_end|>; and
   reference.json: for each conversation, the rendered prompt, its ids (apply_chat_template(tokenize=True)),
   and the ids model.generate(do_sample=False, max_new_tokens=12) adds.
3. templates.json's "models": the templates of REAL_MODELS (Llama 3.1 / 3.2, Qwen2.5, Qwen3, SmolLM3,
   Mistral-Nemo, Phi-3.5; copied into tests/fixtures/chat/templates/ with llama.cpp's LICENSE) rendered by a
   transformers tokenizer's apply_chat_template with each model's own special tokens, for every non-empty
   conversation.
4. tests/fixtures/chat/session.json: a `minigpt chat` session on chatml-tiny (SESSION: a system prompt, two
   turns, a third stopped by Ctrl-C, /reset, a fourth): each turn's prompt as apply_chat_template renders the
   conversation so far, its ids, and the greedy reply (see chat_session()).

Deterministic (transformers 5.23.0, tokenizers 0.23.3, torch 2.15.0): re-running gives identical files.
"""
import argparse
import datetime as dt
import json
import os

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.utils import chat_template_utils

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
DEFAULT_TEMPLATES = os.path.expanduser("~/.cache/minigpt-peer/llama.cpp/models/templates")
NOW = dt.datetime(2024, 7, 26, 14, 5, 9)
TOKENS = {"bos_token": "<BOS>", "eos_token": "<EOS>", "unk_token": "<UNK>", "pad_token": "<PAD>"}

CONVERSATIONS = [
    ("user", [{"role": "user", "content": "Hello, who are you?"}]),
    ("system_user", [{"role": "system", "content": "You are a terse assistant."},
                     {"role": "user", "content": "Name a prime number."}]),
    ("multi_turn", [{"role": "system", "content": "Answer in one word."},
                    {"role": "user", "content": "Capital of France?"},
                    {"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": "And of Italy?"}]),
    ("ends_with_assistant", [{"role": "user", "content": "Say hi."},
                             {"role": "assistant", "content": "Hi!"}]),
    ("not_alternating", [{"role": "user", "content": "One."}, {"role": "user", "content": "Two."}]),
    ("text_that_looks_like_jinja", [{"role": "user",
                                     "content": "  {{ messages }} {% if x %} \"quotes\" 'single' \\n \u00dcnic\u00f6de \u2713 \U0001F600  "}]),
    ("empty_content", [{"role": "user", "content": ""}]),
    ("no_messages", []),
    ("unicode_multi_turn", [{"role": "system", "content": "R\u00e9ponds en fran\u00e7ais. \u65e5\u672c\u8a9e\u3082OK."},
                            {"role": "user", "content": "\u00bfQu\u00e9 tal? \u0645\u0631\u062d\u0628\u0627 \U0001F44B\n\tTab and newline."},
                            {"role": "assistant", "content": "Tr\u00e8s bien \u2014 \u2603 merci !"},
                            {"role": "user", "content": "\u0394\u03b5\u03c5\u03c4\u03b5\u03c1\u03bf; \U0001F680\U0001F1EB\U0001F1F7"},
                            {"role": "assistant", "content": "\u0394\u03b5\u03cd\u03c4\u03b5\u03c1\u03bf."},
                            {"role": "user", "content": "Fin."}]),
    ("empty_system", [{"role": "system", "content": ""}, {"role": "user", "content": "Hello?"},
                      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye."}]),
    ("three_turns", [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
                     {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
                     {"role": "user", "content": "4+4?"}, {"role": "assistant", "content": "8"}]),
]

# Real models' templates rendered with each model's own special tokens, through a transformers tokenizer
# object (apply_chat_template, which passes the tokenizer's special_tokens_map to the template): the files
# copied into tests/fixtures/chat/templates/ (llama.cpp's, MIT: the LICENSE there). The tokens are those of
# each model's tokenizer_config.json on the Hugging Face hub (None: the model has no such token); `extra`:
# variables the template reads (the Llama templates' date_string, fixed).
REAL_MODELS = [
    ("meta-llama-Llama-3.1-8B-Instruct", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
     {"date_string": "05 Mar 2025"}),
    ("meta-llama-Llama-3.2-3B-Instruct", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
     {"date_string": "05 Mar 2025"}),
    ("Qwen-Qwen2.5-7B-Instruct", {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
     {}),
    ("Qwen-Qwen3-0.6B", {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, {}),
    ("HuggingFaceTB-SmolLM3-3B", {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}, {}),
    ("mistralai-Mistral-Nemo-Instruct-2407", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, {}),
    ("microsoft-Phi-3.5-mini-instruct", {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
                                         "pad_token": "<|endoftext|>"}, {}),
]


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


def render(source, messages, add_generation_prompt, **extra):
    try:
        return {"output": chat_template_utils.render_jinja_template(
            conversations=[messages], chat_template=source, add_generation_prompt=add_generation_prompt,
            **TOKENS, **extra)[0][0]}
    except Exception as e:  # jinja2's TemplateError and the TypeError/KeyError of a template's own bugs
        return {"error": f"{type(e).__name__}: {e}"}


def real_models_json():
    """For each of REAL_MODELS: a tokenizer object with the model's special tokens and the template set,
    apply_chat_template on every conversation, with and without the generation prompt."""
    out = []
    for name, tokens, extra in REAL_MODELS:
        with open(os.path.join(FIX, "chat", "templates", name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        # chatml-tiny's tokenizer (the tokens the template names are added to it; the text is what counts)
        tok = Tokenizer.from_file(os.path.join(FIX, "models", "chatml-tiny", "tokenizer.json"))
        hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=source,
                                         **{k: v for k, v in tokens.items() if v is not None})
        cases = []
        for ci, (_, messages) in enumerate(CONVERSATIONS):
            if not messages:
                continue  # apply_chat_template refuses an empty conversation before the template sees it
            for agp in (False, True):
                try:
                    r = {"output": hf_tok.apply_chat_template(messages, tokenize=False,
                                                              add_generation_prompt=agp, **extra)}
                except Exception as e:  # the template's raise_exception, or one that cannot take the conversation
                    r = {"error": f"{type(e).__name__}: {e}"}
                cases.append({"conversation": ci, "add_generation_prompt": agp, **r})
        out.append({"name": name, "file": "templates/" + name + ".jinja",
                    "special_tokens": hf_tok.special_tokens_map, "extra": extra, "cases": cases})
    return out


def templates_json(template_dir, names):
    chat_template_utils.datetime = FixedDatetime
    out = {"transformers": transformers.__version__, "tokens": TOKENS, "now": NOW.isoformat(),
           "conversations": [{"name": n, "messages": m} for n, m in CONVERSATIONS], "templates": []}
    for name in names:
        with open(os.path.join(template_dir, name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        cases = []
        for ci, (_, messages) in enumerate(CONVERSATIONS):
            for agp in (False, True):
                cases.append({"conversation": ci, "add_generation_prompt": agp, **render(source, messages, agp)})
        out["templates"].append({"name": name, "source": source, "cases": cases})
    return out


def chat_model(template_dir):
    out_dir = os.path.join(FIX, "models", "chatml-tiny")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(FIX, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = f.read()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text[i:i + 4096] for i in range(0, len(text), 4096)], trainer)
    with open(os.path.join(template_dir, "Qwen-Qwen2.5-7B-Instruct.jinja"), encoding="utf-8") as f:
        template = f.read()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                     pad_token="<|endoftext|>", chat_template=template)
    hf_tok.save_pretrained(out_dir)

    torch.manual_seed(20241124)
    config = GPT2Config(vocab_size=len(hf_tok), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=hf_tok.convert_tokens_to_ids("<|endoftext|>"),
                        eos_token_id=hf_tok.convert_tokens_to_ids("<|im_end|>"), initializer_range=0.5)
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(out_dir)

    ref = {"transformers": transformers.__version__, "max_new_tokens": 12, "cases": []}
    for name, messages in CONVERSATIONS[:4]:
        prompt = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = hf_tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=12,
                                 pad_token_id=config.bos_token_id)[0, len(ids):].tolist()
        ref["cases"].append({"name": name, "messages": messages, "prompt": prompt, "ids": ids, "generated": gen})
    with open(os.path.join(out_dir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")


# `minigpt chat` on chatml-tiny (tests/test_chat_cli.cpp): the system prompt, the user's lines, and the reply
# length; turn 3 is stopped by Ctrl-C, then /reset clears the history and turn 4 starts again.
SESSION = {"system": "Be brief.", "max_new_tokens": 6,
           "users": ["Hi there.", "Why?", "Stop me.", "Again."]}


def chat_session():
    """tests/fixtures/chat/session.json: for turns 1 and 2, the prompt apply_chat_template renders for the
    history so far (the system prompt, the users' lines, the replies), its ids, and the reply: the ids
    model.generate(do_sample=False) adds (up to max_new_tokens, ending at eos <|im_end|>) and their text
    (decode(skip_special_tokens=True), what the history keeps as the assistant's content); the same for turn 3,
    whose reply Ctrl-C cuts short; for turn 4, after /reset, the prompt of the system prompt and its line
    alone, and its reply."""
    d = os.path.join(FIX, "models", "chatml-tiny")
    tok = transformers.AutoTokenizer.from_pretrained(d)
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    # The random model's tokens that are parts of characters (a lone byte >= 0x80) are suppressed, so that each
    # reply is whole characters and its text reads back as the same bytes (the test gives minigpt the same
    # list as --logit-bias ID-inf).
    suppress = [i for i in range(len(tok)) if "\ufffd" in tok.decode([i])]
    system = [{"role": "system", "content": SESSION["system"]}]
    history = list(system)
    turns = []

    def turn(messages):
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
        t = {"messages": list(messages), "prompt": prompt, "ids": ids}
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=SESSION["max_new_tokens"],
                                 pad_token_id=model.config.bos_token_id, suppress_tokens=suppress)[0, len(ids):].tolist()
        if gen and gen[-1] == model.config.eos_token_id:
            gen = gen[:-1]
        t["reply_ids"] = gen
        t["reply"] = tok.decode(gen, skip_special_tokens=True)
        assert len(ids) + SESSION["max_new_tokens"] <= model.config.n_positions, len(ids)
        return t

    for user in SESSION["users"][:2]:
        history.append({"role": "user", "content": user})
        t = turn(history)
        turns.append(t)
        history.append({"role": "assistant", "content": t["reply"]})
    history.append({"role": "user", "content": SESSION["users"][2]})
    turns.append(turn(history))  # its reply, which Ctrl-C cuts short
    turns.append(turn(system + [{"role": "user", "content": SESSION["users"][3]}]))
    out = {"transformers": transformers.__version__, **SESSION, "suppress": suppress, "turns": turns}
    with open(os.path.join(FIX, "chat", "session.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", default=DEFAULT_TEMPLATES, help="llama.cpp's models/templates folder")
    ap.add_argument("--names", default=os.path.join(FIX, "chat", "names.txt"))
    ap.add_argument("--all", action="store_true", help="every template in --templates, not only --names")
    a = ap.parse_args()
    if a.all:
        names = sorted(f[:-6] for f in os.listdir(a.templates) if f.endswith(".jinja"))
    else:
        with open(a.names, encoding="utf-8") as f:
            names = [x.strip() for x in f if x.strip() and not x.startswith("#")]
    os.makedirs(os.path.join(FIX, "chat"), exist_ok=True)
    chat_model(a.templates)
    out = templates_json(a.templates, names)
    out["models"] = real_models_json()
    chat_session()
    with open(os.path.join(FIX, "chat", "templates.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
