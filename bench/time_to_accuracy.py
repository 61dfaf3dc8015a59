#!/usr/bin/env python3
"""The analysis of bench/time_to_accuracy.sh: time to accuracy of training configurations run side
by side on one partition (standard library only).

Reads RUNS/runs.tsv (one row per run the script started: dataset, layers, seed, config, ranks,
hidden, epochs, rate, metrics file relative to RUNS) and the runs' metrics (`halogen train
--metrics`: one JSON line per epoch, then a summary line). A run whose metrics file is missing,
unreadable, or has no epoch or no summary line failed (or was cut short): it is reported as
failed, the other runs are still analysed.

Target of a (dataset, layers, seed): fp32-sync's best validation accuracy of that seed minus
0.005 (0.5 points). A run's time to target: the sum of epoch_s over epochs 0..k, k the first
epoch whose val_acc >= target (the runs evaluate every epoch). epoch_s includes that epoch's
evaluation (a forward pass with its halo exchanges, as a user who evaluates every epoch waits
for it, and as `halogen plan` counts an epoch); start-up (loading, the first halo exchange before
epoch 0) is not counted. A run that never reaches the target counts as infinitely slow in the medians.

Prints one table per (dataset, layers) with, per configuration, over seeds: runs that finished,
the median epoch time (median of epoch_s over epochs 2.. of each run, then the median over
seeds), its ratio to compute-only's, the median time to target ("never" when more than half the
seeds never reached it; half or more with an even count), the median epoch that reached it, how
many seeds reached it, the speed-up to the target over fp32-sync (the ratio of the medians), the
speed-up seed by seed (each seed's fp32-sync time over its own: the median, then the least and
the most; a seed that never reached the target counts 0x), and the mean test accuracy at the
best-validation epoch (the summary's test_acc_at_best_val) and best validation accuracy. The two
speed-ups differ when fp32-sync's own epoch of the target moves between seeds: the first
compares typical times, the second says how often a user's run gains how much. With --csv
writes one row per run: dataset, layers, seed, config, target, time_to_target_s,
epoch_to_target, median_epoch_s, speedup (fp32-sync's time to the target of the seed over the
run's), test_acc_at_best_val, best_val_acc, status (ok | failed); time_to_target_s,
epoch_to_target and speedup are empty when the run never reached the target, every measured
field when it failed.

usage: bench/time_to_accuracy.py RUNS [--configs fp32-sync,...] [--csv RUNS/results.csv]
"""
import argparse, csv, json, math, os, statistics, sys

REFERENCE = "fp32-sync"
FLOOR = "compute-only"
MARGIN = 0.005
EPS = 1e-9  # accuracies are ratios of counts: 0.69 - 0.005 must admit a val_acc of 0.685


def load(path):
    """(epoch records, summary) of one metrics file, or None when the run failed."""
    try:
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None
    epochs = [r for r in recs if "summary" not in r]
    summary = [r for r in recs if "summary" in r]
    if not epochs or not summary or any("epoch_s" not in r for r in epochs):
        return None
    return epochs, summary[-1]


def time_to(epochs, target):
    """(seconds, epoch) until val_acc first reached target, or (inf, inf)."""
    t = 0.0
    for i, r in enumerate(epochs):
        t += r["epoch_s"]
        v = r.get("val_acc")
        if v is not None and v >= target - EPS:
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
    results = []
    for row in rows:
        key = (row["dataset"], row["layers"], row["seed"], row["config"])
        ref = metrics.get(key[:3] + (REFERENCE,))
        target = ref[1]["best_val_acc"] - MARGIN if ref else None
        res = dict(row, target=target, status="failed", time=None, epoch=None, epoch_s=None,
                   test=None, best=None, speedup=None)
        m = metrics[key]
        if m:
            epochs, summary = m
            res.update(status="ok", epoch_s=median_epoch_s(epochs),
                       test=summary.get("test_acc_at_best_val"), best=summary.get("best_val_acc"))
            if target is not None:
                res["time"], res["epoch"] = time_to(epochs, target)
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


def table(group, configs):
    first = group[0]
    seeds = list(dict.fromkeys(r["seed"] for r in group))
    print(f"{first['ranks']} ranks, {first['dataset']}, {first['layers']} layers, hidden {first['hidden']}, "
          f"loopback limited to {first['rate']}, {first['epochs']} epochs, seed{'s' if len(seeds) > 1 else ''} "
          f"{','.join(seeds)}")
    targets = {r["seed"]: r["target"] for r in group}
    print(f"target: {REFERENCE}'s best validation accuracy - {100 * MARGIN:g} points: " + ", ".join(
        f"{100 * targets[s]:.2f} (seed {s})" if targets[s] is not None else f"none (seed {s}: {REFERENCE} failed)"
        for s in seeds))
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
            test=statistics.mean(r["test"] for r in ok) if ok else None,
            best=statistics.mean(r["best"] for r in ok) if ok else None)
    floor = stats.get(FLOOR, {}).get("epoch_s")
    ref = stats.get(REFERENCE, {}).get("time")
    print(f"{'run':22s} {'runs':>5s} {'epoch s':>8s} {'vs floor':>9s} {'to target':>10s} {'epoch':>6s} "
          f"{'reached':>8s} {'speed-up':>9s} {'per seed (least-most)':>22s} {'test acc':>9s} {'best val':>9s}")
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
              f"{100 * s['test']:9.2f} {100 * s['best']:9.2f}")


def write_csv(path, results):
    def num(x):
        if x is None or (isinstance(x, float) and math.isinf(x)): return ""
        return round(x, 9) if isinstance(x, float) else x
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dataset", "layers", "seed", "config", "target", "time_to_target_s", "epoch_to_target",
                    "median_epoch_s", "speedup", "test_acc_at_best_val", "best_val_acc", "status"])
        for r in results:
            speedup = None if r["speedup"] == 0.0 else r["speedup"]  # empty where never reached
            w.writerow([r["dataset"], r["layers"], r["seed"], r["config"], num(r["target"]), num(r["time"]),
                        num(r["epoch"]), num(r["epoch_s"]), num(speedup), num(r["test"]), num(r["best"]),
                        r["status"]])


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
