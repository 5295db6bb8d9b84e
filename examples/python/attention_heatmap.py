"""Draws the attention of every head of one layer as heatmaps with matplotlib, from minigpt's arrays.

    PYTHONPATH=build/python .venv/bin/python examples/python/attention_heatmap.py [OUT.png] [LAYER] [TEXT]

(needs matplotlib: pip install matplotlib). m.attention() gives the probabilities as transformers'
output_attentions does, a numpy array [layer, head, query, key]; docs/python-attention.png is this script's
picture of the shipped model.
"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

import minigpt  # noqa: E402


def main(argv: list[str]) -> int:
    out = argv[1] if len(argv) > 1 else "attention.png"
    layer = int(argv[2]) if len(argv) > 2 else 3
    text = argv[3] if len(argv) > 3 else "ROMEO: But soft, what light"
    m = minigpt.Model("models/shakespeare-char", threads=2)
    ids = m.tokenizer.encode(text)
    att = m.attention(ids)  # float32 [n_layer, n_head, T, T], zero above the diagonal
    labels = [m.tokenizer.token_bytes(i).decode("utf-8", "replace").replace(" ", "␣") for i in ids]
    n_head = att.shape[1]
    cols = 2 if n_head > 1 else 1
    rows = (n_head + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 5.0 * rows), constrained_layout=True, squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= n_head:
            ax.axis("off")
            continue
        ax.imshow(att[layer, h], cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"layer {layer}, head {h}")
        ax.set_xticks(range(len(ids)), labels, fontsize=7)
        ax.set_yticks(range(len(ids)), labels, fontsize=7)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.suptitle(f"minigpt: attention of {m.path} over {text!r}")
    fig.savefig(out, dpi=110)
    print(f"{out}: layer {layer}, {n_head} heads, {len(ids)} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
