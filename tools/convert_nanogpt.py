#!/usr/bin/env python3
"""Convert a nanoGPT checkpoint into a Hugging Face GPT-2 model directory that minigpt (and transformers'
GPT2LMHeadModel) loads.

    python3 tools/convert_nanogpt.py out-shakespeare/ckpt.pt models/my-nanogpt [--dtype f32|f16|bf16]
        [--tokenizer DIR | --meta META.pkl] [--force]

Input: the `ckpt.pt` that karpathy/nanoGPT's train.py saves, a dict holding `model` (the GPT's state_dict),
`model_args` (n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout) and, not needed here,
`optimizer`, `iter_num`, `best_val_loss`, `config`. It is read with torch.load(weights_only=True), which
never runs code from the file.

What differs between the two layouts, and how it is bridged (nanoGPT model.py against transformers'
modeling_gpt2.py):
- Keys: a torch.compile'd model leaves `_orig_mod.` on every key (train.py strips it when it resumes; we
  do too). Names are otherwise GPT-2's: `transformer.h.N.attn.c_attn.weight`, ...
- nanoGPT's projections are nn.Linear, weight [out, in]; GPT-2's are Conv1D, weight [in, out]: transposed.
  q, k, v sit in c_attn's output in the same order and heads split the same way in both, so nothing else
  moves.
- `bias: False` models have no bias in any Linear or LayerNorm. GPT-2 always has them: zeros are written,
  which computes exactly the same thing.
- nanoGPT's MLP uses nn.GELU() (erf), i.e. activation_function "gelu", not GPT-2's "gelu_new" (tanh).
- LayerNorm epsilon is 1e-5 in both; attention is scaled by 1/sqrt(head_dim) in both.
- lm_head is tied to wte (the state_dict holds it twice; it is checked equal and written once).
- Models built without flash attention (PyTorch < 2.0) saved their causal mask as the buffer `attn.bias`
  [1, 1, block_size, block_size]: checked to be the causal mask, and dropped.

config.json is what transformers' GPT2Config writes for this model (same fields and values, keys sorted,
2-space indent), less `transformers_version`, since transformers did not write it. bos/eos are 50256 (GPT-2's
<|endoftext|>, which nanoGPT's openwebtext data ends each document with) when the vocabulary holds GPT-2's
50257 tokens (nanoGPT pads it to 50304), null otherwise (a character-level model, meta.pkl's vocabulary).
--tokenizer DIR copies a tokenizer (tokenizer.json, or vocab.json + merges.txt, and their side files) into
the directory, so that `minigpt generate` can run it; for GPT-2 BPE models that is GPT-2's own
(tests/fixtures/gpt2-tokenizer). --meta META.pkl writes the tokenizer of a character-level model instead,
from the meta.pkl nanoGPT's data/*_char/prepare.py saves (see char_tokenizer()).

Anything the converter does not recognise (not a nanoGPT checkpoint, missing or unknown model_args,
missing or unexpected tensors, wrong shapes, NaN/Inf) is refused with one line on stderr and exit status 1.
The directory is written under a temporary name next to OUT_DIR and renamed into place at the end; an
existing non-empty OUT_DIR is replaced only with --force.

Reference and tests: tools/reference/make_nanogpt_reference.py, tests/test_nanogpt.cpp.
"""

import argparse
import io
import json
import math
import os
import pickle
import re
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file

PROG = "convert_nanogpt.py"
COMPILE_PREFIX = "_orig_mod."
# GPTConfig's fields (nanoGPT model.py); dropout is optional here since it does not change inference.
MODEL_ARGS_REQUIRED = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")
MODEL_ARGS_OPTIONAL = ("dropout",)
# What train.py saves besides `model` and `model_args`; not needed for the weights.
CHECKPOINT_OTHER = ("optimizer", "iter_num", "best_val_loss", "config")
GPT2_VOCAB = 50257
GPT2_EOT = 50256
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                   "special_tokens_map.json")


class ConvertError(Exception):
    """A refusal: one line for the user."""


def first_line(e):
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()  # torch colours some of its messages
    return text.splitlines()[0] if text else type(e).__name__


def shape_str(shape):
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


# ----------------------------------------------------------------------------------------------------------
# reading and checking the checkpoint
# ----------------------------------------------------------------------------------------------------------

def load_checkpoint(path):
    if not os.path.exists(path):
        raise ConvertError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: not a regular file")
    with open(path, "rb") as f:
        magic = f.read(4)
    # torch.save writes a zip archive (PyTorch >= 1.6, which nanoGPT needs), or, in the legacy format, a pickle.
    if magic != b"PK\x03\x04" and magic[:1] != b"\x80":
        raise ConvertError(f"{path}: not a PyTorch checkpoint (torch.save writes a zip archive; this file starts "
                           f"with {magic!r})")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds here (zip, pickle, unpickler policy)
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        if found:
            raise ConvertError(f"{path}: holds a Python object of type {found.group(1)}, which "
                               f"torch.load(weights_only=True) does not build, since unpickling it could run code "
                               f"(nanoGPT's ckpt.pt holds only tensors, numbers, strings and dicts)")
        raise ConvertError(f"{path}: cannot be read as a PyTorch checkpoint with torch.load(weights_only=True): "
                           f"{first_line(e)}")
    if not isinstance(ckpt, dict):
        raise ConvertError(f"{path}: not a nanoGPT checkpoint: it holds a {type(ckpt).__name__}, not the dict "
                           f"with 'model' and 'model_args' that nanoGPT's train.py saves")
    if ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        raise ConvertError(f"{path}: a bare state_dict, not a nanoGPT checkpoint (train.py saves a dict with "
                           f"'model' and 'model_args'; without model_args the shapes cannot be checked)")
    for key in ("model", "model_args"):
        if key not in ckpt:
            saved = ", ".join(repr(k) for k in ("model", "model_args") + CHECKPOINT_OTHER)
            raise ConvertError(f"{path}: not a nanoGPT checkpoint: no '{key}' (train.py saves {saved}; this has "
                               f"{', '.join(repr(str(k)) for k in list(ckpt)[:8])})")
    return ckpt


def check_model_args(args, path):
    if not isinstance(args, dict):
        raise ConvertError(f"{path}: model_args is a {type(args).__name__}, not a dict")
    for k in args:
        if k not in MODEL_ARGS_REQUIRED + MODEL_ARGS_OPTIONAL:
            raise ConvertError(f"{path}: model_args has '{k}', which nanoGPT's GPTConfig does not have "
                               f"(known: {', '.join(MODEL_ARGS_REQUIRED + MODEL_ARGS_OPTIONAL)})")
    for k in MODEL_ARGS_REQUIRED:
        if k not in args:
            raise ConvertError(f"{path}: model_args has no '{k}'")
    for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        v = args[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConvertError(f"{path}: model_args['{k}'] must be a positive integer, got {v!r}")
    if not isinstance(args["bias"], bool):
        raise ConvertError(f"{path}: model_args['bias'] must be true or false, got {args['bias']!r}")
    if args["n_embd"] % args["n_head"] != 0:
        raise ConvertError(f"{path}: model_args: n_embd ({args['n_embd']}) is not divisible by n_head "
                           f"({args['n_head']})")
    dropout = args.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ConvertError(f"{path}: model_args['dropout'] must be a number in [0, 1), got {dropout!r}")
    return dict(args, dropout=float(dropout))


def strip_compile_prefix(sd, path):
    """train.py's own fix-up when it resumes: drop `_orig_mod.` wherever a key starts with it."""
    if not isinstance(sd, dict):
        raise ConvertError(f"{path}: 'model' is a {type(sd).__name__}, not a state_dict")
    out = {}
    for k, v in sd.items():
        if not isinstance(k, str) or not isinstance(v, torch.Tensor):
            raise ConvertError(f"{path}: 'model' entry {k!r} is not a named tensor")
        name = k[len(COMPILE_PREFIX):] if k.startswith(COMPILE_PREFIX) else k
        if name in out:
            raise ConvertError(f"{path}: tensor '{name}' is there both with and without the '{COMPILE_PREFIX}' "
                               f"prefix")
        out[name] = v
    return out


def expected_tensors(a):
    """nanoGPT's state_dict for these model_args: name -> shape (nn.Linear weights are [out, in])."""
    C, V, T, bias = a["n_embd"], a["vocab_size"], a["block_size"], a["bias"]
    e = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}

    def linear(name, n_in, n_out):
        e[name + ".weight"] = (n_out, n_in)
        if bias:
            e[name + ".bias"] = (n_out,)

    def norm(name):
        e[name + ".weight"] = (C,)
        if bias:
            e[name + ".bias"] = (C,)

    for l in range(a["n_layer"]):
        h = f"transformer.h.{l}."
        norm(h + "ln_1")
        linear(h + "attn.c_attn", C, 3 * C)
        linear(h + "attn.c_proj", C, C)
        norm(h + "ln_2")
        linear(h + "mlp.c_fc", C, 4 * C)
        linear(h + "mlp.c_proj", 4 * C, C)
    norm("transformer.ln_f")
    return e


def check_tensors(sd, a, path):
    """Every expected tensor present with its shape, a float dtype and finite values; the optional ones
    (lm_head, the causal-mask buffers) what nanoGPT makes them; nothing else."""
    want = expected_tensors(a)
    optional = {"lm_head.weight": (a["vocab_size"], a["n_embd"])}
    mask_shape = (1, 1, a["block_size"], a["block_size"])
    for l in range(a["n_layer"]):
        optional[f"transformer.h.{l}.attn.bias"] = mask_shape
    what = (f"nanoGPT GPT with these model_args: n_layer={a['n_layer']}, n_embd={a['n_embd']}, "
            f"bias={a['bias']}")
    for name in sd:
        if name not in want and name not in optional:
            raise ConvertError(f"{path}: unexpected tensor '{name}' (not part of a {what})")
    for name, shape in want.items():
        if name not in sd:
            raise ConvertError(f"{path}: missing tensor '{name}' (model_args imply shape {shape_str(shape)})")
    for name, shape in list(want.items()) + list(optional.items()):
        if name not in sd:
            continue
        t = sd[name]
        if tuple(t.shape) != shape:
            raise ConvertError(f"{path}: tensor '{name}' has shape {shape_str(t.shape)} but model_args imply "
                               f"{shape_str(shape)}")
        if t.dtype not in DTYPE_NAMES:
            raise ConvertError(f"{path}: tensor '{name}' has dtype {str(t.dtype).replace('torch.', '')}; "
                               f"weights must be float32, float16 or bfloat16")
        bad = ~torch.isfinite(t)
        if bad.any():
            i = int(bad.flatten().nonzero()[0])
            raise ConvertError(f"{path}: tensor '{name}' holds {float(t.flatten()[i])} at element {i}: "
                               f"NaN or infinite weights cannot give finite logits")
    wte = sd["transformer.wte.weight"]
    if "lm_head.weight" in sd and not torch.equal(sd["lm_head.weight"], wte):
        raise ConvertError(f"{path}: lm_head.weight differs from transformer.wte.weight; nanoGPT ties them, "
                           f"and an untied head is not a nanoGPT model")
    causal = torch.tril(torch.ones(a["block_size"], a["block_size"])).view(mask_shape)
    for l in range(a["n_layer"]):
        name = f"transformer.h.{l}.attn.bias"
        if name in sd and not torch.equal(sd[name].float(), causal):
            raise ConvertError(f"{path}: buffer '{name}' is not the causal mask nanoGPT builds "
                               f"(torch.tril of ones)")


# ----------------------------------------------------------------------------------------------------------
# the Hugging Face GPT-2 directory
# ----------------------------------------------------------------------------------------------------------

def hf_tensors(sd, a, dtype, path):
    """transformers' GPT2LMHeadModel state_dict as save_pretrained writes it (tied lm_head left out)."""
    C = a["n_embd"]
    out = {}

    def put(name, t):
        t = t.detach().to(dtype).contiguous()
        if not torch.isfinite(t).all():
            i = int((~torch.isfinite(t)).flatten().nonzero()[0])
            raise ConvertError(f"{path}: tensor '{name}' does not fit in {DTYPE_NAMES[dtype]} (element {i} "
                               f"becomes {float(t.flatten()[i])}); convert with --dtype f32 or bf16")
        out[name] = t

    def bias_of(name, n):
        # bias=False: GPT-2 still has the parameter; zero is what no bias computes.
        return sd[name] if a["bias"] else torch.zeros(n, dtype=torch.float32)

    put("transformer.wte.weight", sd["transformer.wte.weight"])
    put("transformer.wpe.weight", sd["transformer.wpe.weight"])
    for l in range(a["n_layer"]):
        h = f"transformer.h.{l}."
        for norm in ("ln_1", "ln_2"):
            put(h + norm + ".weight", sd[h + norm + ".weight"])
            put(h + norm + ".bias", bias_of(h + norm + ".bias", C))
        for lin, n_out in (("attn.c_attn", 3 * C), ("attn.c_proj", C), ("mlp.c_fc", 4 * C), ("mlp.c_proj", C)):
            put(h + lin + ".weight", sd[h + lin + ".weight"].t())  # Linear [out, in] -> Conv1D [in, out]
            put(h + lin + ".bias", bias_of(h + lin + ".bias", n_out))
    put("transformer.ln_f.weight", sd["transformer.ln_f.weight"])
    put("transformer.ln_f.bias", bias_of("transformer.ln_f.bias", C))
    return out


def hf_config(a, dtype):
    """The fields and values transformers' GPT2Config(...).save_pretrained writes for this model."""
    gpt2_vocab = a["vocab_size"] >= GPT2_VOCAB
    return {
        "activation_function": "gelu",  # nn.GELU(): erf
        "add_cross_attention": False,
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": a["dropout"],
        "bos_token_id": GPT2_EOT if gpt2_vocab else None,
        "dtype": DTYPE_NAMES[dtype],
        "embd_pdrop": a["dropout"],
        "eos_token_id": GPT2_EOT if gpt2_vocab else None,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_embd": a["n_embd"],
        "n_head": a["n_head"],
        "n_inner": None,  # 4 * n_embd, as nanoGPT's MLP
        "n_layer": a["n_layer"],
        "n_positions": a["block_size"],
        "pad_token_id": None,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": a["dropout"],
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": a["vocab_size"],
    }


def tokenizer_files(tok_dir, vocab_size):
    """The tokenizer files to copy from tok_dir, after checking every id fits the model's vocabulary."""
    if not os.path.isdir(tok_dir):
        raise ConvertError(f"--tokenizer {tok_dir}: not a directory")
    present = [f for f in TOKENIZER_FILES if os.path.isfile(os.path.join(tok_dir, f))]
    if "tokenizer.json" in present:
        try:
            with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
                tj = json.load(f)
            ids = list(tj["model"]["vocab"].values()) + [t["id"] for t in tj.get("added_tokens", [])]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConvertError(f"--tokenizer {tok_dir}/tokenizer.json: not a BPE tokenizer.json: {first_line(e)}")
    elif "vocab.json" in present and "merges.txt" in present:
        try:
            with open(os.path.join(tok_dir, "vocab.json"), encoding="utf-8") as f:
                ids = list(json.load(f).values())
        except (OSError, ValueError, AttributeError) as e:
            raise ConvertError(f"--tokenizer {tok_dir}/vocab.json: not a vocabulary: {first_line(e)}")
    else:
        raise ConvertError(f"--tokenizer {tok_dir}: no tokenizer.json, nor vocab.json + merges.txt")
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ConvertError(f"--tokenizer {tok_dir}: token ids are not all integers")
    if max(ids) >= vocab_size or min(ids) < 0:
        raise ConvertError(f"--tokenizer {tok_dir}: token ids run to {max(ids)}, beyond the model's "
                           f"vocab_size {vocab_size} (not this model's tokenizer)")
    return [os.path.join(tok_dir, f) for f in present]


class _DataOnly(pickle.Unpickler):
    """Unpickles plain data only (dicts, lists, str, int...): a class or function in the file is refused, so
    that no code from it runs (pickle.load would call whatever the file names)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}; a meta.pkl holds plain data only")


def char_tokenizer(meta_path, vocab_size, block_size):
    """The tokenizer.json and tokenizer_config.json of a character-level model, from the meta.pkl that
    nanoGPT's data/*_char/prepare.py writes ({'vocab_size', 'itos', 'stoi'}): BPE over characters with no
    merges (each character one token, its id stoi[c]) and the Fuse decoder (ids back to the characters
    joined, itos), written by the `tokenizers` library itself, so that transformers' AutoTokenizer, minigpt
    and nanoGPT's encode/decode agree. A character the vocabulary lacks: nanoGPT raises, minigpt refuses,
    tokenizers drops it."""
    try:
        with open(meta_path, "rb") as f:
            meta = _DataOnly(io.BytesIO(f.read(1 << 26))).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, MemoryError) as e:
        raise ConvertError(f"--meta {meta_path}: not a nanoGPT meta.pkl: {first_line(e)}")
    if not isinstance(meta, dict) or not isinstance(meta.get("stoi"), dict) or not isinstance(meta.get("itos"), dict):
        raise ConvertError(f"--meta {meta_path}: not a nanoGPT meta.pkl (a dict with 'stoi' and 'itos'; a BPE "
                           f"dataset has none: use --tokenizer)")
    stoi, itos = meta["stoi"], meta["itos"]
    for c, i in stoi.items():
        if not isinstance(c, str) or len(c) != 1 or not isinstance(i, int) or isinstance(i, bool):
            raise ConvertError(f"--meta {meta_path}: stoi maps {c!r} to {i!r}; a character-level vocabulary maps "
                               f"single characters to integer ids")
        if itos.get(i) != c:
            raise ConvertError(f"--meta {meta_path}: stoi[{c!r}] = {i} but itos[{i}] = {itos.get(i)!r}")
        if not 0 <= i < vocab_size:
            raise ConvertError(f"--meta {meta_path}: stoi[{c!r}] = {i}, outside the model's vocab_size "
                               f"{vocab_size} (not this model's meta.pkl)")
        try:
            c.encode("utf-8")
        except UnicodeEncodeError:
            raise ConvertError(f"--meta {meta_path}: stoi holds {c!r}, which UTF-8 cannot encode")
    if len(itos) != len(stoi) or len(set(stoi.values())) != len(stoi) or not stoi:
        raise ConvertError(f"--meta {meta_path}: stoi ({len(stoi)}) and itos ({len(itos)}) are not one "
                           f"vocabulary")
    if meta.get("vocab_size", len(stoi)) != len(stoi):
        raise ConvertError(f"--meta {meta_path}: vocab_size {meta.get('vocab_size')!r} but stoi has {len(stoi)}")
    from tokenizers import Tokenizer, decoders
    from tokenizers.models import BPE
    tok = Tokenizer(BPE(vocab=dict(stoi), merges=[]))
    tok.decoder = decoders.Fuse()
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": block_size,
              "clean_up_tokenization_spaces": False}
    # nanoGPT's sample.py starts from "\n" (its default start): that is the model's BOS, what minigpt and
    # transformers' generate() start from without a prompt.
    return tok.to_str(), json.dumps(config, indent=2, sort_keys=True) + "\n", stoi.get("\n")


def write_directory(out_dir, force, write):
    """write(tmp) fills a temporary directory next to out_dir, which then takes out_dir's place."""
    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    if not os.path.isdir(parent):
        raise ConvertError(f"{out_dir}: the directory '{parent}' does not exist")
    replace = False
    if os.path.lexists(out_dir):
        if os.path.islink(out_dir) or not os.path.isdir(out_dir):
            raise ConvertError(f"{out_dir}: exists and is not a directory")
        if os.listdir(out_dir):
            if not force:
                raise ConvertError(f"{out_dir}: exists and is not empty (--force replaces it)")
            replace = True
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(out_dir) + ".", suffix=".tmp", dir=parent)
    try:
        write(tmp)
        # mkdtemp makes the directory 0700 and safetensors its file 0600: give them the modes of a plain mkdir
        # and open(), as any other model directory has.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        for f in os.listdir(tmp):
            os.chmod(os.path.join(tmp, f), 0o666 & ~umask)
        if replace:
            old = tempfile.mkdtemp(prefix="." + os.path.basename(out_dir) + ".", suffix=".old", dir=parent)
            os.rename(out_dir, os.path.join(old, "d"))
            os.rename(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)  # over an empty directory, or none
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def inside(path, directory):
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory + os.sep)


def convert(ckpt_path, out_dir, dtype_name, tokenizer_dir=None, force=False, meta=None):
    if dtype_name not in DTYPES:
        raise ConvertError(f"--dtype '{dtype_name}' is not one of {', '.join(DTYPES)}")
    dtype = DTYPES[dtype_name]
    if force and os.path.isdir(out_dir) and inside(ckpt_path, out_dir):
        raise ConvertError(f"{out_dir}: holds the checkpoint '{ckpt_path}'; --force would delete it (write "
                           f"elsewhere)")
    ckpt = load_checkpoint(ckpt_path)
    args = check_model_args(ckpt["model_args"], ckpt_path)
    sd = strip_compile_prefix(ckpt["model"], ckpt_path)
    check_tensors(sd, args, ckpt_path)
    tensors = hf_tensors(sd, args, dtype, ckpt_path)
    config = hf_config(args, dtype)
    if tokenizer_dir and meta:
        raise ConvertError("--tokenizer and --meta are two tokenizers: give one")
    tok = tokenizer_files(tokenizer_dir, args["vocab_size"]) if tokenizer_dir else []
    char_tok = char_tokenizer(meta, args["vocab_size"], args["block_size"]) if meta else None
    if char_tok and char_tok[2] is not None:
        config["bos_token_id"] = char_tok[2]

    def write(d):
        with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")  # as PretrainedConfig.to_json_string
        save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        for src in tok:
            shutil.copyfile(src, os.path.join(d, os.path.basename(src)))
        if char_tok:
            for name, text in zip(("tokenizer.json", "tokenizer_config.json"), char_tok[:2]):
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    f.write(text)

    write_directory(out_dir, force, write)
    n_params = sum(t.numel() for t in tensors.values())
    info = [f"n_layer={args['n_layer']}", f"n_head={args['n_head']}", f"n_embd={args['n_embd']}",
            f"block_size={args['block_size']}", f"vocab_size={args['vocab_size']}", f"bias={args['bias']}"]
    trained = ""
    if "iter_num" in ckpt:
        trained = f", iter {ckpt['iter_num']}"
    loss = ckpt.get("best_val_loss")
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        loss = float(loss)
    if isinstance(loss, float) and math.isfinite(loss):
        trained += f", best val loss {loss:.4f}"
    print(f"{out_dir}: GPT-2 directory from nanoGPT {' '.join(info)}{trained}; {n_params:,} parameters "
          f"as {DTYPE_NAMES[dtype]}" + (f", tokenizer from {tokenizer_dir}" if tok else "") +
          (f", character-level tokenizer from {meta}" if char_tok else ""))
    if not tok and not char_tok:
        dataset = ckpt.get("config", {}).get("dataset") if isinstance(ckpt.get("config"), dict) else None
        hint = f" (nanoGPT keeps it in data/{dataset}/meta.pkl)" if isinstance(dataset, str) else ""
        print(f"{out_dir}: no tokenizer: generate needs one to take text: --tokenizer DIR for a BPE model, "
              f"--meta meta.pkl for a character-level one{hint}")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{PROG}: error: {message} (see --help)\n")
        sys.exit(2)


def main(argv=None):
    p = OneLineParser(prog=PROG, description="Convert a nanoGPT ckpt.pt into a Hugging Face GPT-2 directory "
                      "(config.json + model.safetensors) that minigpt and transformers load.")
    p.add_argument("ckpt", metavar="CKPT.pt", help="the ckpt.pt nanoGPT's train.py saved")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the directory to write (must not exist, or be empty)")
    p.add_argument("--dtype", default="f32", metavar="f32|f16|bf16", help="the weights' type (default f32)")
    p.add_argument("--tokenizer", metavar="DIR", help="copy this tokenizer (tokenizer.json, or vocab.json + "
                   "merges.txt) into the directory, e.g. tests/fixtures/gpt2-tokenizer for GPT-2 BPE models")
    p.add_argument("--meta", metavar="META.pkl", help="a character-level model's vocabulary (the meta.pkl of "
                   "nanoGPT's data/*_char/prepare.py): written as tokenizer.json + tokenizer_config.json")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists and is not empty")
    a = p.parse_args(argv)
    try:
        convert(a.ckpt, a.out_dir, a.dtype, a.tokenizer, a.force, a.meta)
    except ConvertError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: {first_line(e)}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
