#!/usr/bin/env python3
"""nanoGPT checkpoints for minigpt's tests, converted by tools/convert_nanogpt.py, with nanoGPT's logits.

For each variant below this script
1. builds a small GPT with nanoGPT's semantics (this file's own forward pass, written from karpathy/nanoGPT
   model.py: LayerNorm with an optional bias and eps 1e-5, fused c_attn split into q, k, v, causal attention
   scaled by 1/sqrt(head_dim), MLP c_fc -> exact (erf) GELU -> c_proj, pre-norm residual blocks, learned
   positions, lm_head tied to wte), with random weights (std 0.2; LayerNorm and bias parameters perturbed,
   so that attention is far from uniform) and two AdamW steps on random tokens;
2. saves ckpt.pt the way nanoGPT's train.py does: {model, optimizer, model_args, iter_num, best_val_loss,
   config}, `model` taken from torch.compile's wrapper for one variant (every key `_orig_mod.`-prefixed);
3. runs tools/convert_nanogpt.py on it (a subprocess, as a user would);
4. computes the nanoGPT logits for fixed tokens and a greedy continuation, and asserts that transformers'
   GPT2LMHeadModel on the converted directory gives the same logits (max |diff| <= 1e-5) and tokens, that
   its config.json is what transformers itself writes for the model, and that --dtype f16 / bf16 load and
   stay close;
5. writes tests/fixtures/nanogpt/<variant>/: ckpt.pt, the converted config.json + model.safetensors, and
   reference.safetensors (tokens I32 [T], logits F32 [T, V], greedy_prompt I32, greedy_tokens I32).
Then it runs the converter on a table of bad inputs and fails unless each is refused with exit status 1,
exactly one line on stderr that says what is wrong, and nothing left at the output path.

Any mismatch raises (non-zero exit). Re-run from the repository root (needs torch, transformers,
safetensors, numpy):

    python3 tools/reference/make_nanogpt_reference.py
"""

import json
import math
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from safetensors.numpy import load_file as np_load_file
from safetensors.numpy import save_file as np_save_file
from transformers import AutoTokenizer, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "nanogpt")
CONVERTER = os.path.join(ROOT, "tools", "convert_nanogpt.py")
METADATA = {
    "generator": "tools/reference/make_nanogpt_reference.py",
    "torch": torch.__version__.split("+")[0],
    "transformers": transformers.__version__,
}
TOL_HF = 1e-5  # F32 in both, summed in other orders: rounding noise is ~1e-6 on logits of magnitude ~1
INIT_STD = 0.2
GREEDY_PROMPT = 4
GREEDY_NEW = 20
GREEDY_MARGIN = 1e-3  # top-1 minus top-2 at every greedy step: minigpt's F32 noise (~1e-6) cannot flip it

# `mask_buffer`: built as on PyTorch < 2.0 (no flash attention), so that the state_dict holds the causal mask
# `attn.bias`; `compiled`: the state_dict taken from torch.compile's wrapper (`_orig_mod.` keys).
VARIANTS = {
    # shakespeare_char's vocabulary of 65, 3 heads, GPT-2's bias=True, saved without flash attention
    "bias": dict(seed=1, mask_buffer=True, compiled=False,
                 model_args=dict(n_layer=2, n_head=3, n_embd=12, block_size=24, bias=True, vocab_size=65,
                                 dropout=0.0)),
    # train.py's defaults: bias=False, compile=True
    "nobias": dict(seed=2, mask_buffer=False, compiled=True,
                   model_args=dict(n_layer=2, n_head=2, n_embd=12, block_size=32, bias=False, vocab_size=64,
                                   dropout=0.1)),
}

torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------------------
# a GPT with nanoGPT's semantics (module names give nanoGPT's state_dict keys)
# ----------------------------------------------------------------------------------------------------------

class Norm(nn.Module):
    """F.layer_norm with eps 1e-5; the bias parameter exists only when the model has biases."""

    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Attention(nn.Module):
    def __init__(self, a, mask_buffer):
        super().__init__()
        C = a["n_embd"]
        self.n_head = a["n_head"]
        self.c_attn = nn.Linear(C, 3 * C, bias=a["bias"])  # q, k, v side by side in the output
        self.c_proj = nn.Linear(C, C, bias=a["bias"])
        if mask_buffer:  # a persistent buffer: it lands in the state_dict as `attn.bias`
            n = a["block_size"]
            self.register_buffer("bias", torch.tril(torch.ones(n, n)).reshape(1, 1, n, n))
        self.mask_buffer = mask_buffer

    def forward(self, x, manual):
        B, T, C = x.shape
        heads = [t.reshape(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                 for t in self.c_attn(x).split(C, dim=-1)]
        q, k, v = heads
        if manual:  # the path nanoGPT takes without flash attention
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            keep = self.bias[:, :, :T, :T] if self.mask_buffer else torch.ones(T, T, dtype=torch.bool).tril()
            y = torch.softmax(scores.masked_fill(keep == 0, float("-inf")), dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, a):
        super().__init__()
        C = a["n_embd"]
        self.c_fc = nn.Linear(C, 4 * C, bias=a["bias"])
        self.gelu = nn.GELU()  # approximate='none': erf
        self.c_proj = nn.Linear(4 * C, C, bias=a["bias"])

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, a, mask_buffer):
        super().__init__()
        self.ln_1 = Norm(a["n_embd"], a["bias"])
        self.attn = Attention(a, mask_buffer)
        self.ln_2 = Norm(a["n_embd"], a["bias"])
        self.mlp = Mlp(a)

    def forward(self, x, manual):
        x = x + self.attn(self.ln_1(x), manual)
        return x + self.mlp(self.ln_2(x))


class NanoGpt(nn.Module):
    def __init__(self, a, mask_buffer):
        super().__init__()
        self.block_size = a["block_size"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(a["vocab_size"], a["n_embd"]),
            wpe=nn.Embedding(a["block_size"], a["n_embd"]),
            h=nn.ModuleList(Block(a, mask_buffer) for _ in range(a["n_layer"])),
            ln_f=Norm(a["n_embd"], a["bias"]),
        ))
        self.lm_head = nn.Linear(a["n_embd"], a["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: one parameter, two state_dict keys
        self.manual = mask_buffer

    def forward(self, idx, manual=None):
        """Logits at every position, [B, T, V] (nanoGPT's own forward keeps only the last one at inference)."""
        manual = self.manual if manual is None else manual
        T = idx.shape[1]
        assert T <= self.block_size
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x, manual)
        return self.lm_head(self.transformer.ln_f(x))


def build(v):
    a = v["model_args"]
    torch.manual_seed(v["seed"])
    model = NanoGpt(a, v["mask_buffer"])
    with torch.no_grad():
        for name, p in model.named_parameters():  # the tied weight comes once
            if p.dim() >= 2:
                p.normal_(0.0, INIT_STD)
            elif name.endswith(".weight"):  # LayerNorm gains
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(0.1 * torch.randn(p.shape))
    # Two AdamW steps on random tokens, parameter groups as nanoGPT's configure_optimizers makes them, so
    # that the checkpoint holds a real optimizer state.
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW([
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ], lr=6e-4, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(v["seed"] + 100)
    model.train()
    for _ in range(2):
        batch = torch.randint(0, a["vocab_size"], (4, a["block_size"] + 1), generator=gen)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model, optimizer, loss.detach()


def save_checkpoint(path, v, model, optimizer, loss):
    """The dict nanoGPT's train.py saves (its `config` holds train.py's int/float/bool/str globals)."""
    a = v["model_args"]
    raw = torch.compile(model) if v["compiled"] else model  # train.py saves the compiled module's state_dict
    checkpoint = {
        "model": raw.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": dict(a),
        "iter_num": 2,
        "best_val_loss": loss,  # train.py stores losses['val'], a 0-d tensor
        "config": dict(out_dir="out-" + ("compiled" if v["compiled"] else "plain"), eval_interval=1,
                       dataset="shakespeare_char", batch_size=4, init_from="scratch", learning_rate=6e-4,
                       weight_decay=0.1, beta1=0.9, beta2=0.95, grad_clip=1.0, device="cpu",
                       dtype="float32", compile=v["compiled"], **a),
    }
    keys = list(checkpoint["model"])
    assert all(k.startswith("_orig_mod.") for k in keys) == v["compiled"], keys[:3]
    assert any(k.endswith(".attn.bias") for k in keys) == v["mask_buffer"]
    assert any(k.endswith("lm_head.weight") for k in keys)  # the tied head appears under both names
    torch.save(checkpoint, path)


# ----------------------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------------------

def convert(ckpt, out, *extra):
    r = subprocess.run([sys.executable, CONVERTER, ckpt, out, *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"convert_nanogpt.py failed on {ckpt} (exit {r.returncode}): {r.stderr.strip()}")
    return r.stdout.strip()


@torch.no_grad()
def hf_logits(d, ids):
    """transformers' logits (computed in F32) for the directory, after checking its config.json."""
    m = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager")
    check_config(d, m)
    m.eval()
    return m, m.float()(input_ids=ids, use_cache=False).logits[0]


@torch.no_grad()
def greedy(model, prompt, n):
    """Greedy decoding by full recompute; every step's top-1 must beat top-2 by GREEDY_MARGIN."""
    idx = prompt.clone()
    for _ in range(n):
        last = model(idx)[0, -1]
        top2 = torch.topk(last, 2).values
        if float(top2[0] - top2[1]) < GREEDY_MARGIN:
            raise SystemExit(f"greedy step {idx.shape[1]}: top-2 logits within {GREEDY_MARGIN}: pick another seed")
        idx = torch.cat([idx, last.argmax().reshape(1, 1)], dim=1)
    return idx[0, prompt.shape[1]:]


def check_config(d, model):
    """config.json equals what transformers writes for the model it loaded (less transformers_version)."""
    with tempfile.TemporaryDirectory() as t:
        model.save_pretrained(t)
        with open(os.path.join(t, "config.json")) as f:
            want = json.load(f)
    with open(os.path.join(d, "config.json")) as f:
        text = f.read()
    got = json.loads(text)
    want.pop("transformers_version")
    if got != want:
        diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
        raise SystemExit(f"{d}/config.json differs from transformers' (ours, theirs): {diff}")
    if text != json.dumps(want, indent=2, sort_keys=True) + "\n":
        raise SystemExit(f"{d}/config.json is not laid out as transformers writes it")


def write_reference(path, **tensors):
    """safetensors with the __metadata__ keys sorted (safetensors writes them in hash order), so that a
    re-run writes the same bytes."""
    np_save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata=METADATA)
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text))
    assert len(text) == n
    with open(path, "wb") as f:
        f.write(blob[:8] + text + blob[8 + n:])
    back = np_load_file(path)
    assert sorted(back) == sorted(tensors) and all(np.array_equal(back[k], tensors[k]) for k in tensors)


def make_variant(name, v, scratch):
    a = v["model_args"]
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model, optimizer, loss = build(v)
    ckpt = os.path.join(d, "ckpt.pt")
    save_checkpoint(ckpt, v, model, optimizer, loss)

    hf_dir = os.path.join(scratch, name)
    print(convert(ckpt, hf_dir))
    assert sorted(os.listdir(hf_dir)) == ["config.json", "model.safetensors"], os.listdir(hf_dir)

    T = a["block_size"]
    tokens = np.random.default_rng(v["seed"] + 200).integers(0, a["vocab_size"], size=T).astype(np.int32)
    ids = torch.from_numpy(tokens.astype(np.int64))[None, :]
    with torch.no_grad():
        want = model(ids)[0]
        # The other attention path of nanoGPT (flash / manual) and float64 agree: this file's model is sound.
        other = model(ids, manual=not model.manual)[0]
        exact = NanoGpt(a, v["mask_buffer"]).double()
        exact.load_state_dict(model.state_dict())
        exact = exact(ids)[0]
    assert (other - want).abs().max() <= TOL_HF, float((other - want).abs().max())
    assert (exact - want.double()).abs().max() <= TOL_HF, float((exact - want.double()).abs().max())

    hf, got = hf_logits(hf_dir, ids)
    diff = float((got - want).abs().max())
    print(f"  {name}: max |transformers - nanoGPT| = {diff:.3g} over {T} positions x {a['vocab_size']} "
          f"(nanoGPT logits std {float(want.std()):.3f}, max |logit| {float(want.abs().max()):.3f})")
    if not diff <= TOL_HF:
        raise SystemExit(f"{name}: transformers' logits differ from nanoGPT's by {diff} > {TOL_HF}")

    prompt = ids[:, :GREEDY_PROMPT]
    gen = greedy(model, prompt, GREEDY_NEW)
    hf_gen = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                         max_new_tokens=GREEDY_NEW, min_new_tokens=GREEDY_NEW, pad_token_id=0)[0, GREEDY_PROMPT:]
    if not torch.equal(gen, hf_gen):
        raise SystemExit(f"{name}: greedy tokens differ: nanoGPT {gen.tolist()}, transformers {hf_gen.tolist()}")

    for dt, tol in (("f16", 5e-3), ("bf16", 5e-2)):
        low = os.path.join(scratch, f"{name}-{dt}")
        convert(ckpt, low, "--dtype", dt)
        _, low_logits = hf_logits(low, ids)
        ld = float((low_logits - want).abs().max())
        print(f"  {name} --dtype {dt}: max |transformers - nanoGPT F32| = {ld:.3g}")
        if not ld <= tol:
            raise SystemExit(f"{name} --dtype {dt}: logits differ by {ld} > {tol}")

    for f in ("config.json", "model.safetensors"):
        shutil.copyfile(os.path.join(hf_dir, f), os.path.join(d, f))
    write_reference(os.path.join(d, "reference.safetensors"), tokens=tokens, logits=want.numpy(),
                    greedy_prompt=tokens[:GREEDY_PROMPT].copy(), greedy_tokens=gen.numpy().astype(np.int32))
    return ckpt


# ----------------------------------------------------------------------------------------------------------
# a character-level model: the "bias" variant (vocabulary 65) with shakespeare_char's meta.pkl
# ----------------------------------------------------------------------------------------------------------

CHAR_PROMPT = "ROMEO:"


def make_char(bias_ckpt, scratch):
    """tests/fixtures/nanogpt/char/: meta.pkl as nanoGPT's data/shakespeare_char/prepare.py writes it (from
    tinyshakespeare), the tokenizer files convert_nanogpt.py --meta writes from it, and reference.json: texts
    with the ids nanoGPT's encode gives (stoi), which transformers' AutoTokenizer on the converted directory
    must give too (and decode back), and a greedy continuation of CHAR_PROMPT by the nanoGPT model, decoded
    with itos (nanoGPT's sample.py way)."""
    d = os.path.join(OUT, "char")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(ROOT, "tests", "fixtures", "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        data = f.read()
    chars = sorted(list(set(data)))  # prepare.py, line for line
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    meta_path = os.path.join(d, "meta.pkl")
    with open(meta_path, "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
    encode = lambda s: [stoi[c] for c in s]  # noqa: E731 (as prepare.py and sample.py spell them)
    decode = lambda ids: "".join([itos[i] for i in ids])  # noqa: E731

    out = os.path.join(scratch, "char")
    print(convert(bias_ckpt, out, "--meta", meta_path))
    files = sorted(os.listdir(out))
    assert files == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"], files
    with open(os.path.join(out, "model.safetensors"), "rb") as a, \
            open(os.path.join(OUT, "bias", "model.safetensors"), "rb") as b:
        assert a.read() == b.read()  # the weights are the plain conversion's
    # config.json: the plain conversion's, but for bos_token_id: "\n", where nanoGPT's sample.py starts.
    with open(os.path.join(out, "config.json")) as a, open(os.path.join(OUT, "bias", "config.json")) as b:
        got, plain = json.load(a), json.load(b)
    assert got.pop("bos_token_id") == stoi["\n"] and plain.pop("bos_token_id") is None, got
    assert got == plain
    check_config(out, GPT2LMHeadModel.from_pretrained(out))  # what transformers writes for it

    tok = AutoTokenizer.from_pretrained(out)
    split = int(0.9 * len(data))
    texts = [CHAR_PROMPT, data[split:split + 300], "".join(chars), "  double  spaces\n\n and 'quotes' ?!"]
    cases = []
    for t in texts:
        ids = encode(t)
        got = tok(t)["input_ids"]
        assert got == ids, (t, got, ids)
        assert tok.decode(ids) == t == decode(ids), t
        cases.append({"text": t, "ids": ids})
    # A character outside the vocabulary: nanoGPT's encode raises; tokenizers drops it without a word.
    unknown = "a\u00e9b"
    assert "\u00e9" not in stoi
    dropped = tok(unknown)["input_ids"]
    assert dropped == encode("ab"), dropped

    bias = VARIANTS["bias"]
    model = NanoGpt(bias["model_args"], bias["mask_buffer"])
    model.load_state_dict(torch.load(bias_ckpt, weights_only=True)["model"])
    model.eval()
    block = bias["model_args"]["block_size"]
    n = block - len(CHAR_PROMPT)  # up to the context: the last one sampled from the full window
    gen = greedy(model, torch.tensor([encode(CHAR_PROMPT)]), n).tolist()
    start = greedy(model, torch.tensor([encode("\n")]), 10).tolist()  # sample.py's default start, greedily
    ref = {"generator": METADATA, "prompt": CHAR_PROMPT, "greedy_ids": gen, "greedy_text": decode(gen),
           "from_newline_text": decode(start),
           "texts": cases, "unknown": unknown, "unknown_tokenizers_ids": dropped}
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(out, name), os.path.join(d, name))
    with open(os.path.join(d, "reference.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"  char: {len(chars)} characters; greedy after {CHAR_PROMPT!r}: {decode(gen)!r}")


# ----------------------------------------------------------------------------------------------------------
# bad inputs: one line, exit 1, nothing written
# ----------------------------------------------------------------------------------------------------------

class NotATensor:  # a pickled object torch.load(weights_only=True) must refuse to build
    pass


def bad_inputs(good_ckpt, scratch):
    base = torch.load(good_ckpt, weights_only=True)  # the "bias" variant: prefix-free, mask buffers
    C, T, V = (base["model_args"][k] for k in ("n_embd", "block_size", "vocab_size"))

    def variant(edit):
        c = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
        edit(c)
        return c

    def setitem(d, k, v):
        d[k] = v

    def scaled(name, value):
        def edit(c):
            t = c["model"][name].clone()
            t.view(-1)[3] = value
            c["model"][name] = t
        return edit

    # meta.pkl files for --meta: code in the pickle (never run), not a character vocabulary, ids past V.
    def meta_file(name, obj=None, raw=None):
        path = os.path.join(scratch, name)
        with open(path, "wb") as f:
            f.write(raw if raw is not None else pickle.dumps(obj))
        return path
    good_meta = {"vocab_size": 2, "stoi": {"a": 0, "b": 1}, "itos": {0: "a", 1: "b"}}
    meta_cases = [
        ("--meta: a pickle that calls os.system", meta_file("code.pkl", raw=b"cos\nsystem\n(S'touch /tmp/pwned'\ntR."),
         "a meta.pkl holds plain data only"),
        ("--meta: not a pickle", meta_file("text.pkl", raw=b"hello\n"), "not a nanoGPT meta.pkl"),
        ("--meta: a BPE dataset's dict", meta_file("bpe.pkl", {"vocab_size": 2}), "a BPE dataset has none"),
        ("--meta: a two-character token", meta_file("two.pkl", {"stoi": {"ab": 0}, "itos": {0: "ab"}}),
         "maps single characters to integer ids"),
        ("--meta: stoi and itos disagree", meta_file("disagree.pkl", {"stoi": {"a": 0}, "itos": {0: "b"}}),
         "but itos[0] = 'b'"),
        (f"--meta: an id past vocab_size {V}", meta_file("past.pkl", {"stoi": {"a": V}, "itos": {V: "a"}}),
         f"outside the model's vocab_size {V}"),
        ("--meta and --tokenizer", meta_file("good.pkl", good_meta), "two tokenizers: give one"),
    ]
    cases = [  # label, checkpoint (object to torch.save, or bytes), extra args, what stderr must say
        ("not a torch file", b"hello\n", [], "not a PyTorch checkpoint (torch.save writes a zip archive"),
        ("a truncated zip", b"PK\x03\x04" + b"\0" * 60, [], "cannot be read as a PyTorch checkpoint"),
        ("a pickled object", variant(lambda c: setitem(c, "config", NotATensor())), [],
         "holds a Python object of type __main__.NotATensor"),
        ("a list", [1, 2], [], "holds a list"),
        ("a bare state_dict", dict(base["model"]), [], "a bare state_dict"),
        ("no model_args", variant(lambda c: c.pop("model_args")), [], "no 'model_args'"),
        ("no model", variant(lambda c: c.pop("model")), [], "no 'model'"),
        ("model_args without bias", variant(lambda c: c["model_args"].pop("bias")), [], "model_args has no 'bias'"),
        ("model_args with n_kv_head", variant(lambda c: setitem(c["model_args"], "n_kv_head", 1)), [],
         "model_args has 'n_kv_head'"),
        (f"n_head 5 with n_embd {C}", variant(lambda c: setitem(c["model_args"], "n_head", 5)), [],
         "not divisible by n_head"),
        ("bias 'yes'", variant(lambda c: setitem(c["model_args"], "bias", "yes")), [], "must be true or false"),
        ("bias=False with biases", variant(lambda c: setitem(c["model_args"], "bias", False)), [],
         "unexpected tensor 'transformer.h.0.ln_1.bias'"),
        ("a third layer's tensor", variant(lambda c: setitem(c["model"], "transformer.h.2.ln_1.weight",
                                                             torch.ones(C))), [],
         "unexpected tensor 'transformer.h.2.ln_1.weight'"),
        ("DDP 'module.' keys", variant(lambda c: setitem(c, "model", {"module." + k: t for k, t in
                                                                      c["model"].items()})), [],
         "unexpected tensor 'module."),
        ("a missing tensor", variant(lambda c: c["model"].pop("transformer.h.1.mlp.c_fc.weight")), [],
         f"missing tensor 'transformer.h.1.mlp.c_fc.weight' (model_args imply shape [{4 * C}, {C}])"),
        (f"wpe of 16 rows (block_size {T})", variant(lambda c: setitem(c["model"], "transformer.wpe.weight",
                                                                     c["model"]["transformer.wpe.weight"][:16])),
         [], f"has shape [16, {C}] but model_args imply [{T}, {C}]"),
        ("c_fc already transposed", variant(lambda c: setitem(c["model"], "transformer.h.0.mlp.c_fc.weight",
                                                              c["model"]["transformer.h.0.mlp.c_fc.weight"].t())),
         [], f"has shape [{C}, {4 * C}] but model_args imply [{4 * C}, {C}]"),
        ("an int64 weight", variant(lambda c: setitem(c["model"], "transformer.ln_f.weight",
                                                      torch.ones(C, dtype=torch.int64))), [], "dtype int64"),
        ("a NaN", variant(scaled("transformer.h.0.attn.c_proj.weight", float("nan"))), [], "holds nan at element 3"),
        ("untied lm_head", variant(lambda c: setitem(c["model"], "lm_head.weight",
                                                     c["model"]["lm_head.weight"] + 1)), [], "nanoGPT ties them"),
        ("a mask that is not causal", variant(lambda c: setitem(c["model"], "transformer.h.1.attn.bias",
                                                                torch.ones(1, 1, T, T))), [], "not the causal mask"),
        ("1e6 as f16", variant(scaled("transformer.h.0.mlp.c_fc.weight", 1e6)), ["--dtype", "f16"],
         "does not fit in float16"),
        ("--dtype q8_0", base, ["--dtype", "q8_0"], "--dtype 'q8_0' is not one of f32, f16, bf16"),
        (f"--tokenizer of GPT-2 (50257 ids) for {V}", base,
         ["--tokenizer", os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")], f"beyond the model's vocab_size {V}"),
    ]
    for label, path, needle in meta_cases:
        extra = ["--meta", path]
        if "--tokenizer" in label:
            extra += ["--tokenizer", os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")]
        cases.append((label, base, extra, needle))
    rows = []
    for i, (label, obj, extra, needle) in enumerate(cases):
        path = os.path.join(scratch, f"bad{i}.pt")
        if isinstance(obj, bytes):
            with open(path, "wb") as f:
                f.write(obj)
        else:
            torch.save(obj, path)
        out = os.path.join(scratch, f"bad{i}-out")
        rows.append((label, *run_refused(path, out, extra, needle)))

    # The output directory: an existing non-empty one is kept unless --force; a file is never replaced.
    busy = os.path.join(scratch, "busy")
    os.makedirs(busy)
    with open(os.path.join(busy, "notes.txt"), "w") as f:
        f.write("mine\n")
    rows.append(("OUT_DIR not empty", *run_refused(good_ckpt, busy, [], "exists and is not empty (--force", keep=True)))
    assert os.listdir(busy) == ["notes.txt"]
    plain = os.path.join(scratch, "plain-file")
    with open(plain, "w") as f:
        f.write("x")
    rows.append(("OUT_DIR is a file", *run_refused(good_ckpt, plain, ["--force"], "exists and is not a directory",
                                                   keep=True)))
    rows.append(("OUT_DIR in a missing directory",
                 *run_refused(good_ckpt, os.path.join(scratch, "nope", "out"), [], "does not exist")))
    holder = os.path.join(scratch, "holder")
    os.makedirs(holder)
    shutil.copyfile(good_ckpt, os.path.join(holder, "ckpt.pt"))
    rows.append(("OUT_DIR holds the checkpoint, --force",
                 *run_refused(os.path.join(holder, "ckpt.pt"), holder, ["--force"], "--force would delete it",
                              keep=True)))
    assert os.listdir(holder) == ["ckpt.pt"]
    convert(good_ckpt, busy, "--force")
    assert sorted(os.listdir(busy)) == ["config.json", "model.safetensors"], os.listdir(busy)
    empty = os.path.join(scratch, "empty")
    os.makedirs(empty)
    convert(good_ckpt, empty)  # an existing empty directory is fine
    assert sorted(os.listdir(empty)) == ["config.json", "model.safetensors"]
    # --tokenizer copies a tokenizer whose ids fit (here: the first V of GPT-2's byte symbols, no merges).
    tok = os.path.join(scratch, "tok")
    os.makedirs(tok)
    symbols = [chr(c) for c in range(ord("!"), ord("~") + 1)][:V]
    with open(os.path.join(tok, "vocab.json"), "w") as f:
        json.dump({s: i for i, s in enumerate(symbols)}, f)
    with open(os.path.join(tok, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    with_tok = os.path.join(scratch, "with-tok")
    convert(good_ckpt, with_tok, "--tokenizer", tok)
    assert sorted(os.listdir(with_tok)) == ["config.json", "merges.txt", "model.safetensors", "vocab.json"]
    for f in ("vocab.json", "merges.txt"):
        with open(os.path.join(tok, f), "rb") as a, open(os.path.join(with_tok, f), "rb") as b:
            assert a.read() == b.read(), f
    assert not os.path.exists("/tmp/pwned"), "convert_nanogpt.py ran code from a meta.pkl"
    leftovers = [f for f in os.listdir(scratch) if f.endswith((".tmp", ".old"))]
    assert not leftovers, leftovers

    print(f"\n{len(rows)} bad inputs, each refused with one line and exit 1:")
    for label, line in rows:
        print(f"  {label}: {line}")


def run_refused(ckpt, out, extra, needle, keep=False):
    before = os.path.lexists(out)
    r = subprocess.run([sys.executable, CONVERTER, ckpt, out, *extra], capture_output=True, text=True)
    lines = r.stderr.splitlines()
    if r.returncode != 1 or len(lines) != 1 or needle not in lines[0] or r.stdout:
        raise SystemExit(f"{ckpt} -> {out} {extra}: expected exit 1 and one line with {needle!r}; got exit "
                         f"{r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")
    if not keep and os.path.lexists(out) != before:
        raise SystemExit(f"{ckpt}: a refused conversion left {out}")
    return (lines[0].replace(os.path.dirname(ckpt), "$DIR").replace(os.path.dirname(out), "$TMP"),)


def main():
    with tempfile.TemporaryDirectory() as scratch:
        ckpts = {name: make_variant(name, v, scratch) for name, v in VARIANTS.items()}
        make_char(ckpts["bias"], scratch)
        bad_dir = os.path.join(scratch, "bad")
        os.makedirs(bad_dir)
        bad_inputs(ckpts["bias"], bad_dir)
    total = 0
    for name in list(VARIANTS) + ["char"]:
        for f in sorted(os.listdir(os.path.join(OUT, name))):
            size = os.path.getsize(os.path.join(OUT, name, f))
            total += size
            print(f"  {name}/{f}: {size} bytes")
    print(f"tests/fixtures/nanogpt: {total} bytes")
    assert total < 400_000, total
    for name in VARIANTS:
        assert os.path.getsize(os.path.join(OUT, name, "ckpt.pt")) < 100_000


if __name__ == "__main__":
    main()
