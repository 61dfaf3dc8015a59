#!/usr/bin/env python3
"""Writes a halogen dataset directory in other input formats, for the conversion benchmarks:
OGB's raw node-property layout (gzip CSV: edges, features with 9 significant digits, which
read back to the same float32, labels, and the split as scheme "rmat"), and with --metis FILE
the structure as a METIS .graph file (every stored entry listed at its row, 1-based).

usage: bench/export_inputs.py DATASET OGB_DIR [--metis FILE]   (NumPy only)
"""
import argparse, gzip, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import numpy as np
import halogen_npz


def export_ogb(ds, d):
    os.makedirs(f"{d}/raw")
    os.makedirs(f"{d}/split/rmat")
    offsets, indices, features = ds["offsets"], ds["indices"], ds["features"]
    n, e = features.shape[0], indices.shape[0]
    with open(f"{d}/raw/num-node-list.csv", "w") as f:
        f.write(f"{n}\n")
    with open(f"{d}/raw/num-edge-list.csv", "w") as f:
        f.write(f"{e}\n")
    step = 1 << 20
    with gzip.open(f"{d}/raw/edge.csv.gz", "wt", compresslevel=6) as f:
        for e0 in range(0, e, step):  # entry u in CSR row v: the edge u -> v
            src = indices[e0:e0 + step].tolist()
            dst = halogen_npz.csr_destinations(offsets, e0, min(e, e0 + step)).tolist()
            f.write("".join(f"{u},{v}\n" for u, v in zip(src, dst)))
    if features.shape[1]:
        fmt = ",".join(["%.9g"] * features.shape[1]) + "\n"
        with gzip.open(f"{d}/raw/node-feat.csv.gz", "wt", compresslevel=6) as f:
            for r0 in range(0, n, 1 << 14):
                f.write("".join(fmt % tuple(row) for row in np.asarray(features[r0:r0 + (1 << 14)]).tolist()))
    with gzip.open(f"{d}/raw/node-label.csv.gz", "wt", compresslevel=6) as f:
        f.write("".join(f"{v}\n" for v in np.asarray(ds["labels"]).tolist()))
    split = np.asarray(ds["split"])
    for file, role in (("train", halogen_npz.SPLIT_TRAIN), ("valid", halogen_npz.SPLIT_VALID), ("test", halogen_npz.SPLIT_TEST)):
        with gzip.open(f"{d}/split/rmat/{file}.csv.gz", "wt", compresslevel=6) as f:
            f.write("".join(f"{v}\n" for v in np.flatnonzero(split == role).tolist()))


def export_metis(ds, path):
    offsets, indices = np.asarray(ds["offsets"]), ds["indices"]
    n, e = offsets.shape[0] - 1, indices.shape[0]
    with open(path, "w") as f:
        f.write(f"{n} {e // 2}\n")
        step = 1 << 14
        for v0 in range(0, n, step):
            v1 = min(n, v0 + step)
            cols = (np.asarray(indices[offsets[v0]:offsets[v1]]) + 1).tolist()
            rows = []
            for v in range(v0, v1):
                a, b = offsets[v] - offsets[v0], offsets[v + 1] - offsets[v0]
                rows.append(" ".join(map(str, cols[a:b])))
            f.write("\n".join(rows) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("ogb_dir")
    ap.add_argument("--metis", default=None)
    args = ap.parse_args()
    ds = halogen_npz.open_halogen_dataset(args.dataset)
    export_ogb(ds, args.ogb_dir)
    if args.metis:
        export_metis(ds, args.metis)


if __name__ == "__main__":
    main()
