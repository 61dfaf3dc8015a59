#!/usr/bin/env python3
"""The PyG side of bench/gpu_suite.py: one model trained for a few steps on one device, on a
dataset written by `halogen generate` (the same arrays halogen trains on), printing one JSON
line with every step's time and the peak of torch's allocator.

PyG's fastest full-graph path is used: the adjacency as a torch sparse CSR tensor (`adj_t`,
one sparse-dense product per layer and direction), normalised once before training:
- GCN: GCNConv(normalize=False) on D^-1/2 (A + I) D^-1/2, which is what GCNConv(cached=True)
  computes on its first call;
- GraphSAGE: SAGEConv(aggr="sum") on D^-1 A, the mean of the neighbours in one product (a
  mean reduction would run the same product and then divide);
- GAT: GATConv on `edge_index` (attention needs one score per edge, so it has no adj_t path).

fp16 runs under torch.autocast with a GradScaler; the features and the adjacency are stored
in fp16, as halogen stores them, since autocast does not cast sparse operands.

usage: gpu_pyg.py --dataset DIR --model gcn|sage|gat [--layers 2] [--hidden 256] [--heads 8]
                  [--precision fp32|fp16] [--epochs 8] [--device cuda|cpu]
"""
import argparse, json, os, statistics, sys, time

from pyg_compare import read_array  # halogen's array files, read as pyg_compare.py reads them


def load(dataset, device):
    import numpy as np
    import torch
    offsets = torch.from_numpy(read_array(os.path.join(dataset, "offsets.bin"), np.int64).copy())
    indices = torch.from_numpy(read_array(os.path.join(dataset, "indices.bin"), np.int32).astype(np.int64))
    n = offsets.numel() - 1
    x = torch.from_numpy(read_array(os.path.join(dataset, "features.bin"), np.float32).copy()).view(n, -1)
    y = torch.from_numpy(read_array(os.path.join(dataset, "labels.bin"), np.int32).astype(np.int64))
    split = torch.from_numpy(read_array(os.path.join(dataset, "split.bin"), np.uint8).copy())
    return (offsets.to(device), indices.to(device), x.to(device), y.to(device), (split == 0).to(device))


def adjacency(kind, offsets, indices, dtype):
    """Rows are destinations (halogen's CSR lists in-neighbours), so the CSR is PyG's adj_t."""
    import torch
    n = offsets.numel() - 1
    deg = (offsets[1:] - offsets[:-1]).to(torch.float32)
    rows = torch.repeat_interleave(torch.arange(n, device=offsets.device), offsets[1:] - offsets[:-1])
    if kind == "gcn":
        loops = torch.arange(n, device=offsets.device)
        rows, cols = torch.cat([rows, loops]), torch.cat([indices, loops])
        dinv = (deg + 1).rsqrt()
        values = dinv[rows] * dinv[cols]
        coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, (n, n)).coalesce()
        adj = coo.to_sparse_csr()
    else:  # mean of the neighbours
        values = (1.0 / deg.clamp(min=1))[rows]
        adj = torch.sparse_csr_tensor(offsets, indices, values, size=(n, n))
    return adj.to(dtype)


def build_model(args, in_dim, classes):
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            convs = []
            if args.model == "gat":
                dims = [in_dim] + [args.hidden * args.heads] * (args.layers - 1)
                for i in range(args.layers - 1):
                    convs.append(GATConv(dims[i], args.hidden, heads=args.heads, dropout=0.5))
                convs.append(GATConv(dims[-1], classes, heads=1, concat=False, dropout=0.5))
            else:
                dims = [in_dim] + [args.hidden] * (args.layers - 1) + [classes]
                for i in range(args.layers):
                    if args.model == "gcn":
                        convs.append(GCNConv(dims[i], dims[i + 1], normalize=False))
                    else:
                        convs.append(SAGEConv(dims[i], dims[i + 1], aggr="sum"))
            self.convs = torch.nn.ModuleList(convs)

        def forward(self, x, graph):
            for i, conv in enumerate(self.convs):
                x = F.dropout(x, p=0.5, training=self.training)
                if args.precision == "fp16":
                    x = x.half()  # sparse products take no autocast: both operands in fp16
                x = conv(x, graph)
                if i + 1 < len(self.convs):
                    x = F.elu(x) if args.model == "gat" else F.relu(x)
            return x

    return Net()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", choices=["gcn", "sage", "gat"], required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256, help="hidden width (gat: per head)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--precision", choices=["fp32", "fp16"], default="fp32")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    torch.manual_seed(1)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    offsets, indices, x, y, train_mask = load(args.dataset, device)
    classes = int(y.max()) + 1
    half = args.precision == "fp16"
    if args.model == "gat":
        rows = torch.repeat_interleave(torch.arange(offsets.numel() - 1, device=device), offsets[1:] - offsets[:-1])
        graph = torch.stack([indices, rows])  # edge_index: [source, destination]
        path = "edge_index"
    else:
        graph = adjacency(args.model, offsets, indices, torch.float16 if half else torch.float32)
        path = "adj_t"
    del offsets, indices
    if half:
        x = x.half()
    model = build_model(args, x.size(1), classes).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    scaler = torch.amp.GradScaler(args.device, enabled=half)
    times = []
    for _ in range(args.epochs):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=half):
            out = model(x, graph)
            loss = F.cross_entropy(out[train_mask].float(), y[train_mask])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) if cuda else 0
    print(json.dumps({"system": "pyg", "path": path, "model": args.model, "layers": args.layers,
                      "precision": args.precision, "step_s": times, "median_step_s": statistics.median(times[1:]),
                      "peak_bytes": peak, "loss": float(loss), "torch": torch.__version__,
                      "pyg": __import__("torch_geometric").__version__}))


if __name__ == "__main__":
    sys.exit(main())
