#!/usr/bin/env python3
"""halogen against PyG on a multi-label graph: test F1-micro and ROC-AUC, side by side.

On one generated multi-label dataset (`halogen generate sbm --label-kind multilabel`, or
--dataset DIR), for every model (GCN and GraphSAGE by default) and seed:
  - halogen on --ranks ranks (METIS parts), fp32 synchronous exchange;
  - halogen on the same parts, 1-bit stale exchange (--mode stale --bits-fwd 1 --bits-bwd 1),
    with absolute and with residual forward codes (--halo-forward-coding residual);
  - PyG in one process (GCNConv / SAGEConv), built as docs/from-pyg-dgl.md maps halogen's
    models: the same layers, widths, dropout on every layer's input, L2-normalised input
    rows, the output bias at each label's training log-odds, Adam without weight decay (the
    multilabel task's defaults), the loss as halogen's (binary cross-entropy, each node the mean
    over its labelled entries), the same epochs.
Each run keeps the epoch of its best validation F1-micro (ties: the lower validation loss) and
reports the test F1-micro and ROC-AUC there (F1 at probability 0.5; ROC-AUC averaged over the
labels with both classes among the test nodes, as OGB scores ogbn-proteins).

Prints a table of the means over seeds and writes OUT/pyg_tasks.json. With --check it exits 1
unless, for every model, halogen's fp32 mean is within --tolerance points (default 0.5) of
PyG's in both metrics ("pyg"), and the 1-bit stale means no more than --tolerance below the fp32
mean ("stale" with absolute codes, "residual" with residual ones); --checks names which (default
all three). --stale-args adds flags to both 1-bit stale runs. Without torch and torch_geometric
it exits 77 (skipped).

PyG is never a dependency of halogen: this needs a python3 with torch and torch_geometric
(scripts/setup.sh --tests installs them).

usage: bench/pyg_tasks.py [--build build] [--out DIR] [--dataset DIR | --generate "ARGS"]
                          [--models gcn,sage] [--seeds 1,2,3,4,5] [--ranks 4] [--epochs 600]
                          [--threads 2] [--tolerance 0.5] [--check] [--checks pyg,stale,residual]
                          [--stale-args "--staleness 2"]
"""
import argparse, json, os, shlex, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The multi-label graph the comparison runs on unless told another: an SBM whose nodes belong
# to 2 of 10 communities on average, with a clear feature signal and 30% training nodes, so that
# both systems' GCN and SAGE reach their plateau within the epochs (GCN's F1-micro still climbs
# at epoch 200 and levels off near 500) and a seed changes the test figures little.
DEFAULT_GENERATE = ("sbm --label-kind multilabel --nodes 4000 --classes 10 --labels-per-node 2 --snr 0.8 "
                    "--train 0.3 --valid 0.2 --test 0.5")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def mpirun(ranks):
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe"]
    return cmd + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def read_array(directory, name, dtype, shape):
    import numpy as np
    a = np.fromfile(os.path.join(directory, name + ".bin"), dtype=dtype, offset=64)  # 64-byte header
    if a.size != int(np.prod(shape)):
        sys.exit(f"{directory}/{name}.bin: {a.size} elements, expected {shape}")
    return a.reshape(shape)


def load_graph(directory):
    """The dataset as PyG reads it: edge_index [source; target], x, y (NaN unlabelled), split."""
    import numpy as np
    import torch
    meta = json.load(open(os.path.join(directory, "meta.json")))
    if meta.get("label_kind") != "multilabel":
        sys.exit(f"{directory}: label_kind {meta.get('label_kind', 'class')!r}, expected 'multilabel'")
    n, e, f, c = (int(meta[k]) for k in ("num_nodes", "num_edges", "feature_dim", "num_classes"))
    offsets = read_array(directory, "offsets", np.int64, (n + 1,))
    sources = read_array(directory, "indices", np.int32, (e,)).astype(np.int64)
    targets = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))  # row v lists v's sources
    return {"edge_index": torch.from_numpy(np.stack([sources, targets])),
            "x": torch.from_numpy(read_array(directory, "features", np.float32, (n, f)).copy()),
            "y": torch.from_numpy(read_array(directory, "targets", np.float32, (n, c)).copy()),
            "split": torch.from_numpy(read_array(directory, "split", np.uint8, (n,)).copy())}


def f1_micro(logits, y):
    known = ~y.isnan()
    predicted, positive = (logits > 0)[known], (y == 1)[known]
    tp = (predicted & positive).sum().item()
    den = 2 * tp + (predicted & ~positive).sum().item() + (~predicted & positive).sum().item()
    return 2 * tp / den if den else 0.0


def roc_auc(logits, y):
    """Mean over the labels with both classes of the share of (positive, negative) pairs ordered
    right, ties counting one half (sklearn's roc_auc_score per label)."""
    import torch
    scores = []
    for j in range(y.shape[1]):
        known = ~y[:, j].isnan()
        s, t = logits[known, j].double(), y[known, j]
        pos, neg = int((t == 1).sum()), int((t == 0).sum())
        if pos == 0 or neg == 0:
            continue
        # Average ranks of the scores (ties share their mean rank), then Mann-Whitney's U.
        order = torch.argsort(s)
        ranks = torch.empty_like(s)
        ranks[order] = torch.arange(1, s.numel() + 1, dtype=torch.float64)
        uniq, inverse = torch.unique(s, return_inverse=True)
        sums = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inverse, ranks)
        counts = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inverse, torch.ones_like(ranks))
        mean_rank = (sums / counts)[inverse]
        u = mean_rank[t == 1].sum().item() - pos * (pos + 1) / 2
        scores.append(u / (pos * neg))
    return sum(scores) / len(scores) if scores else 0.0


def node_bce(logits, y, rows):
    """halogen's loss over `rows`: each node's binary cross-entropy averaged over its labelled
    entries, summed over the nodes and divided by the number of nodes in `rows`."""
    import torch
    import torch.nn.functional as F
    z, t = logits[rows], y[rows]
    known = ~t.isnan()
    entries = F.binary_cross_entropy_with_logits(z, torch.where(known, t, torch.zeros_like(t)), reduction="none")
    per_node = (entries * known).sum(1) / known.sum(1).clamp(min=1)
    return per_node.sum() / max(int(rows.sum()), 1)


def pyg_run(g, model_name, seed, epochs, hidden=64, lr=0.01, weight_decay=0.0, dropout=0.5):
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv, SAGEConv
    torch.manual_seed(seed)
    x = F.normalize(g["x"], p=2, dim=1)  # halogen's default --feature-norm l2
    y, split, edge_index = g["y"], g["split"], g["edge_index"]
    train, valid, test = split == 1, split == 2, split == 3
    conv = {"gcn": GCNConv, "sage": SAGEConv}[model_name]
    layers = torch.nn.ModuleList([conv(x.shape[1], hidden), conv(hidden, y.shape[1])])
    # Glorot-uniform weights and zero biases, as halogen initialises every layer: GCNConv's
    # default already; SAGEConv's linear layers default to Kaiming's, so they are drawn again.
    if model_name == "sage":
        for name, param in layers.named_parameters():
            if name.endswith("bias"):
                torch.nn.init.zeros_(param)
            else:
                torch.nn.init.xavier_uniform_(param)

    # halogen's multilabel task starts the output bias at each label's log-odds over the labelled
    # training entries, (positives + 1/2) / (labelled + 1), and trains without weight decay.
    with torch.no_grad():
        t = y[train]
        known = ~t.isnan()
        positives = torch.where(known, t, torch.zeros_like(t)).sum(0).double()
        p = (positives + 0.5) / (known.sum(0).double() + 1.0)
        prior = torch.where(known.sum(0) > 0, torch.log(p / (1 - p)), torch.zeros_like(p))
        # GCNConv holds it as `bias`, SAGEConv as `lin_l.bias`: the output layer's one bias.
        (bias,) = [p for n, p in layers[-1].named_parameters() if n.endswith("bias")]
        bias.copy_(prior.float())

    def forward(training):
        h = x
        for i, layer in enumerate(layers):
            h = F.dropout(h, p=dropout, training=training)
            h = layer(h, edge_index)
            if i + 1 < len(layers):
                h = h.relu()
        return h

    # Decay (none by default, as halogen's multilabel task) on the weights, not the biases.
    decayed = [p for n, p in layers.named_parameters() if not n.endswith("bias")]
    biases = [p for n, p in layers.named_parameters() if n.endswith("bias")]
    opt = torch.optim.Adam([{"params": decayed, "weight_decay": weight_decay},
                            {"params": biases, "weight_decay": 0.0}], lr=lr)
    best = None
    for epoch in range(epochs):
        layers.train()
        opt.zero_grad()
        node_bce(forward(True), y, train).backward()
        opt.step()
        layers.eval()
        with torch.no_grad():
            z = forward(False)
            val_f1, val_loss = f1_micro(z[valid], y[valid]), node_bce(z, y, valid).item()
            if best is None or val_f1 > best[0] or (val_f1 == best[0] and val_loss < best[1]):
                best = (val_f1, val_loss, epoch, z[test].clone())
    z_test = best[3]
    return {"best_epoch": best[2], "val_f1_micro": best[0], "test_f1_micro": f1_micro(z_test, y[test]),
            "test_roc_auc": roc_auc(z_test, y[test])}


# halogen's runs: the flags each adds to `halogen train`.
HALOGEN_SYSTEMS = {
    "halogen-fp32-sync": [],
    "halogen-1bit-stale": ["--mode", "stale", "--bits-fwd", "1", "--bits-bwd", "1"],
    "halogen-1bit-stale-residual": ["--mode", "stale", "--bits-fwd", "1", "--bits-bwd", "1", "--halo-forward-coding",
                                    "residual"],
}
SYSTEMS = ("pyg", *HALOGEN_SYSTEMS)


def halogen_run(a, parts, model_name, seed, system, metrics):
    cmd = mpirun(a.ranks) + [a.halogen, "train", "--parts", parts, "--model", model_name, "--seed", str(seed),
                             "--epochs", str(a.epochs), "--patience", "0", "--metrics", metrics, "--overwrite",
                             "--quiet", *HALOGEN_SYSTEMS[system]]
    if system != "halogen-fp32-sync":
        cmd += shlex.split(a.stale_args)
    sh(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"))
    lines = [json.loads(line) for line in open(metrics)]
    summary = lines[-1]
    best = summary["best_epoch"]
    record = next(r for r in lines if r.get("epoch") == best and "val_f1_micro" in r)
    return {"best_epoch": best, "val_f1_micro": summary["best_val_f1_micro"],
            "test_f1_micro": summary["test_f1_micro_at_best_val"], "test_roc_auc": record["test_roc_auc"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=None)
    p.add_argument("--dataset", default=None)
    p.add_argument("--generate", default=DEFAULT_GENERATE)
    p.add_argument("--models", default="gcn,sage")
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--epochs", type=int, default=600)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tolerance", type=float, default=0.5, help="points (of 100)")
    p.add_argument("--check", action="store_true")
    p.add_argument("--checks", default="pyg,stale,residual")
    p.add_argument("--stale-args", default="", help='more flags for the 1-bit stale runs, e.g. '
                   '"--staleness 2"')
    a = p.parse_args()
    try:
        import torch
        import torch_geometric  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e} (scripts/setup.sh --tests installs torch and torch_geometric)")
        sys.exit(77)
    torch.set_num_threads(a.threads)
    a.halogen = os.path.join(a.build, "halogen")
    out = a.out or os.path.join(a.build, "pyg-tasks")
    os.makedirs(out, exist_ok=True)
    data = a.dataset
    if data is None:
        data = os.path.join(out, "data")
        sh([a.halogen, "generate"] + shlex.split(a.generate) + ["--out", data, "--overwrite"])
    parts = os.path.join(out, f"parts-{a.ranks}")
    sh([a.halogen, "partition", data, "--parts", str(a.ranks), "--out", parts, "--overwrite"])
    g = load_graph(data)
    seeds = [int(s) for s in a.seeds.split(",")]
    runs = []
    for model_name in a.models.split(","):
        for seed in seeds:
            for system in (*HALOGEN_SYSTEMS, "pyg"):
                t0 = time.time()
                if system == "pyg":
                    r = pyg_run(g, model_name, seed, a.epochs)
                else:
                    r = halogen_run(a, parts, model_name, seed, system,
                                    os.path.join(out, f"{model_name}-{system}-{seed}.jsonl"))
                r.update(model=model_name, system=system, seed=seed, seconds=time.time() - t0)
                print(json.dumps(r), flush=True)
                runs.append(r)
    mean = lambda m, s, k: sum(r[k] for r in runs if r["model"] == m and r["system"] == s) / len(seeds)
    print(f"\n{'model':6} {'system':28} {'test F1-micro':>14} {'test ROC-AUC':>13}   (means over {len(seeds)} seeds)")
    failures = []
    for m in a.models.split(","):
        for s in SYSTEMS:
            print(f"{m:6} {s:28} {100 * mean(m, s, 'test_f1_micro'):14.2f} {100 * mean(m, s, 'test_roc_auc'):13.2f}")
        for k in ("test_f1_micro", "test_roc_auc"):
            for check, s, ref in (("pyg", "halogen-fp32-sync", "pyg"),
                                  ("stale", "halogen-1bit-stale", "halogen-fp32-sync"),
                                  ("residual", "halogen-1bit-stale-residual", "halogen-fp32-sync")):
                if check not in a.checks.split(","):
                    continue
                d = 100 * (mean(m, s, k) - mean(m, ref, k))
                # halogen reproduces PyG both ways; 1-bit codes must not cost more than the tolerance.
                if (abs(d) if check == "pyg" else -d) > a.tolerance:
                    failures.append(f"{m} {k}: {s} {d:+.2f} points from {ref} (tolerance {a.tolerance})")
    json.dump({"dataset": data, "ranks": a.ranks, "epochs": a.epochs, "seeds": seeds, "runs": runs},
              open(os.path.join(out, "pyg_tasks.json"), "w"), indent=1)
    for f in failures:
        print("FAIL", f)
    if a.check and failures:
        sys.exit(1)
    print("within tolerance" if not failures else f"{len(failures)} differences beyond tolerance")


if __name__ == "__main__":
    main()
