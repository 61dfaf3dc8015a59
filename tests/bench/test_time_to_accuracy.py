#!/usr/bin/env python3
"""bench/time_to_accuracy.py on runs written here: the target, each run's time and epoch to it,
both speed-ups (the ratio of the medians and the per-seed median with its range), a run that never
reaches the target, a failed run, and the CSV's columns.

usage: test_time_to_accuracy.py REPO_ROOT
"""
import csv, json, os, subprocess, sys, tempfile


def write_run(path, epoch_s, val_accs, test_acc=0.8, summary=True):
    with open(path, "w") as f:
        for e, v in enumerate(val_accs):
            f.write(json.dumps({"epoch": e, "epoch_s": epoch_s, "val_acc": v, "loss": 1.0}) + "\n")
        if summary:
            f.write(json.dumps({"summary": True, "best_val_acc": max(val_accs), "test_acc_at_best_val": test_acc}) + "\n")


def main():
    root = sys.argv[1]
    script = os.path.join(root, "bench", "time_to_accuracy.py")
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        # Seed 1: fp32-sync reaches its best (0.80) at epoch 3, so the target is 0.795;
        # fast reaches it at epoch 1. Seed 2: fp32-sync at epoch 5, fast at epoch 4.
        # fp32-sync takes 1 s an epoch, fast 0.25 s; slow never reaches the target; broken failed.
        runs = [
            (1, "fp32-sync", 1.0, [0.5, 0.6, 0.7, 0.80, 0.79]),
            (1, "fast", 0.25, [0.5, 0.80, 0.81, 0.81, 0.81]),
            (1, "slow", 0.1, [0.5, 0.6, 0.6, 0.6, 0.6]),
            (2, "fp32-sync", 1.0, [0.5, 0.6, 0.7, 0.72, 0.75, 0.90]),
            (2, "fast", 0.25, [0.5, 0.6, 0.7, 0.8, 0.899, 0.9]),
            (2, "slow", 0.1, [0.5, 0.6, 0.6, 0.6, 0.6, 0.6]),
            (2, "broken", 0.1, [0.5], ),
        ]
        with open(os.path.join(d, "runs.tsv"), "w") as f:
            f.write("dataset\tlayers\tseed\tconfig\tranks\thidden\tepochs\trate\tmetrics\n")
            for seed, config, epoch_s, accs in runs:
                name = f"g-L2-s{seed}-{config}.jsonl"
                f.write(f"g\t2\t{seed}\t{config}\t4\t256\t6\t1gbit\t{name}\n")
                write_run(os.path.join(d, name), epoch_s, accs, summary=config != "broken")
        out = subprocess.run([sys.executable, script, d, "--csv", os.path.join(d, "r.csv")], capture_output=True,
                             text=True)
        check(out.returncode == 0, f"exit status {out.returncode}: {out.stderr}")
        lines = {l.split()[0]: l for l in out.stdout.splitlines() if l and l.split()[0] in
                 ("fp32-sync", "fast", "slow", "broken")}
        # Times to target: fp32-sync 4 s (seed 1) and 6 s (seed 2), median 5 s; fast 0.5 s and
        # 1.25 s (epoch 4 reaches 0.899 >= 0.895), median 0.875 s. Ratio of medians 5/0.875 = 5.71x;
        # per seed 8x and 4.8x: median 6.40x.
        check("5.71x" in lines.get("fast", ""), f"ratio of the medians: {lines.get('fast')}")
        check("6.40x (4.80-8.00)" in lines.get("fast", ""), f"per-seed speed-up: {lines.get('fast')}")
        check("1.00x (1.00-1.00)" in lines.get("fp32-sync", ""), f"reference: {lines.get('fp32-sync')}")
        check("never" in lines.get("slow", "") and "0/2" in lines.get("slow", ""), f"never: {lines.get('slow')}")
        check("failed" in lines.get("broken", ""), f"failed run: {lines.get('broken')}")
        check("broken" in out.stderr, f"failed run named on stderr: {out.stderr}")
        with open(os.path.join(d, "r.csv"), newline="") as f:
            rows = {(r["seed"], r["config"]): r for r in csv.DictReader(f)}
        fast1 = rows.get(("1", "fast"), {})
        check(fast1.get("target") == "0.795", f"seed 1 target: {fast1}")
        check(fast1.get("epoch_to_target") == "1" and float(fast1.get("time_to_target_s", "nan")) == 0.5,
              f"seed 1 fast: {fast1}")
        check(abs(float(fast1.get("speedup", "nan")) - 8.0) < 1e-9, f"seed 1 fast speed-up: {fast1}")
        slow2 = rows.get(("2", "slow"), {})
        check(slow2.get("time_to_target_s") == "" and slow2.get("speedup") == "" and slow2.get("status") == "ok",
              f"seed 2 slow: {slow2}")
        check(rows.get(("2", "broken"), {}).get("status") == "failed", "seed 2 broken: not failed")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
