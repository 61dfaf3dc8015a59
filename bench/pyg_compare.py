#!/usr/bin/env python3
"""halogen against PyG on one process, side by side, on the same generated graph.

Generates an RMAT graph with `halogen generate` (128 dense random features), writes one
shard (`halogen partition --parts 1`, the default node order), then for every model and
hidden size runs, alternating, `--rounds` times each: halogen (1 rank), PyG with
`edge_index` (message passing with scatter) and PyG with the adjacency as a torch sparse CSR
tensor (`adj_t`, a sparse-dense product), each in its own process with the same thread count
(OMP_NUM_THREADS and torch.set_num_threads). Prints per configuration: system, median epoch
time over every timed epoch of every round (the training step only: forward, loss, backward,
optimizer step; the first epoch of each run warms up and is dropped) and the peak resident
memory of the process (the maximum over rounds).

PyG is never a dependency of halogen: the script creates its own virtual environment
(default build/pyg-venv) and installs torch and torch_geometric there from PyPI by name, when
a PyG system is asked for.

`--baseline PATH` adds the system `baseline`: another halogen executable (a build of an
earlier commit) run the same way, alternating with this one, to measure a change side by
side: `--systems halogen,baseline --baseline /tmp/old/halogen` needs no PyG.

usage: bench/pyg_compare.py [--build build] [--venv build/pyg-venv] [--scale 18]
                            [--edge-factor 16] [--models gcn,sage] [--hidden 64,256]
                            [--epochs 6] [--rounds 3] [--threads 2] [--out DIR]
                            [--systems halogen,pyg-edge_index,pyg-adj_t,baseline] [--baseline PATH]
"""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---------------------------------------------------------------------------------------
# Worker: one PyG run, inside the virtual environment.
# ---------------------------------------------------------------------------------------

def read_array(path, dtype):
    import numpy as np
    return np.fromfile(path, dtype=dtype, offset=64)  # halogen array files: 64-byte header


def pyg_worker(args):
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv, SAGEConv
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    d = args.dataset
    offsets = torch.from_numpy(read_array(os.path.join(d, "offsets.bin"), np.int64).copy())
    indices = torch.from_numpy(read_array(os.path.join(d, "indices.bin"), np.int32).astype(np.int64))
    n = offsets.numel() - 1
    x = torch.from_numpy(read_array(os.path.join(d, "features.bin"), np.float32).copy()).view(n, -1)
    y = torch.from_numpy(read_array(os.path.join(d, "labels.bin"), np.int32).astype(np.int64))
    split = torch.from_numpy(read_array(os.path.join(d, "split.bin"), np.uint8).copy())
    train_mask = split == 0
    classes = int(y.max()) + 1
    # Rows list in-neighbours (rows = destinations): row r's entries are the sources of r.
    if args.path == "adj_t":
        graph = torch.sparse_csr_tensor(offsets, indices, torch.ones(indices.numel()), size=(n, n))
    else:
        rows = torch.repeat_interleave(torch.arange(n), offsets[1:] - offsets[:-1])
        graph = torch.stack([indices, rows])  # edge_index: [source, destination]
    del offsets, indices

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if args.model == "gcn":
                self.c1 = GCNConv(x.size(1), args.hidden, cached=True)
                self.c2 = GCNConv(args.hidden, classes, cached=True)
            else:
                self.c1 = SAGEConv(x.size(1), args.hidden, aggr="mean")
                self.c2 = SAGEConv(args.hidden, classes, aggr="mean")

        def forward(self, x, g):
            x = F.dropout(x, p=0.5, training=self.training)
            x = F.relu(self.c1(x, g))
            x = F.dropout(x, p=0.5, training=self.training)
            return self.c2(x, g)

    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    times = []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        out = model(x, graph)
        loss = F.cross_entropy(out[train_mask], y[train_mask])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"epoch_s": times, "peak_bytes": peak, "loss": float(loss),
                      "torch": torch.__version__, "pyg": __import__("torch_geometric").__version__}))


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------

def run(cmd, env=None, capture=True):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return r.stdout


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import torch_geometric, torch, numpy"],
                                             capture_output=True).returncode == 0:
        return py
    print(f"creating {venv} and installing torch, torch_geometric and numpy from PyPI ...", file=sys.stderr)
    run([sys.executable, "-m", "venv", venv])
    run([py, "-m", "pip", "install", "-q", "torch", "torch_geometric", "numpy"], capture=False)
    return py


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dataset", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--venv", default=None, help="virtual environment for PyG (default BUILD/pyg-venv)")
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--models", default="gcn,sage")
    ap.add_argument("--hidden", default="64,256")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--systems", default="halogen,pyg-edge_index,pyg-adj_t")
    ap.add_argument("--out", default=None)
    ap.add_argument("--baseline", default=None, help="another halogen executable, the system 'baseline'")
    args = ap.parse_args()
    if args.worker:
        args.hidden = int(args.hidden)
        return pyg_worker(args)

    halogen = os.path.join(args.build, "halogen")
    systems = args.systems.split(",")
    if "baseline" in systems and not args.baseline:
        sys.exit("the system 'baseline' needs --baseline PATH (a halogen executable)")
    executables = {"halogen": halogen, "baseline": args.baseline}
    venv = args.venv or os.path.join(args.build, "pyg-venv")
    py = ensure_venv(venv) if any(s.startswith("pyg") for s in systems) else None
    out = args.out or tempfile.mkdtemp(prefix="pyg_compare.")
    os.makedirs(out, exist_ok=True)
    ds = os.path.join(out, f"rmat{args.scale}")
    if not os.path.isdir(ds):
        run([halogen, "generate", "rmat", "--scale", str(args.scale), "--edge-factor", str(args.edge_factor),
             "--feature-dim", "128", "--out", ds])
    parts = os.path.join(out, f"rmat{args.scale}-1")
    if not os.path.isdir(parts):
        run([halogen, "partition", ds, "--parts", "1", "--out", parts])
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))

    def one(system, model, hidden, tag):
        if system in executables:
            metrics = os.path.join(out, f"{tag}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            # Evaluation only after the last epoch, which is then not counted.
            run([executables[system], "train", "--parts", parts, "--model", model, "--hidden", str(hidden), "--dropout", "0.5",
                 "--epochs", str(args.epochs + 1), "--eval-every", str(args.epochs + 1), "-q", "--metrics", metrics],
                env=env)
            recs = [json.loads(l) for l in open(metrics)]
            eps = [r for r in recs if "summary" not in r][1:-1]
            summary = [r for r in recs if "summary" in r][0]
            return [r["compute_s"] for r in eps], summary["peak_rss_bytes"]
        path = system.split("-", 1)[1]
        res = json.loads(run([py, os.path.abspath(__file__), "--worker", "--dataset", ds, "--path", path, "--model", model,
                              "--hidden", str(hidden), "--epochs", str(args.epochs), "--threads", str(args.threads)],
                             env=env).strip().splitlines()[-1])
        one.versions = f"torch {res['torch']}, torch_geometric {res['pyg']}"
        return res["epoch_s"][1:], res["peak_bytes"]
    one.versions = ""

    nodes = os.path.getsize(os.path.join(ds, "offsets.bin")) // 8 - 9
    entries = (os.path.getsize(os.path.join(ds, "indices.bin")) - 64) // 4
    print(f"RMAT scale {args.scale}, edge factor {args.edge_factor}: {nodes} nodes, {entries // 2} undirected edges, "
          f"128 features; {args.threads} threads each, {args.rounds} alternating rounds of {args.epochs} timed epochs")
    for model in args.models.split(","):
        for hidden in [int(h) for h in args.hidden.split(",")]:
            times = {s: [] for s in systems}
            peaks = {s: 0 for s in systems}
            for rnd in range(args.rounds):
                order = systems[rnd % len(systems):] + systems[:rnd % len(systems)]  # rotate who goes first
                for s in order:
                    t, p = one(s, model, hidden, f"{s}-{model}-{hidden}-{rnd}")
                    times[s] += t
                    peaks[s] = max(peaks[s], p)
            print(f"\n{model.upper()}, 2 layers, hidden {hidden}  ({one.versions})")
            print("| system | median epoch s | peak memory GB |")
            print("|---|---|---|")
            med = {s: statistics.median(times[s]) for s in systems}
            for s in systems:
                print(f"| {s} | {med[s]:.3f} | {peaks[s] / 1e9:.2f} |")
            pyg = [s for s in systems if s.startswith("pyg")]
            if "halogen" in systems and pyg:
                best = min(pyg, key=lambda s: med[s])
                print(f"halogen vs fastest PyG ({best}): {med[best] / med['halogen']:.2f}x faster, "
                      f"{peaks[best] / peaks['halogen']:.2f}x less memory")
            if "halogen" in systems and "baseline" in systems:
                print(f"halogen vs baseline: median epoch {med['baseline'] / med['halogen']:.3f}x faster, "
                      f"peak memory {peaks['baseline'] / peaks['halogen']:.3f}x less")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
