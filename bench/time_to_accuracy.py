#!/usr/bin/env python3
"""The analysis of bench/time_to_accuracy.sh: time to accuracy of training configurations run side
by side on one partition (standard library only).

Reads RUNS/runs.tsv (one row per run the script started: dataset, layers, seed, config, ranks,
hidden, epochs, rate, metrics file relative to RUNS) and the runs' metrics (`halogen train
--metrics`: one JSON line per epoch, then a summary line). A run whose metrics file is missing,
unreadable, or has no epoch or no summary line failed (or was cut short): it is reported as
failed, the other runs are still analysed.

"Accuracy" is the metric that chose the run's best epoch, its task's own (the summary's
selection_metric M: acc for multiclass, f1_micro for multilabel, mse for regression, or another
that --selection-metric named: roc_auc, r2): the epochs' val_M, the summary's best_val_M and
test_M_at_best_val. The runs of a (dataset, layers) must share it; a metric this script does not
know stops it, naming the file.

Target of a (dataset, layers, seed): fp32-sync's best validation value of that seed minus 0.005
(0.5 points of accuracy, F1-micro or ROC-AUC; 0.005 of R²), or for MSE, where lower is better,
plus 0.5% of it (an error has no fixed scale), as `halogen sweep` sets its targets. A run's time
to target: the sum of epoch_s over epochs 0..k, k the first epoch whose val_M reaches the target
(>=, or <= for MSE; the runs evaluate every epoch). epoch_s includes that epoch's
evaluation (a forward pass with its halo exchanges, as a user who evaluates every epoch waits
for it, and as `halogen plan` counts an epoch); start-up (loading, the first halo exchange before
epoch 0) is not counted. A run that never reaches the target counts as infinitely slow in the medians.

Prints one table per (dataset, layers) with, per configuration, over seeds: runs that finished,
the median epoch time (median of epoch_s over epochs 2.. of each run, then the median over
seeds), its ratio to compute-only's, the median time to target ("never" when more than half the
seeds never reached it; half or more with an even count), the median epoch that reached it, how
many seeds reached it, the speed-up to the target over fp32-sync (the ratio of the medians), the
speed-up seed by seed (each seed's fp32-sync time over its own: the median, then the least and
the most; a seed that never reached the target counts 0x), and the mean test value at the
best-validation epoch (the summary's test_M_at_best_val) and best validation value (accuracy,
F1-micro and ROC-AUC in percent, R² and MSE as they are). The two speed-ups differ when
fp32-sync's own epoch of the target moves between seeds: the first compares typical times, the
second says how often a user's run gains how much. With --csv writes one row per run: dataset,
layers, seed, config, metric (M), target, time_to_target_s, epoch_to_target, median_epoch_s,
speedup (fp32-sync's time to the target of the seed over the run's), test_M_at_best_val and
best_val_M for each metric of the runs (multiclass runs' columns are test_acc_at_best_val
and best_val_acc; a row leaves the other metrics' columns empty), status (ok | failed);
time_to_target_s, epoch_to_target and speedup are empty when the run never reached the target,
every measured field when it failed.

usage: bench/time_to_accuracy.py RUNS [--configs fp32-sync,...] [--csv RUNS/results.csv]
"""
import argparse, csv, json, math, os, statistics, sys

REFERENCE = "fp32-sync"
FLOOR = "compute-only"
MARGIN = 0.005  # below the best, where higher is better
RELATIVE_MARGIN = 0.005  # above the best MSE, as a share of it
# Ratios of counts (accuracy, F1-micro) round: 0.69 - 0.005 must admit a val_acc of 0.685.
EPS = 1e-9
# The selection metrics of halogen's tasks: (name in the tables, higher is better, in [0, 1]).
METRICS = {
    "acc": ("accuracy", True, True),
    "f1_micro": ("F1-micro", True, True),
    "roc_auc": ("ROC-AUC", True, True),
    "r2": ("R²", True, False),
    "mse": ("MSE", False, False),
}


def load(path):
    """(epoch records, summary, metric) of one metrics file, or None when the run failed."""
    try:
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None
    epochs = [r for r in recs if "summary" not in r]
    summary = [r for r in recs if "summary" in r]
    if not epochs or not summary or any("epoch_s" not in r for r in epochs):
        return None
    # Summaries written before tasks existed name no metric: those runs were all multiclass.
    metric = summary[-1].get("selection_metric", "acc")
    if metric not in METRICS:
        sys.exit(f"{path}: selection metric '{metric}' unknown (known: {', '.join(METRICS)})")
    return epochs, summary[-1], metric


def target_from_best(best, metric):
    if best is None:
        return None  # a split without nodes has no figure
    return best - MARGIN if METRICS[metric][1] else best * (1 + RELATIVE_MARGIN)


def reaches(value, target, metric):
    if value is None:
        return False  # null: no validation node
    if METRICS[metric][1]:
        return value >= target - EPS
    return value <= target + EPS * abs(target)


def time_to(epochs, target, metric):
    """(seconds, epoch) until val_<metric> first reached target, or (inf, inf)."""
    t = 0.0
    for i, r in enumerate(epochs):
        t += r["epoch_s"]
        if reaches(r.get("val_" + metric), target, metric):
            return t, r.get("epoch", i)
    return math.inf, math.inf


def median_epoch_s(epochs):
    steady = epochs[2:] or epochs  # epochs 0 and 1 warm up (allocation, the first exchange)
    return statistics.median(r["epoch_s"] for r in steady)


def analyse(runs_dir, rows):
    """One result per run: rows of runs.tsv with target, times and accuracies added."""
    metrics = {}
    for row in rows:
        key = (row["dataset"], row["layers"], row["seed"], row["config"])
        metrics[key] = load(os.path.join(runs_dir, row["metrics"]))
    # One metric per (dataset, layers): one target, one table column; a dataset's task fixes it.
    group_metric = {}
    for row in rows:
        m = metrics[(row["dataset"], row["layers"], row["seed"], row["config"])]
        if not m:
            continue
        group = (row["dataset"], row["layers"])
        first = group_metric.setdefault(group, (m[2], row))
        if first[0] != m[2]:
            sys.exit(f"{row['dataset']}, {row['layers']} layers: {first[1]['config']} (seed {first[1]['seed']}) "
                     f"was selected by {first[0]}, {row['config']} (seed {row['seed']}) by {m[2]}: "
                     "one metric per dataset and layer count")
    results = []
    for row in rows:
        key = (row["dataset"], row["layers"], row["seed"], row["config"])
        metric = group_metric.get(key[:2], ("acc",))[0]
        ref = metrics.get(key[:3] + (REFERENCE,))
        target = target_from_best(ref[1].get(f"best_val_{metric}"), metric) if ref else None
        res = dict(row, metric=metric, target=target, status="failed", time=None, epoch=None, epoch_s=None,
                   test=None, best=None, speedup=None)
        m = metrics[key]
        if m:
            epochs, summary, _ = m
            res.update(status="ok", epoch_s=median_epoch_s(epochs),
                       test=summary.get(f"test_{metric}_at_best_val"), best=summary.get(f"best_val_{metric}"))
            if target is not None:
                res["time"], res["epoch"] = time_to(epochs, target, metric)
        results.append(res)
    # Each run against its own seed's fp32-sync (which always reaches its target: it defines it).
    ref_time = {(r["dataset"], r["layers"], r["seed"]): r["time"] for r in results
                if r["config"] == REFERENCE and r["time"] is not None}
    for r in results:
        t_ref = ref_time.get((r["dataset"], r["layers"], r["seed"]))
        if r["time"] is not None and t_ref is not None:
            r["speedup"] = 0.0 if math.isinf(r["time"]) else t_ref / r["time"]
    return results


def fmt_time(t):
    if t is None: return "-"
    if math.isinf(t): return "never"
    return f"{t:.3f} s" if t < 10 else f"{t:.1f} s"


def fmt_value(x, metric):
    """A value of `metric` as the tables print it: in percent where it lies in [0, 1]."""
    if x is None: return "-"
    return f"{100 * x:.2f}" if METRICS[metric][2] else f"{x:.6g}"


def mean_of(values):
    values = [v for v in values if v is not None]  # null: a split without nodes
    return statistics.mean(values) if values else None


def table(group, configs):
    first = group[0]
    seeds = list(dict.fromkeys(r["seed"] for r in group))
    print(f"{first['ranks']} ranks, {first['dataset']}, {first['layers']} layers, hidden {first['hidden']}, "
          f"loopback limited to {first['rate']}, {first['epochs']} epochs, seed{'s' if len(seeds) > 1 else ''} "
          f"{','.join(seeds)}")
    targets = {r["seed"]: r["target"] for r in group}
    metric = first["metric"]
    name, higher, percent = METRICS[metric]
    margin = (f"- {100 * MARGIN:g} points" if percent else f"- {MARGIN:g}") if higher else f"+ {100 * RELATIVE_MARGIN:g}%"
    print(f"target: {REFERENCE}'s best validation {name} {margin}: " + ", ".join(
        f"{fmt_value(targets[s], metric)} (seed {s})" if targets[s] is not None
        else f"none (seed {s}: {REFERENCE} failed or has no validation figure)" for s in seeds))
    stats = {}
    for c in configs:
        runs = [r for r in group if r["config"] == c]
        ok = [r for r in runs if r["status"] == "ok"]
        timed = [r for r in ok if r["time"] is not None]
        stats[c] = dict(
            n=len(runs), ok=len(ok),
            epoch_s=statistics.median(r["epoch_s"] for r in ok) if ok else None,
            time=statistics.median(r["time"] for r in timed) if timed else None,
            epoch=statistics.median(r["epoch"] for r in timed) if timed else None,
            reached=f"{sum(1 for r in timed if not math.isinf(r['time']))}/{len(timed)}" if timed else "-",
            per_seed=sorted(r["speedup"] for r in ok if r["speedup"] is not None),
            test=mean_of(r["test"] for r in ok), best=mean_of(r["best"] for r in ok))
    floor = stats.get(FLOOR, {}).get("epoch_s")
    ref = stats.get(REFERENCE, {}).get("time")
    # Accuracy keeps the headers it always had; another metric is named in them.
    test_head, best_head = ("test acc", "best val") if metric == "acc" else (f"test {name}", f"best val {name}")
    tw, bw = max(9, len(test_head)), max(9, len(best_head))
    print(f"{'run':22s} {'runs':>5s} {'epoch s':>8s} {'vs floor':>9s} {'to target':>10s} {'epoch':>6s} "
          f"{'reached':>8s} {'speed-up':>9s} {'per seed (least-most)':>22s} {test_head:>{tw}s} {best_head:>{bw}s}")
    for c in configs:
        s = stats[c]
        if s["n"] == 0:
            continue  # not run (the sweep stopped before it)
        if s["ok"] == 0:
            print(f"{c:22s} {'0/' + str(s['n']):>5s} failed")
            continue
        vs_floor = f"{s['epoch_s'] / floor:.2f}x" if floor else "-"
        epoch = "-" if s["epoch"] is None or math.isinf(s["epoch"]) else f"{s['epoch']:g}"
        t = s["time"]
        speed = f"{ref / t:.2f}x" if t is not None and ref is not None and not math.isinf(t) else "-"
        v = s["per_seed"]
        per_seed = "-" if not v else "never" if v[-1] == 0.0 else f"{statistics.median(v):.2f}x ({v[0]:.2f}-{v[-1]:.2f})"
        print(f"{c:22s} {str(s['ok']) + '/' + str(s['n']):>5s} {s['epoch_s']:8.4f} {vs_floor:>9s} "
              f"{fmt_time(t):>10s} {epoch:>6s} {s['reached']:>8s} {speed:>9s} {per_seed:>22s} "
              f"{fmt_value(s['test'], metric):>{tw}s} {fmt_value(s['best'], metric):>{bw}s}")


def write_csv(path, results):
    def num(x):
        if x is None or (isinstance(x, float) and math.isinf(x)): return ""
        return round(x, 9) if isinstance(x, float) else x
    # The summary's names of each metric's figures, so that multiclass runs' columns stay
    # test_acc_at_best_val and best_val_acc.
    metrics = list(dict.fromkeys(r["metric"] for r in results))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dataset", "layers", "seed", "config", "metric", "target", "time_to_target_s", "epoch_to_target",
                    "median_epoch_s", "speedup"]
                   + [c for m in metrics for c in (f"test_{m}_at_best_val", f"best_val_{m}")] + ["status"])
        for r in results:
            speedup = None if r["speedup"] == 0.0 else r["speedup"]  # empty where never reached
            figures = []
            for m in metrics:
                figures += [num(r["test"]), num(r["best"])] if m == r["metric"] else ["", ""]
            w.writerow([r["dataset"], r["layers"], r["seed"], r["config"], r["metric"], num(r["target"]),
                        num(r["time"]), num(r["epoch"]), num(r["epoch_s"]), num(speedup)] + figures + [r["status"]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", help="folder of runs.tsv and the metrics files")
    ap.add_argument("--configs", help="comma list: the tables' rows in this order (default: as run)")
    ap.add_argument("--csv", help="write one row per run here")
    a = ap.parse_args()
    with open(os.path.join(a.runs, "runs.tsv"), newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows:
        sys.exit(f"no runs in {os.path.join(a.runs, 'runs.tsv')}")
    results = analyse(a.runs, rows)
    configs = a.configs.split(",") if a.configs else list(dict.fromkeys(r["config"] for r in rows))
    groups = {}
    for r in results:
        groups.setdefault((r["dataset"], r["layers"]), []).append(r)
    for i, group in enumerate(groups.values()):
        if i: print()
        table(group, configs)
    if a.csv:
        write_csv(a.csv, results)
    failed = sum(1 for r in results if r["status"] != "ok")
    if failed:
        print(f"\n{failed} run{'s' if failed > 1 else ''} failed: "
              + ", ".join(f"{r['config']} ({r['dataset']}, {r['layers']} layers, seed {r['seed']})"
                          for r in results if r["status"] != "ok"), file=sys.stderr)


if __name__ == "__main__":
    main()
