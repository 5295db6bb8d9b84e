#!/usr/bin/env python3
"""Train minigpt's small byte-level GPT-2 ("shakespeare-char") on tiny Shakespeare.

Vocabulary: the 256 byte values (token id = byte value of the UTF-8 file). The data file's first
90% of bytes are the train split, the last 10% the validation split. The model is a
transformers.GPT2LMHeadModel (gelu_new, tied embeddings, bos_token_id=10 = newline, no eos/pad).

Deterministic: torch/numpy seeds, the whole sequence of training batch offsets is drawn up front
from numpy's RandomState(seed), the val-estimate batches from RandomState(seed + 1), and training
runs on one CPU thread. Re-running the same command on the same machine/software reproduces the
model; bit-exactness across machines (CPU kernels) or torch versions is not guaranteed.

Run from the repository root:

    python3 tools/train_char.py                    # defaults below -> models/shakespeare-char
    python3 tools/train_char.py --iters 20 --out /tmp/sc --no-save-ckpt   # quick timing check

Writes to --out: config.json + model.safetensors (float32, best val-estimate checkpoint),
vocab.json / merges.txt / tokenizer.json (byte-level tokenizer, no merges), train_log.json
(config, curve, timings, final full-validation loss). A resumable training state is kept in
--ckpt (not committed); --resume continues from it (same arguments required).
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=os.path.join(ROOT, "tests", "fixtures", "data", "tinyshakespeare.txt"))
    p.add_argument("--out", default=os.path.join(ROOT, "models", "shakespeare-char"))
    p.add_argument("--ckpt", default=os.path.join(ROOT, "build-train", "shakespeare-char-state.pt"))
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block", type=int, default=128, help="context length (n_positions)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--iters", type=int, default=3000)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr", type=float, default=2e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-batches", type=int, default=50)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--resume", action="store_true", help="continue from --ckpt")
    p.add_argument("--no-save-ckpt", action="store_true", help="do not write the resumable state")
    return p.parse_args()


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------
def load_splits(path):
    with open(path, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
    n = int(0.9 * len(data))
    return data[:n], data[n:]


def get_batch(split, offsets, block):
    x = np.stack([split[i:i + block] for i in offsets])
    y = np.stack([split[i + 1:i + 1 + block] for i in offsets])
    return torch.from_numpy(x), torch.from_numpy(y)


def lr_at(it, a):
    """Linear warmup for `warmup` iters, then cosine decay from lr to min_lr at `iters`."""
    if it < a.warmup:
        return a.lr * (it + 1) / a.warmup
    ratio = min(1.0, (it - a.warmup) / max(1, a.iters - a.warmup))
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


@torch.no_grad()
def estimate_val(model, val_batches):
    model.eval()
    losses = []
    for x, y in val_batches:
        logits = model(input_ids=x).logits
        losses.append(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item())
    model.train()
    return float(np.mean(losses))


@torch.no_grad()
def full_val_loss(model, val, block):
    """Mean cross-entropy (nats/char) over the whole validation split.

    The split is cut into consecutive non-overlapping windows of `block` bytes (the last one may be
    shorter); in each window, every byte except the first is predicted from the bytes before it in
    that window. So each val byte is predicted exactly once, except the first byte of each window.
    """
    model.eval()
    total, count = 0.0, 0
    windows = [val[i:i + block] for i in range(0, len(val), block)]
    full = [w for w in windows if len(w) == block]
    tail = [w for w in windows if len(w) != block and len(w) >= 2]
    for i in range(0, len(full), 64):
        x = torch.from_numpy(np.stack(full[i:i + 64]))
        logits = model(input_ids=x).logits[:, :-1]
        tgt = x[:, 1:]
        total += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), reduction="sum").item()
        count += tgt.numel()
    for w in tail:
        x = torch.from_numpy(w)[None]
        logits = model(input_ids=x).logits[:, :-1]
        total += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1), reduction="sum").item()
        count += x.size(1) - 1
    return total / count, count, len(windows)


# --------------------------------------------------------------------------------------------
# tokenizer files
# --------------------------------------------------------------------------------------------
def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode symbol map (same as openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_tokenizer(out, block):
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(out, "tokenizer.json"))
    # The BOS is the newline (byte 10, "\u010a" as a byte-level symbol), as config.json's bos_token_id and
    # minigpt's empty prompt have it, so that AutoTokenizer reports it (lm-eval's prefix token). No EOS:
    # the model never learned to end a text, and neither transformers' generate() nor minigpt stops at one.
    # No other special token either: transformers' GPT2Tokenizer would add "<|endoftext|>" as id 256,
    # outside the model's vocabulary.
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": b2u[10], "eos_token": None, "unk_token": None,
                   "pad_token": None, "add_prefix_space": False, "model_max_length": block}, f, indent=2)
    # Check: every way of loading maps text to exactly its UTF-8 bytes.
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoTokenizer, GPT2TokenizerFast
    vocab_file, merges_file = os.path.join(out, "vocab.json"), os.path.join(out, "merges.txt")
    bl = ByteLevelBPETokenizer(vocab_file, merges_file)
    hf = GPT2TokenizerFast(vocab=vocab_file, merges=merges_file, unk_token=None, bos_token=None, eos_token=None)
    auto = AutoTokenizer.from_pretrained(out)
    tj = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    assert bl.get_vocab_size() == 256 and len(hf) == 256 and len(auto) == 256 and tj.get_vocab_size() == 256
    assert auto.bos_token_id == 10 and auto.eos_token_id is None and auto.pad_token_id is None, auto
    for text in ["ROMEO: h\u00e9llo\n", "First Citizen:\nBefore we proceed", "  tabs\tand \u65e5\u672c \u2713 \r\n\x00\x7f<|endoftext|>"]:
        want = list(text.encode("utf-8"))
        for name, got in [("ByteLevelBPETokenizer", bl.encode(text).ids),
                          ("GPT2TokenizerFast(vocab, merges)", hf(text)["input_ids"]),
                          ("AutoTokenizer.from_pretrained", auto(text)["input_ids"]),
                          ("tokenizer.json", tj.encode(text).ids)]:
            assert got == want, (name, text, got, want)
        assert tj.decode(want) == text and auto.decode(want) == text
    print("tokenizer check ok: vocab.json/merges.txt/tokenizer.json encode text to its UTF-8 bytes")


def check_config(out):
    """Make sure config.json says bos_token_id=10 and has no eos/pad ids (never 50256)."""
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    assert cfg.get("bos_token_id") == 10, cfg.get("bos_token_id")
    assert cfg.get("eos_token_id") is None, cfg.get("eos_token_id")
    assert cfg.get("pad_token_id") is None, cfg.get("pad_token_id")
    assert cfg.get("vocab_size") == 256


# --------------------------------------------------------------------------------------------
def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    train, val = load_splits(a.data)
    print(f"data: {len(train)} train bytes, {len(val)} val bytes")

    config = GPT2Config(
        vocab_size=256, n_positions=a.block, n_embd=a.n_embd, n_layer=a.n_layer, n_head=a.n_head,
        activation_function="gelu_new", resid_pdrop=a.dropout, embd_pdrop=a.dropout, attn_pdrop=a.dropout,
        bos_token_id=10, eos_token_id=None, pad_token_id=None, tie_word_embeddings=True)
    model = GPT2LMHeadModel(config)  # GPT-2 init, seeded by torch.manual_seed above
    model.config._attn_implementation = "sdpa"  # faster for training; reference outputs use eager
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters (tied embeddings counted once)")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)

    # All batch offsets drawn up front: iteration `it` always sees the same batch.
    train_offsets = np.random.RandomState(a.seed).randint(0, len(train) - a.block - 1, size=(a.iters, a.batch))
    val_offsets = np.random.RandomState(a.seed + 1).randint(0, len(val) - a.block - 1, size=(a.eval_batches, a.batch))
    val_batches = [get_batch(val, o, a.block) for o in val_offsets]

    start_it, curve, best, best_state, elapsed_before = 0, [], float("inf"), None, 0.0
    if a.resume:
        st = torch.load(a.ckpt, weights_only=False)
        assert st["args"]["iters"] <= a.iters
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        torch.set_rng_state(st["torch_rng"])
        start_it, curve, best, best_state = st["it"], st["curve"], st["best"], st["best_state"]
        elapsed_before = st["train_seconds"]
        print(f"resumed at iter {start_it} (best val estimate {best:.4f})")

    model.train()
    t0 = time.time()
    t_eval = 0.0
    for it in range(start_it, a.iters + 1):
        if it % a.eval_interval == 0 or it == a.iters:
            te = time.time()
            v = estimate_val(model, val_batches)
            t_eval += time.time() - te
            train_s = elapsed_before + time.time() - t0
            if v < best:
                best = v
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
            curve.append({"iter": it, "val_estimate": round(v, 4), "lr": lr_at(min(it, a.iters - 1), a),
                          "seconds": round(train_s, 1)})
            print(f"iter {it:5d}  val_est {v:.4f}  best {best:.4f}  {train_s:7.1f}s", flush=True)
            if not a.no_save_ckpt and it > start_it:
                os.makedirs(os.path.dirname(a.ckpt), exist_ok=True)
                torch.save({"args": vars(a), "it": it, "model": model.state_dict(), "opt": opt.state_dict(),
                            "torch_rng": torch.get_rng_state(), "curve": curve, "best": best,
                            "best_state": best_state, "train_seconds": train_s}, a.ckpt + ".tmp")
                os.replace(a.ckpt + ".tmp", a.ckpt)
        if it == a.iters:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(it, a)
        x, y = get_batch(train, train_offsets[it], a.block)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        if it % 50 == 0:
            print(f"iter {it:5d}  train_loss {loss.item():.4f}  lr {lr_at(it, a):.2e}  "
                  f"{(time.time() - t0) / (it - start_it + 1):.3f}s/it", flush=True)
    train_seconds = elapsed_before + time.time() - t0

    model.load_state_dict(best_state)
    model.eval()
    best_iter = min(curve, key=lambda c: c["val_estimate"])["iter"]
    tv = time.time()
    model.config._attn_implementation = "eager"
    val_loss, n_pred, n_windows = full_val_loss(model, val, a.block)
    print(f"best checkpoint: iter {best_iter}, val estimate {best:.4f}; full validation loss "
          f"{val_loss:.4f} nats/char over {n_pred} predictions ({n_windows} windows) in {time.time() - tv:.1f}s")

    os.makedirs(a.out, exist_ok=True)
    # Inference-time config: no dropout.
    model.config.resid_pdrop = model.config.embd_pdrop = model.config.attn_pdrop = 0.0
    model.float().save_pretrained(a.out, safe_serialization=True)
    check_config(a.out)
    write_tokenizer(a.out, a.block)

    try:
        cpu = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
               if l.startswith("Model name")][0]
    except Exception:
        cpu = platform.processor()
    log = {
        "command": "python3 " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "args": {k: v for k, v in vars(a).items() if k not in ("data", "out", "ckpt")},
        "data_bytes": {"train": int(len(train)), "val": int(len(val))},
        "n_params": n_params,
        "tokens_seen": a.iters * a.batch * a.block,
        "curve": curve,
        "best_iter": best_iter,
        "best_val_estimate": round(best, 4),
        "full_val_loss_nats_per_char": round(val_loss, 4),
        "full_val_predictions": n_pred,
        "full_val_windows": n_windows,
        "train_seconds_including_estimates": round(train_seconds, 1),
        "resumed": a.resume,
        "hardware": f"{cpu}, torch threads={a.threads}",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
    }
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
