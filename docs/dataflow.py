#!/usr/bin/env python3
"""Writes docs/dataflow.svg, the README's picture of halogen's data flow, from the boxes and
arrows below (standard library only): python3 docs/dataflow.py"""
import os
from xml.sax.saxutils import escape

W, H = 1040, 600
BOX_W, BOX_H = 250, 62

# (id, column x, row y, title, lines below the title, fill)
BOXES = [
    ("input", 20, 20, "your graph", ["OGB CSV, edge list, Matrix Market,", "METIS, or .npz from NumPy/PyG/DGL"], "#eef3fb"),
    ("dataset", 20, 140, "binary dataset", ["one checksummed file per array,", "memory-mapped (halogen info)"], "#eef3fb"),
    ("shards", 20, 260, "shards, one per rank", ["owned nodes + halo nodes, local CSR,", "send lists (partition.json report)"], "#eef3fb"),
    ("rank", 400, 260, "each rank, each layer", ["aggregate owned rows while halo rows", "travel; transform; backward likewise"], "#fdf3e3"),
    ("wire", 400, 380, "halo exchange", ["quantized 32..1 bits, sync / overlap /", "stale (bounded age); MPI or NCCL"], "#fdf3e3"),
    ("grads", 400, 500, "weight gradients", ["summed over ranks (all-reduce),", "Adam step on every rank"], "#fdf3e3"),
    ("model", 730, 260, "model and metrics", ["--save-model: .npy + model.json;", "--metrics: one JSON line per epoch"], "#eaf6ec"),
    ("use", 730, 380, "predictions", ["predictions, probabilities,", "embeddings as .npy"], "#eaf6ec"),
]

# (from, to, label, side of the source box, side of the target box)
ARROWS = [
    ("input", "dataset", "halogen convert / generate", "bottom", "top"),
    ("dataset", "shards", "halogen partition (METIS, PT-Scotch)", "bottom", "top"),
    ("shards", "rank", "mpirun halogen train", "right", "left"),
    ("rank", "wire", "", "bottom", "top"),
    ("wire", "grads", "", "bottom", "top"),
    ("rank", "model", "", "right", "left"),
    ("model", "use", "halogen predict / evaluate", "bottom", "top"),
]


def anchor(box, side):
    _, x, y = box[0], box[1], box[2]
    return {"top": (x + BOX_W / 2, y), "bottom": (x + BOX_W / 2, y + BOX_H), "left": (x, y + BOX_H / 2),
            "right": (x + BOX_W, y + BOX_H / 2)}[side]


def main():
    boxes = {b[0]: b for b in BOXES}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="Helvetica, Arial, sans-serif">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for name, x, y, title, lines, fill in BOXES:
        out.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" stroke="#555"/>')
        out.append(f'<text x="{x + BOX_W / 2}" y="{y + 18}" font-size="14" font-weight="bold" '
                   f'text-anchor="middle">{escape(title)}</text>')
        for i, line in enumerate(lines):
            out.append(f'<text x="{x + BOX_W / 2}" y="{y + 36 + 14 * i}" font-size="11" '
                       f'text-anchor="middle">{escape(line)}</text>')
    for src, dst, label, s_side, d_side in ARROWS:
        (x1, y1), (x2, y2) = anchor(boxes[src], s_side), anchor(boxes[dst], d_side)
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#444" stroke-width="1.5" '
                   'marker-end="url(#arrow)"/>')
        if label:
            horizontal = abs(y2 - y1) < abs(x2 - x1)
            lx, ly = ((x1 + x2) / 2, (y1 + y2) / 2 - 8) if horizontal else ((x1 + x2) / 2 + 8, (y1 + y2) / 2 + 4)
            anchor_kw = "middle" if horizontal else "start"
            out.append(f'<text x="{lx}" y="{ly}" font-size="11" font-style="italic" '
                       f'text-anchor="{anchor_kw}">{escape(label)}</text>')
    # The per-layer loop between the rank, the wire and the gradient sum.
    out.append('<text x="392" y="470" font-size="11" fill="#555" text-anchor="end">every layer, forward</text>')
    out.append('<text x="392" y="484" font-size="11" fill="#555" text-anchor="end">and backward, every epoch</text>')
    out.append(f'<text x="20" y="{H - 20}" font-size="11" fill="#777">Made by docs/dataflow.py</text>')
    out.append("</svg>")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dataflow.svg")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)
    print("wrote", path)


if __name__ == "__main__":
    main()
