#!/usr/bin/env python3
"""Accuracy of halogen on the shared real datasets with its DEFAULT options: test accuracy at
the best-validation epoch over seeds, 4 ranks on one METIS partition per dataset. No setting is
chosen per dataset: every run is `halogen train --parts P --seed S` plus the configuration's own
flags (model, bits, mode), so the table shows what a new user gets.

For each model (GCN, GraphSAGE, GAT with 2 layers; the deep GCNII and APPNP with their
published depth) it runs fp32 synchronous training and 1-bit stale training (`--bits-fwd 1
--bits-bwd 1 --mode stale`, the adaptive staleness policy), and checks the targets:
  - 1-bit stale within 0.5 points of fp32 sync on the mean (the 4-layer GAT: 1 point), and no
    seed more than 2 points below fp32 sync's worst seed;
  - fp32 sync within 1 point of the published accuracy for GCN (Kipf & Welling, Shchur et al.),
    within 1.5 points for GCNII and APPNP on the Planetoid split (GCNII paper, Table 2).
Further configurations (8-bit, 1-bit synchronous, PowerSGD gradients, the 4-layer GAT on
Amazon-Photo, the fixed stale policy) run when named with --configs.

Every finished run is appended to OUT/accuracy-runs.csv and reused, so an interrupted sweep
continues where it stopped (delete the file to start over). Prints a markdown table and writes
OUT/accuracy.md.

Runs are taken seed by seed (every dataset and configuration of seed 1, then of seed 2, ...), so
a sweep cut short still fills every cell with its first seeds. --jobs N runs N of them at once
(each its own mpirun of --ranks processes): for a host with more cores than the ranks need.
--train-args adds flags to every run, e.g. "--device cuda --comm mpi" with HALOGEN_DEVICE=0 for
ranks sharing one GPU. The CPU and GPU paths train the same model to rounding (the GPU sums
in another order): short runs give the same epochs and accuracies, but over hundreds of epochs
of a deep model the rounding moves the best-validation epoch, so a seed's accuracy can differ
between them (docs/accuracy.md, GCNII): their runs are seeds of the same distribution, not
copies of each other.

usage: bench/accuracy.py [--build build] [--ranks 4] [--seeds 10] [--datasets cora,...]
                         [--configs "gcn fp32 sync,gcn 1-bit stale"] [--out DIR] [--report]
                         [--jobs 1] [--train-args "--device cuda --comm mpi"]
"""
import argparse, concurrent.futures, csv, json, os, shlex, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DATASETS = ["cora", "citeseer", "amazon-photo", "coauthor-cs"]
PUBLISHED_GCN = {"cora": 81.5, "citeseer": 70.3, "amazon-photo": 91.2, "coauthor-cs": 91.1}
# (configuration, published accuracy by dataset, how far below it fp32 sync may be)
PUBLISHED = {"gcn fp32 sync": (PUBLISHED_GCN, 1.0),
             "gcnii fp32 sync": ({"cora": 85.5, "citeseer": 73.4}, 1.5),
             "appnp fp32 sync": ({"cora": 83.3, "citeseer": 71.8}, 1.5)}
STALE_1BIT = ["--bits-fwd", "1", "--bits-bwd", "1", "--mode", "stale"]
# (label, flags, datasets it runs on: None = all, default: part of the default sweep)
CONFIGS = [
    ("gcn fp32 sync", ["--model", "gcn"], None, True),
    ("gcn 1-bit stale", ["--model", "gcn", *STALE_1BIT], None, True),
    ("sage fp32 sync", ["--model", "sage"], None, True),
    ("sage 1-bit stale", ["--model", "sage", *STALE_1BIT], None, True),
    ("gat fp32 sync", ["--model", "gat"], None, True),
    ("gat 1-bit stale", ["--model", "gat", *STALE_1BIT], None, True),
    ("gat4 fp32 sync", ["--model", "gat", "--layers", "4"], ["amazon-photo"], True),
    ("gat4 1-bit stale", ["--model", "gat", "--layers", "4", *STALE_1BIT], ["amazon-photo"], True),
    ("appnp fp32 sync", ["--model", "appnp"], None, True),
    ("appnp 1-bit stale", ["--model", "appnp", *STALE_1BIT], None, True),
    ("gcnii fp32 sync", ["--model", "gcnii"], None, True),
    ("gcnii 1-bit stale", ["--model", "gcnii", *STALE_1BIT], None, True),
    # 1-bit features with 4-bit halo gradients (stochastic codes, no error feedback).
    ("gcnii 1/4-bit stale", ["--model", "gcnii", "--bits-fwd", "1", "--bits-bwd", "4", "--mode", "stale"], None, False),
    # What the 64-layer model does without error feedback on its 1-bit halo gradients.
    ("gcnii 1-bit stale feedback off", ["--model", "gcnii", *STALE_1BIT, "--halo-error-feedback", "off"], None, False),
    # On request only.
    ("gcn 8-bit sync", ["--model", "gcn", "--bits-fwd", "8", "--bits-bwd", "8"], None, False),
    ("gcn 1-bit sync", ["--model", "gcn", "--bits-fwd", "1", "--bits-bwd", "1"], None, False),
    ("gat 1-bit sync", ["--model", "gat", "--bits-fwd", "1", "--bits-bwd", "1"], None, False),
    ("gat 2-bit sync", ["--model", "gat", "--bits-fwd", "2", "--bits-bwd", "2"], None, False),
    ("gat fp32 stale", ["--model", "gat", "--mode", "stale"], None, False),
    ("gat 1-bit stale bound 0.1", ["--model", "gat", *STALE_1BIT, "--stale-error-bound", "0.1"], None, False),
    ("gat 1-bit always stale", ["--model", "gat", *STALE_1BIT, "--stale-policy", "fixed", "--sync-every", "0"], None, False),
    ("gcn 1-bit stale fixed", ["--model", "gcn", *STALE_1BIT, "--stale-policy", "fixed"], None, False),
    ("gcn fp32 sync powersgd r4", ["--model", "gcn", "--grad-compression", "powersgd", "--grad-rank", "4"], None, False),
    ("gcn fp32 sync bf16 inputs", ["--model", "gcn", "--input-storage", "bf16"], None, False),
    ("sage fp32 sync bf16 inputs", ["--model", "sage", "--input-storage", "bf16"], None, False),
]
# Which synchronous fp32 row each stale row is judged against.
REFERENCE = {"gcn 1-bit stale": "gcn fp32 sync", "sage 1-bit stale": "sage fp32 sync",
             "gat 1-bit stale": "gat fp32 sync", "gat4 1-bit stale": "gat4 fp32 sync",
             "appnp 1-bit stale": "appnp fp32 sync", "gcnii 1-bit stale": "gcnii fp32 sync",
             "gcnii 1/4-bit stale": "gcnii fp32 sync",
             "gcn 1-bit stale fixed": "gcn fp32 sync", "gat 1-bit sync": "gat fp32 sync",
             "gat 2-bit sync": "gat fp32 sync", "gat fp32 stale": "gat fp32 sync",
             "gat 1-bit stale bound 0.1": "gat fp32 sync", "gat 1-bit always stale": "gat fp32 sync",
             # PowerSGD (rank 4, the default --grad-rank) against exact gradients.
             "gcn fp32 sync powersgd r4": "gcn fp32 sync",
             # bf16 storage of the layer-0 inputs against fp32 storage.
             "gcn fp32 sync bf16 inputs": "gcn fp32 sync", "sage fp32 sync bf16 inputs": "sage fp32 sync"}


def mpi_flags():
    flags = ["--oversubscribe"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return flags


def load_runs(path):
    runs = {}
    if os.path.exists(path):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                runs[(r["dataset"], r["config"], int(r["seed"]))] = r
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.environ.get("HALOGEN_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--configs", default="", help="comma-separated config names (default: the default sweep)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--report", action="store_true", help="only print the table of the runs already in OUT")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, each an mpirun of --ranks processes")
    ap.add_argument("--train-args", default="", help="flags added to every halogen train run")
    args = ap.parse_args()
    halogen = os.path.join(args.build, "halogen")
    os.makedirs(args.out, exist_ok=True)
    wanted = args.configs.split(",") if args.configs else None
    configs = [c for c in CONFIGS if (c[0] in wanted if wanted else c[3])]
    runs_path = os.path.join(args.out, "accuracy-runs.csv")
    runs = load_runs(runs_path)
    fields = ["dataset", "config", "seed", "test_acc", "best_epoch", "epochs_run", "sync_share", "seconds"]
    new_file = not os.path.exists(runs_path)
    log = open(runs_path, "a", newline="")
    writer = csv.DictWriter(log, fieldnames=fields)
    if new_file:
        writer.writeheader()
    work = tempfile.mkdtemp(prefix="halogen-accuracy-")
    datasets = args.datasets.split(",")
    extra = shlex.split(args.train_args)
    pending = [(name, label, flags, seed) for seed in range(1, args.seeds + 1) for name in datasets
               for label, flags, only, _ in configs
               if (only is None or name in only) and (name, label, seed) not in runs and not args.report]

    def parts_of(name):
        parts = os.path.join(work, f"{name}-{args.ranks}")
        if not os.path.exists(parts):
            subprocess.run([halogen, "partition", os.path.join(args.data, name), "--parts", str(args.ranks),
                            "--out", parts], check=True, stdout=subprocess.DEVNULL)
        return parts

    def train(task):
        name, label, flags, seed = task
        metrics = os.path.join(work, f"{name}-{label.replace(' ', '_').replace('/', '_')}-{seed}.jsonl")
        cmd = ["mpirun", "-np", str(args.ranks), *mpi_flags(), halogen, "train", "--parts", parts_of(name),
               "--seed", str(seed), "--metrics", metrics, "-q", *flags, *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        records = [json.loads(l) for l in open(metrics)]
        summary = records[-1]
        epochs = [r for r in records if "summary" not in r]
        return dict(dataset=name, config=label, seed=seed,
                    test_acc=f"{100.0 * summary['test_acc_at_best_val']:.2f}", best_epoch=summary["best_epoch"],
                    epochs_run=len(epochs), sync_share=f"{sum(r['sync'] for r in epochs) / len(epochs):.3f}",
                    seconds=f"{summary['total_s']:.1f}")

    for name in {t[0] for t in pending}:  # partitions first: concurrent runs share them
        parts_of(name)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        # Each finished run is written at once, so a sweep cut short keeps every run it finished.
        for done in concurrent.futures.as_completed([pool.submit(train, t) for t in pending]):
            row = done.result()
            writer.writerow(row)
            log.flush()
            runs[(row["dataset"], row["config"], row["seed"])] = row
            print(f"{row['dataset']:13s} {row['config']:26s} seed {row['seed']:2d}  {row['test_acc']}  "
                  f"(sync epochs {row['sync_share']})", flush=True)
    log.close()

    # The table: mean ± sd (min), sync share for stale rows, and the targets.
    def accs(name, label):
        return [float(runs[(name, label, s)]["test_acc"]) for s in range(1, args.seeds + 1) if (name, label, s) in runs]

    lines = [f"| configuration | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
    verdicts = []
    for label, flags, only, _ in configs:
        cells = []
        for name in datasets:
            a = accs(name, label)
            if not a:
                cells.append("–")
                continue
            sd = statistics.stdev(a) if len(a) > 1 else 0.0
            cell = f"{statistics.mean(a):.1f} ± {sd:.1f} (min {min(a):.1f}, n={len(a)})"
            if "stale" in label:
                share = statistics.mean(float(runs[(name, label, s)]["sync_share"])
                                        for s in range(1, args.seeds + 1) if (name, label, s) in runs)
                cell += f", sync {100 * share:.0f}%"
            cells.append(cell)
            ref = REFERENCE.get(label)
            if ref and accs(name, ref):
                r = accs(name, ref)
                gap = statistics.mean(r) - statistics.mean(a)
                worst = min(r) - min(a)
                # 0.5 points, 1 point for the 4-layer GAT.
                limit = 1.0 if label.startswith("gat4") else 0.5
                ok = gap <= limit and worst <= 2.0
                verdicts.append(f"{'PASS' if ok else 'FAIL'}  {name:13s} {label:22s} mean {gap:+.2f} below {ref} "
                                f"(≤ {limit:g}), worst seed {worst:+.2f} below its worst (≤ 2)")
            published, within = PUBLISHED.get(label, ({}, 0.0))
            if name in published:
                gap = published[name] - statistics.mean(a)
                verdicts.append(f"{'PASS' if gap <= within else 'FAIL'}  {name:13s} {label:22s} "
                                f"{statistics.mean(a):.2f} vs published {published[name]} (within {within:g} points "
                                f"or above)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for label, (published, _) in PUBLISHED.items():
        if any(c[0] == label for c in configs):
            lines.append(f"| published {label.split()[0].upper()} | " +
                         " | ".join(str(published.get(n, "–")) for n in datasets) + " |")
    text = "\n".join(lines) + "\n\n" + "\n".join(verdicts) + "\n"
    with open(os.path.join(args.out, "accuracy.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
