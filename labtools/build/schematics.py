"""One schematic per lab: a diagram of what the lab builds, drawn with matplotlib.

`python -m labtools schematics` draws them and writes each into a markdown cell of the
lab's source notebook, right after the heading of the part it illustrates, as a `data:`
URI; `labtools build` then carries it into every edition. An image inside the markdown
travels with the notebook and shows everywhere a student opens it (Colab, JupyterLab,
GitHub, nbconvert); a cell attachment does not show on Colab or GitHub, and a file
beside the notebook or a link to the web is not there offline (labtools/build/images.py).
"""

from __future__ import annotations

import base64
import io
import re

import nbformat

from .. import nbcells
from ..labs import Lab

ATTACHMENT = "schematic.png"
_BOX = dict(boxstyle="round,pad=0.45", linewidth=1.2)
_COLOURS = {"data": "#e8f1fb", "op": "#fdf0d5", "learned": "#e3f4e1", "note": "#f4f4f4"}


def _figure(width, height):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def _box(ax, x, y, text, kind="op", size=9.5):
    """A labelled box centred at (x, y); arrows attach to its edge."""
    return ax.text(x, y, text, ha="center", va="center", fontsize=size,
                   bbox={**_BOX, "facecolor": _COLOURS[kind], "edgecolor": "#555555"})


def _arrow(ax, start, end, text=None, colour="#333333", bend=0.0):
    """An arrow from box (or point) `start` to box (or point) `end`, clipped at the boxes' edges."""
    def where(item):
        return item.get_position() if hasattr(item, "get_bbox_patch") else item

    def patch(item):
        return item.get_bbox_patch() if hasattr(item, "get_bbox_patch") else None

    (x0, y0), (x1, y1) = where(start), where(end)
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(
        arrowstyle="-|>", color=colour, lw=1.1, shrinkA=3, shrinkB=3, patchA=patch(start), patchB=patch(end),
        connectionstyle=f"arc3,rad={bend}"))
    if text:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, text, ha="center", va="bottom", fontsize=8, color=colour)


def _mask(ax, x, y, allowed, title, cell=0.16):
    """A small attention mask as a grid: dark = may attend; queries down, keys across."""
    from matplotlib.patches import Rectangle

    n = len(allowed)
    for i in range(n):
        for j in range(n):
            ax.add_patch(Rectangle((x + j * cell, y - i * cell), cell, cell, lw=0.6, edgecolor="#999999",
                                   facecolor="#3b6ea5" if allowed[i][j] else "white"))
    ax.text(x + n * cell / 2, y + cell + 0.08, title, ha="center", va="bottom", fontsize=8.5)


def attention():
    fig, ax = _figure(12, 2.8)
    q, k, v = _box(ax, 0.7, 2.2, "Q\n(L_q, d_k)", "data"), _box(ax, 0.7, 1.3, "K\n(L_k, d_k)", "data"), \
        _box(ax, 0.7, 0.4, "V\n(L_k, d_v)", "data")
    scores = _box(ax, 2.6, 1.75, "scores = Q Kᵀ\n(L_q, L_k)")
    scaled = _box(ax, 4.2, 1.75, "÷ √d_k")
    masked = _box(ax, 5.8, 1.75, "mask: blocked\nscores → −∞")
    soft = _box(ax, 7.8, 1.75, "softmax over\nthe keys (dim −1)")
    weights = _box(ax, 10.4, 1.75, "weights (L_q, L_k)\nrows sum to 1", "data")
    out = _box(ax, 10.4, 0.45, "output = weights · V\n(L_q, d_v)", "data")
    _arrow(ax, q, scores)
    _arrow(ax, k, scores)
    _arrow(ax, scores, scaled)
    _arrow(ax, scaled, masked)
    _arrow(ax, masked, soft)
    _arrow(ax, soft, weights)
    _arrow(ax, weights, out)
    _arrow(ax, v, out, "each query: a weighted average of the values")
    ax.text(6.0, 0.0, "Any number of leading (batch, head) dimensions ride along unchanged.",
            ha="center", fontsize=8.5, style="italic")
    return fig


def multihead():
    fig, ax = _figure(12, 3.0)
    x = _box(ax, 0.7, 1.5, "x\n(B, L, d_model)", "data")
    proj = _box(ax, 2.9, 1.5, "W_Q, W_K, W_V\n(d_model → d_model)", "learned")
    split = _box(ax, 5.2, 1.5, "split heads\n(B, H, L, d_k)\nd_k = d_model / H")
    heads = [_box(ax, 7.4, y, f"attention, head {h}", "op", 8.5) for h, y in ((0, 2.45), (1, 1.75), ("H − 1", 0.55))]
    ax.text(7.4, 1.18, "⋮", ha="center", va="center", fontsize=12)
    merge = _box(ax, 9.6, 1.5, "combine heads\n(B, L, d_model)")
    w_o = _box(ax, 11.4, 1.5, "W_O", "learned")
    _arrow(ax, x, proj)
    _arrow(ax, proj, split)
    for head in heads:
        _arrow(ax, split, head)
        _arrow(ax, head, merge)
    _arrow(ax, merge, w_o)
    ax.text(6.0, 0.0, "Each head attends in its own d_k-dimensional subspace; W_O mixes what the heads found.",
            ha="center", fontsize=8.5, style="italic")
    return fig


def positions():
    fig, ax = _figure(12, 3.0)
    ax.text(2.6, 2.75, "added to the input (sinusoidal, learned)", ha="center", fontsize=9, weight="bold")
    tok = _box(ax, 0.8, 1.9, "token ids\n(B, L)", "data")
    emb = _box(ax, 2.5, 1.9, "embedding\n(B, L, d)", "learned")
    pe = _box(ax, 2.5, 0.8, "position encoding\nPE[pos] (L, d)")
    plus = _box(ax, 4.1, 1.9, "x + PE")
    _arrow(ax, tok, emb)
    _arrow(ax, emb, plus)
    _arrow(ax, pe, plus)
    ax.plot([5.3, 5.3], [0.2, 2.8], color="#bbbbbb", lw=1)
    ax.text(8.6, 2.75, "inside attention (RoPE, T5's bias, ALiBi)", ha="center", fontsize=9, weight="bold")
    qk = _box(ax, 6.3, 1.9, "q_m (query), k_n (key)\nof one head", "data")
    rope = _box(ax, 8.4, 1.9, "RoPE: rotate each pair\nof dims by pos · θ")
    score = _box(ax, 10.8, 1.9, "score(m, n) depends\non n − m only")
    bias = _box(ax, 8.4, 0.8, "T5 / ALiBi: add b(n − m)\nto the score", "learned")
    _arrow(ax, qk, rope)
    _arrow(ax, rope, score)
    _arrow(ax, bias, score)
    ax.text(6.0, 0.0, "Self-attention alone is blind to order: each way puts position in at a different place.",
            ha="center", fontsize=8.5, style="italic")
    return fig


def blocks():
    fig, ax = _figure(12, 3.2)
    ax.text(4.0, 3.0, "Pre-LN encoder block", ha="center", fontsize=9, weight="bold")
    x = _box(ax, 0.4, 1.6, "x", "data")
    ln1 = _box(ax, 1.6, 1.6, "LayerNorm")
    att = _box(ax, 3.3, 1.6, "self-attention", "learned")
    add1 = _box(ax, 4.7, 1.6, "+")
    ln2 = _box(ax, 5.9, 1.6, "LayerNorm")
    ffn = _box(ax, 7.6, 1.6, "feed-forward\nd → d_ff → d", "learned")
    add2 = _box(ax, 9.0, 1.6, "+")
    for a, b in ((x, ln1), (ln1, att), (att, add1), (add1, ln2), (ln2, ffn), (ffn, add2)):
        _arrow(ax, a, b)
    _arrow(ax, x, add1, colour="#2e7d32", bend=-0.45)
    _arrow(ax, add1, add2, colour="#2e7d32", bend=-0.45)
    ax.text(2.5, 2.65, "residual", color="#2e7d32", fontsize=8)
    ax.text(6.8, 2.65, "residual", color="#2e7d32", fontsize=8)
    ax.plot([9.6, 9.6], [0.2, 3.0], color="#bbbbbb", lw=1)
    ax.text(10.8, 3.0, "decoder block adds", ha="center", fontsize=9, weight="bold")
    _box(ax, 10.8, 2.2, "masked (causal)\nself-attention", "learned", 8.5)
    _box(ax, 10.8, 1.35, "cross-attention to\nthe encoder's output", "learned", 8.5)
    _box(ax, 10.8, 0.55, "feed-forward", "learned", 8.5)
    ax.text(4.7, 0.35, "Post-LN (the 2017 paper) normalises after each +, on the residual path itself.",
            ha="center", fontsize=8.5, style="italic")
    return fig


def variants():
    fig, ax = _figure(11, 3.0)
    n = 5
    full = [[1] * n for _ in range(n)]
    causal = [[int(j <= i) for j in range(n)] for i in range(n)]
    columns = [
        (0.7, "encoder only (BERT)", [full], "bidirectional: every token\nsees every token",
         "objective: masked tokens\n'the [MASK] sat' → cat"),
        (4.4, "decoder only (GPT)", [causal], "causal: a token sees\nitself and the past",
         "objective: the next token\n'the cat' → sat"),
        (8.1, "encoder-decoder (T5)", [full, causal], "encoder: bidirectional;\ndecoder: causal, plus\ncross-attention",
         "objective: dropped spans\n'the <X> down' → <X> cat sat"),
    ]
    for x, title, masks, what, objective in columns:
        ax.text(x + 1.2, 2.8, title, ha="center", fontsize=9.5, weight="bold")
        for m, mask in enumerate(masks):
            _mask(ax, x + 0.95 * m, 2.2, mask, "")
        ax.text(x + 0.95 * len(masks) + 0.05, 2.0, what, ha="left", va="center", fontsize=8.5)
        _box(ax, x + 1.2, 0.55, objective, "note", 8.5)
    ax.text(5.5, 0.02, "Masks drawn with queries down and keys across; blue = may attend.",
            ha="center", fontsize=8.5, style="italic")
    return fig


def t5_finetuning():
    fig, ax = _figure(12, 3.0)
    text = _box(ax, 1.1, 2.2, "'summarize: ' + bill", "data")
    tok = _box(ax, 3.3, 2.2, "tokenizer\n(ids, mask)")
    enc = _box(ax, 5.2, 2.2, "T5 encoder", "learned")
    dec = _box(ax, 7.1, 2.2, "T5 decoder", "learned")
    loss = _box(ax, 10.0, 2.2, "cross-entropy on the\nsummary (−100: ignored)")
    labels = _box(ax, 7.1, 1.05, "labels = summary ids,\nshifted right for the decoder", "data", 8.5)
    for a, b in ((text, tok), (tok, enc), (enc, dec), (dec, loss)):
        _arrow(ax, a, b)
    _arrow(ax, labels, dec)
    gen = _box(ax, 3.3, 0.4, "at inference: greedy,\nbeam search or sampling")
    rouge = _box(ax, 7.1, 0.0, "summary → ROUGE against\nthe reference (and a fact check)", "note", 8.5)
    _arrow(ax, gen, rouge)
    ax.text(4.25, 1.35, "encoder and decoder: pre-trained first on\nunlabelled text (denoising), then fine-tuned",
            ha="center", fontsize=8.5, style="italic")
    return fig


# lab id -> (the heading its schematic follows, drawing, caption)
def inference():
    fig, ax = _figure(12, 3.2)
    ax.text(3.4, 3.05, "one decode step with a KV cache (one layer)", ha="center", fontsize=9, weight="bold")
    tok = _box(ax, 0.7, 2.1, "new token\n(B, 1)", "data")
    proj = _box(ax, 2.3, 2.1, "W_Q, W_K, W_V\nof 1 position", "learned")
    cache = _box(ax, 2.3, 0.7, "cache: K, V of the\nt positions read so far\n(B, G, t, d_k)", "data", 8.5)
    cat = _box(ax, 4.3, 1.4, "append: K, V\n(B, G, t+1, d_k)")
    att = _box(ax, 6.1, 2.1, "1 query attends\nto t+1 keys")
    out = _box(ax, 6.1, 0.7, "W_O, FFN of\n1 position", "learned")
    _arrow(ax, tok, proj)
    _arrow(ax, proj, att, "q")
    _arrow(ax, proj, cat, "k, v")
    _arrow(ax, cache, cat)
    _arrow(ax, cat, att)
    _arrow(ax, att, out)
    ax.plot([7.35, 7.35], [0.2, 3.0], color="#bbbbbb", lw=1)
    ax.text(9.7, 3.05, "grouped-query attention: what the cache keeps", ha="center", fontsize=9, weight="bold")
    for row, (name, groups) in enumerate([("MHA  (G = H)", [[0], [1], [2], [3]]), ("GQA  (G = 2)", [[0, 1], [2, 3]]),
                                          ("MQA  (G = 1)", [[0, 1, 2, 3]])]):
        y = 2.35 - row * 0.85
        ax.text(7.55, y, name, ha="left", va="center", fontsize=8.5)
        for h in range(4):
            ax.text(9.0 + 0.42 * h, y + 0.2, f"q{h}", ha="center", va="center", fontsize=7.5,
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "#e8f1fb", "edgecolor": "#777777"})
        for g, members in enumerate(groups):
            centre = 9.0 + 0.42 * (members[0] + members[-1]) / 2
            ax.text(centre, y - 0.2, f"kv{g}", ha="center", va="center", fontsize=7.5,
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "#e3f4e1", "edgecolor": "#777777"})
        ax.text(11.0, y, f"{len(groups)} kv head{'s' if len(groups) > 1 else ''}\nper token", ha="left", va="center",
                fontsize=8)
    ax.text(6.0, 0.0, "The cache turns each step's work over all t positions into work on one; GQA divides the cache by H/G.",
            ha="center", fontsize=8.5, style="italic")
    return fig


def insert(path, heading="## Part 2 · The KV cache",
           caption="One decode step with a KV cache, and what grouped-query attention shares."):
    import base64
    import io

    import matplotlib.pyplot as plt
    import nbformat

    from labtools.build import schematics

    fig = inference()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    nb = nbformat.read(path, as_version=4)
    cell = schematics.schematic_cell(nb)
    if cell is None:
        index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(heading))
        cell = nbformat.v4.new_markdown_cell()
        nb.cells.insert(index + 1, cell)
    cell.source = f"![{caption}](data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()})\n\n*{caption}*"
    cell.metadata.setdefault("labtools", {})["schematic"] = True
    nbformat.write(nb, path)
    return len(buffer.getvalue())


if __name__ == "__main__":
    import sys
    print(insert(sys.argv[1]), "bytes")


SCHEMATICS = {
    "lab01_attention": ("## Part 4 · Scaled dot-product attention", attention,
                        "Scaled dot-product attention, the operation you write in this part."),
    "lab02_multihead": ("## Part 3 · The multi-head attention module", multihead,
                        "Multi-head attention: project, split into heads, attend per head, combine, mix with W_O."),
    "lab03_positional": ("## Part 1 · Self-attention does not see order", positions,
                         "Two places to put positions: added to the input, or inside each attention score."),
    "lab04_blocks": ("## Part 4 · The encoder block: Post-LN and Pre-LN", blocks,
                     "The blocks of this lab: a Pre-LN encoder block, and what a decoder block adds."),
    "lab05_variants": ("## Part 1 · Three families, one building block", variants,
                       "Three families of Transformers: the same block, other masks and objectives."),
    "lab06_t5": ("## Part 1 · T5: every task is text to text", t5_finetuning,
                 "Fine-tuning T5 for summarization, as this lab does it."),
    "lab07_inference": ("## Part 2 · The KV cache", inference,
                        "One decode step with a KV cache, and what grouped-query attention shares."),
}


def png(lab_id: str) -> bytes:
    import matplotlib.pyplot as plt

    fig = SCHEMATICS[lab_id][1]()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


MARK = "schematic"  # the schematic's cell says so in its metadata: {"labtools": {"schematic": true}}


def schematic_cell(nb):
    """The markdown cell holding the lab's schematic, or None (an older notebook's attachment too)."""
    return next((c for c in nb.cells if c.cell_type == "markdown" and (
        (c.metadata.get("labtools") or {}).get(MARK) or ATTACHMENT in c.get("attachments", {}))), None)


def schematic_png(cell) -> bytes:
    """The PNG a schematic cell shows."""
    match = re.search(r"\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", cell.source)
    return base64.b64decode(match.group(1)) if match else b""


def insert(lab: Lab, root=None) -> None:
    """Draw the lab's schematic and store it in its source notebook (replacing an older one)."""
    heading, _, caption = SCHEMATICS[lab.lab_id]
    path = lab.source_path(root) if root else lab.source_path()
    nb = nbcells.read(path)
    cell = schematic_cell(nb)
    if cell is None:
        index = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                      and c.source.startswith(heading)), None)
        if index is None:
            raise ValueError(f"{lab.lab_id}: no markdown cell starts with {heading!r}; update SCHEMATICS")
        cell = nbformat.v4.new_markdown_cell()
        nb.cells.insert(index + 1, cell)
    cell.source = f"![{caption}](data:image/png;base64,{base64.b64encode(png(lab.lab_id)).decode()})\n\n*{caption}*"
    cell.pop("attachments", None)
    cell.metadata.setdefault("labtools", {})[MARK] = True
    nbformat.write(nb, str(path))
