#!/usr/bin/env python3
"""halogen's GPU path against its anchors, in one run on one GPU; bench/gpu_suite.sh calls it.

Sections (each prints its rows as it finishes; the summary table comes last):
  tests   the GPU test programs found beside halogen (test_gpu_kernels, test_gpu_tasks,
          test_quantize_cuda, test_gpu_training on 1 and 2 ranks sharing the GPU, and the CUDA
          instances of the trainer suites that run over every registered model: test_exactness
          (2 and 4 ranks), test_gradcheck, test_grad_allreduce (2 and 4 ranks),
          test_staleness_runs, test_residual_coding, test_task_training (multilabel and
          regression), and
          test_nccl_communicator on 1 rank; then tests/e2e's resume, failure, model and tasks
          scenarios with HALOGEN_TEST_DEVICE=cuda): pass, fail or skip each, so
          that one call checks the kernels and every model's CUDA path before it times them. The
          tests read Cora from --shared-data (HALOGEN_SHARED_DATA; default ../shared/data beside
          the sources).
  train   halogen against PyG (bench/gpu_pyg.py) on an RMAT graph of ogbn-products' shape:
          GCN and GraphSAGE, 2 and 3 layers, hidden 256, fp32 and fp16, alternating runs;
          median training-step time and the peak of each one's device allocator.
  spmm    build/bench/bench_spmm_gpu on the same CSR: fused fp32 and fp16 aggregation against
          cuSPARSE SpMM, quantize + pack and dequantize against a device-to-device copy.
  gat     halogen's fused GAT against PyG's GATConv on a smaller RMAT graph, fp32 and fp16.
  halos   4 ranks sharing the GPU over MPI staging (HALOGEN_DEVICE=0): fp32 synchronous halos,
          1-bit stale halos, and no exchange at all (--skip-exchange, the floor), for GCN and for
          the deep models that exchange at every layer (--halo-models gcn,gcnii:16,appnp).
  exchange the device exchange's send side, staged against fused (--device-exchange), side by
          side: bench_spmm_gpu --only send (1-bit gather + quantize + pack of 2^20 rows x 128 over
          4 peers through a shuffled row map, staged with the exchanger's gather kernel, and
          dequantize, against the device copy of the same bytes; each checked against the CPU
          quantizer), then 4 ranks sharing the GPU over MPI staging (under MPS when
          nvidia-cuda-mps-control is on the PATH), the scale-20 graph in 4 parts, for
          --halo-models: 1-bit stale staged, 1-bit stale fused and --skip-exchange (the floor,
          under the same MPS; fp32 sync is the halos section's), and for GCN 1-bit stale with
          --halo-forward-coding residual. The halos and exchange runs
          print per run the median epoch, its compute_s, quant_s and halo_wait_s, and host_syncs.
          Without a GPU (--device cuda) it says so and stops.
  profile per-kernel device time of one GCN training run in fp32 and in fp16 (Nsight Compute,
          one metric: gpu__time_duration), when ncu is on the PATH.
  accuracy bench/accuracy.py's rows on the GPU (only when named): --ranks ranks per run
          (default 1), --accuracy-jobs runs at once, seed by seed, for --accuracy-configs on
          --accuracy-datasets, until --accuracy-seconds; OUT/accuracy keeps the runs
          (accuracy-runs.csv) and the table. fp32 sync trains the same model at any rank count
          (the exactness suites), so its rows need one rank. Ranks sharing one GPU get
          time slices of it, one context each: 64-layer GCNII at 4 ranks x 4 runs computed
          0.87 s an epoch, and no run finished in 6 minutes; at 1 rank x 4 runs a run took
          2.5 minutes. Stale rows need their ranks, so a GPU each (or MPS).

usage: gpu_suite.py [--bin DIR] [--work DIR] [--out DIR]
                    [--sections tests,train,spmm,gat,halos,exchange,accuracy]
                    [--shared-data DIR]
                    [--scale 21] [--edge-factor 30] [--small-scale 20] [--epochs 8] [--rounds 1]
                    [--device cuda|cpu]
--device cpu runs the halogen and PyG sides on the CPU at a small --scale: a dry run of the
script where there is no GPU (spmm and profile need one and are left out).
OUT/summary.json (the summary's rows) and OUT/tests.json (the tests' outcomes) are rewritten
after every section, so a call stopped part way keeps what its finished sections measured.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 2.0 ** 20

# Anchors the figures are read against (targets of the GPU path).
TARGETS = {
    "fp16_vs_pyg_fp32": 3.0,     # fp16 GCN/SAGE step at least 3x PyG's fastest fp32 step
    "fp32_vs_pyg_fp32": 1.5,     # fp32 at least 1.5x
    "memory_vs_pyg": 0.5,        # peak device memory at most half of PyG's
    "fp16_agg_vs_cusparse": 1.5, # fp16 aggregation at least 1.5x cuSPARSE fp32 SpMM
    "fp32_agg_vs_cusparse": 1.0,
    "quant1_vs_copy": 0.8,       # 1-bit quantize + pack at least 80% of the device copy
    "gat_fp16_vs_pyg": 2.0,      # GAT fp16 at least 2x PyG GATConv
    "send1_vs_copy": 0.7,        # 1-bit send side (quantize + pack) and dequantize at least 70% of the copy
    "stale_gcn_vs_floor": 1.15,  # 1-bit stale epoch over the no-exchange floor, 4 ranks on one GPU
    "stale_deep_vs_floor": 1.3,  # the same for GCNII (16 layers) and APPNP
}


def log(*a):
    print(*a, flush=True)


def run(cmd, env=None, timeout=None, check=True):
    t0 = time.time()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}) after {time.time() - t0:.0f} s: {' '.join(cmd)}\n"
                           f"{r.stdout[-3000:]}")
    return r.stdout


class Suite:
    def __init__(self, args):
        self.a = args
        self.halogen = os.path.join(args.bin, "halogen")
        self.mpirun = ["mpirun", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        self.rows = []  # (section, what, halogen figure, anchor figure, ratio, target, met)
        self.test_rows = []  # (program, ranks, outcome, detail)
        os.makedirs(args.work, exist_ok=True)
        os.makedirs(args.out, exist_ok=True)
        # The CPU path computes in fp32 only: a dry run there leaves fp16 out.
        self.precisions = args.precisions.split(",") if args.device == "cuda" else ["fp32"]

    def path(self, name):
        return os.path.join(self.a.work, name)

    # ----- data ---------------------------------------------------------------------------
    def dataset(self, name, scale, edge_factor):
        d = self.path(name)
        if not os.path.isdir(d):
            t0 = time.time()
            run([self.halogen, "generate", "rmat", "--scale", str(scale), "--edge-factor", str(edge_factor),
                 "--feature-dim", "100", "--classes", "47", "--out", d])
            meta = json.load(open(os.path.join(d, "meta.json")))
            log(f"# generated {name}: RMAT scale {scale}, edge factor {edge_factor}: {meta.get('num_nodes')} nodes, "
                f"{meta.get('num_edges')} stored entries, 100 features, 47 classes ({time.time() - t0:.0f} s)")
        return d

    def parts(self, dataset, count):
        p = dataset + f"-p{count}"
        if not os.path.isdir(p):
            t0 = time.time()
            if count == 1:
                run([self.halogen, "partition", dataset, "--parts", "1", "--out", p])
            else:
                run(self.mpirun + ["-np", str(count), self.halogen, "partition", dataset, "--parts", str(count),
                                   "--method", "ptscotch", "--out", p])
            log(f"# partitioned {os.path.basename(dataset)} into {count} ({time.time() - t0:.0f} s)")
        return p

    # ----- runs ---------------------------------------------------------------------------
    def halogen_train(self, parts, tag, ranks=1, extra=(), env=None):
        """Median training-epoch time (first epoch and the evaluating last one left out), the
        largest rank's allocator peak, the summary, and the epoch records the median is over."""
        metrics = os.path.join(self.a.out, f"{tag}.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        epochs = self.a.epochs + 1
        run(self.mpirun + ["-np", str(ranks)] + (["-x", "HALOGEN_DEVICE"] if env else []) +
            [self.halogen, "train", "--parts", parts, "--device", self.a.device, "--epochs", str(epochs),
             "--eval-every", str(epochs), "--patience", "0", "-q", "--memory-limit", "none",
             "--metrics", metrics] + list(extra), env=env, timeout=300)
        recs = [json.loads(l) for l in open(metrics)]
        eps = [r for r in recs if "summary" not in r and "val_acc" not in r][1:]
        summary = [r for r in recs if "summary" in r][0]
        peak = max(summary.get("peak_gpu_allocated_bytes_per_rank") or [0])
        return statistics.median(r["epoch_s"] for r in eps), peak, summary, eps

    def pyg(self, dataset, model, layers, hidden, precision, heads=8):
        out = run([sys.executable, os.path.join(HERE, "gpu_pyg.py"), "--dataset", dataset, "--model", model,
                   "--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads), "--precision", precision,
                   "--epochs", str(self.a.epochs + 1), "--device", self.a.device], timeout=300)
        res = json.loads(out.strip().splitlines()[-1])
        self.versions = f"torch {res['torch']}, torch_geometric {res['pyg']}"
        return res["median_step_s"], res["peak_bytes"]

    def row(self, section, what, ours, anchor, ratio, target, higher_is_better=True):
        met = None if target is None else (ratio >= target if higher_is_better else ratio <= target)
        self.rows.append((section, what, ours, anchor, ratio, target, met, higher_is_better))

    # ----- sections -----------------------------------------------------------------------
    def train(self):
        d = self.dataset(f"rmat{self.a.scale}", self.a.scale, self.a.edge_factor)
        p = self.parts(d, 1)
        log("\n# train: halogen (1 rank) against PyG adj_t, hidden 256; median step s, peak device MiB")
        log(f"{'model':8s} {'layers':>6s} {'precision':>9s} {'halogen s':>10s} {'pyg s':>10s} "
            f"{'halogen MiB':>12s} {'pyg MiB':>10s}")
        for model in self.a.models.split(","):
            for layers in [int(x) for x in self.a.layers.split(",")]:
                res = {}
                for rnd in range(self.a.rounds):
                    for precision in self.precisions:
                        order = ["halogen", "pyg"] if rnd % 2 == 0 else ["pyg", "halogen"]
                        for system in order:
                            key = (system, precision)
                            try:
                                if system == "halogen":
                                    t, m, _, _ = self.halogen_train(
                                        p, f"{model}{layers}-{precision}-{rnd}",
                                        extra=["--model", model, "--layers", str(layers), "--hidden", "256",
                                               "--precision", precision])
                                else:
                                    t, m = self.pyg(d, model, layers, 256, precision)
                            except Exception as e:  # keep going: one failed run is a row, not the suite
                                log(f"# {system} {model} {layers} {precision} failed: {str(e)[-1500:]}")
                                t, m = float("nan"), 0
                            res.setdefault(key, []).append((t, m))
                med = {k: (statistics.median(x[0] for x in v), max(x[1] for x in v)) for k, v in res.items()}
                for precision in self.precisions:
                    (ht, hm), (pt, pm) = med[("halogen", precision)], med[("pyg", precision)]
                    log(f"{model:8s} {layers:6d} {precision:>9s} {ht:10.4f} {pt:10.4f} {hm / MIB:12.0f} {pm / MIB:10.0f}")
                name = f"{model.upper()} {layers}L"
                pyg32_t, pyg32_m = med[("pyg", "fp32")]
                for precision, target in [("fp32", TARGETS["fp32_vs_pyg_fp32"]), ("fp16", TARGETS["fp16_vs_pyg_fp32"])]:
                    if precision not in self.precisions:
                        continue
                    ht, hm = med[("halogen", precision)]
                    self.row("train", f"{name} {precision} step vs PyG fp32", f"{ht * 1e3:.1f} ms",
                             f"{pyg32_t * 1e3:.1f} ms", pyg32_t / ht, target)
                    if ("pyg", "fp16") in med:
                        pyg16_t = med[("pyg", "fp16")][0]
                        self.row("train", f"{name} {precision} step vs PyG fp16 (autocast)", f"{ht * 1e3:.1f} ms",
                                 f"{pyg16_t * 1e3:.1f} ms", pyg16_t / ht, None)
                    if pyg32_m:
                        anchor = med[("pyg", precision)][1]
                        self.row("train", f"{name} {precision} peak memory vs PyG {precision}", f"{hm / MIB:.0f} MiB",
                                 f"{anchor / MIB:.0f} MiB", hm / anchor if anchor else float("nan"),
                                 TARGETS["memory_vs_pyg"], higher_is_better=False)

    def spmm(self):
        d = self.dataset(f"rmat{self.a.scale}", self.a.scale, self.a.edge_factor)
        out = run([os.path.join(self.a.bin, "bench_spmm_gpu"), "--dataset", d, "--cols", "64,256", "--iters", "20",
                   "--quant-rows", str(1 << 20), "--quant-cols", "128"], timeout=400, check=False)
        open(os.path.join(self.a.out, "spmm.txt"), "w").write(out)
        log("\n# spmm and quantize (bench_spmm_gpu)\n" + out)
        times, copy_gbs, quant = {}, None, {}
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 6 and f[-1] in ("OK", "FAIL") and f[-5].isdigit():
                times[(" ".join(f[:-5]), int(f[-5]))] = (float(f[-4]), float(f[-3]))
            elif line.strip().startswith("cudaMemcpy D2D"):
                copy_gbs = float(f[-2])
            elif line.strip().startswith(("quantize_rows", "dequantize_rows")):
                quant[" ".join(f[:3])] = float(f[-2])
        for cols in (64, 256):
            cus = times.get(("cuSPARSE fp32 CSR_ALG2", cols))
            for kernel, key, target in [("fused fp16 (chunked)", "fp16", TARGETS["fp16_agg_vs_cusparse"]),
                                        ("fused fp32 (fp64 sums)", "fp32", TARGETS["fp32_agg_vs_cusparse"])]:
                ours = times.get((kernel, cols))
                if ours and cus:
                    self.row("spmm", f"{key} aggregation, width {cols} vs cuSPARSE fp32", f"{ours[0]:.0f} us",
                             f"{cus[0]:.0f} us", cus[0] / ours[0], target)
            c16 = times.get(("cuSPARSE fp16 CSR_ALG2", cols))
            ours = times.get(("fused fp16 (chunked)", cols))
            if ours and c16:
                self.row("spmm", f"fp16 aggregation, width {cols} vs cuSPARSE fp16", f"{ours[0]:.0f} us",
                         f"{c16[0]:.0f} us", c16[0] / ours[0], None)
        if copy_gbs:
            for bits in (1, 2, 4, 8):
                for op in ("quantize_rows", "dequantize_rows"):
                    g = quant.get(f"{op} {bits} bit")
                    if g:
                        self.row("quant", f"{op.split('_')[0]} {bits} bit vs D2D copy", f"{g:.0f} GB/s",
                                 f"{copy_gbs:.0f} GB/s", g / copy_gbs,
                                 TARGETS["quant1_vs_copy"] if bits == 1 and op == "quantize_rows" else None)

    def gat(self):
        d = self.dataset(f"rmat{self.a.small_scale}", self.a.small_scale, 16)
        p = self.parts(d, 1)
        log("\n# gat: halogen fused GAT against PyG GATConv, 2 layers, 8 heads of 8; median step s, peak MiB")
        res = {}
        for rnd in range(self.a.rounds):
            for precision in self.precisions:
                for system in (["halogen", "pyg"] if rnd % 2 == 0 else ["pyg", "halogen"]):
                    try:
                        if system == "halogen":
                            t, m, _, _ = self.halogen_train(p, f"gat-{precision}-{rnd}", extra=[
                                "--model", "gat", "--heads", "8", "--hidden", "8", "--precision", precision])
                        else:
                            t, m = self.pyg(d, "gat", 2, 8, precision, heads=8)
                    except Exception as e:
                        log(f"# {system} gat {precision} failed: {str(e)[-1500:]}")
                        t, m = float("nan"), 0
                    res.setdefault((system, precision), []).append((t, m))
        med = {k: (statistics.median(x[0] for x in v), max(x[1] for x in v)) for k, v in res.items()}
        for precision in self.precisions:
            (ht, hm), (pt, pm) = med[("halogen", precision)], med[("pyg", precision)]
            log(f"gat {precision}: halogen {ht:.4f} s {hm / MIB:.0f} MiB, PyG {pt:.4f} s {pm / MIB:.0f} MiB")
            self.row("gat", f"GAT {precision} step vs PyG GATConv {precision}", f"{ht * 1e3:.1f} ms",
                     f"{pt * 1e3:.1f} ms", pt / ht, TARGETS["gat_fp16_vs_pyg"] if precision == "fp16" else None)
            if pm:
                self.row("gat", f"GAT {precision} peak memory vs PyG {precision}", f"{hm / MIB:.0f} MiB",
                         f"{pm / MIB:.0f} MiB", hm / pm, 1.0, higher_is_better=False)

    def accuracy(self):
        out = os.path.join(self.a.out, "accuracy")
        data = self.a.shared_data or os.environ.get("HALOGEN_SHARED_DATA") or \
            os.path.join(os.path.dirname(HERE), "..", "shared", "data")
        env = dict(os.environ, HALOGEN_DEVICE="0", OMP_NUM_THREADS="1")
        log(f"\n# accuracy: {self.a.accuracy_configs} on {self.a.accuracy_datasets}, {self.a.ranks} ranks "
            f"sharing the GPU per run, {self.a.accuracy_jobs} runs at once, at most {self.a.accuracy_seconds:.0f} s")
        cmd = [sys.executable, os.path.join(HERE, "accuracy.py"), "--build", self.a.bin, "--data", data,
               "--ranks", str(self.a.ranks), "--seeds", str(self.a.accuracy_seeds), "--jobs",
               str(self.a.accuracy_jobs), "--datasets", self.a.accuracy_datasets, "--configs",
               self.a.accuracy_configs, "--out", out, "--train-args", f"--device {self.a.device} --comm mpi"]
        try:
            log(run(cmd, env=env, timeout=self.a.accuracy_seconds))
        except subprocess.TimeoutExpired:
            # The finished runs are in accuracy-runs.csv; the table of those runs:
            subprocess.run(["pkill", "-f", "halogen train"], check=False)
            log(f"# accuracy: stopped after {self.a.accuracy_seconds:.0f} s; the runs that finished:")
            log(run(cmd + ["--report"], env=env))

    # The per-epoch figures the halo runs print beside the median epoch (medians too).
    BREAKDOWN = ("compute_s", "quant_s", "halo_wait_s", "host_syncs")

    def halo_models(self):
        """(model, tag, what, training arguments) for each --halo-models entry: GCN at hidden 256
        as in the train section; the deep models with their registry defaults (hidden 64), which
        exchange at every one of their layers or propagation steps."""
        comm = ["--comm", "mpi"] if self.a.device == "cuda" else []
        for spec in self.a.halo_models.split(","):
            model, _, layers = spec.partition(":")
            shape = ["--hidden", "256"] if model == "gcn" else []
            shape += ["--layers", layers] if layers else []
            what = f"{model.upper()}{' ' + layers + ' layers' if layers else ''}"
            yield model, f"{model}{layers}", what, ["--model", model] + shape + comm

    def halo_runs(self, section, p, env, key, what, base, cases):
        """Each case on 4 ranks sharing the GPU: {name: (median epoch s, {BREAKDOWN: median})},
        the failed ones left out; one line a run as it finishes."""
        log(f"{'case':22s} {'epoch s':>9s} {'compute s':>10s} {'quant s':>9s} {'wait s':>9s} {'host_syncs':>10s}")
        res = {}
        for name, extra in cases:
            tag = f"{section}-{key}-" + name.replace(" ", "-").replace("(", "").replace(")", "")
            try:
                t, _, _, eps = self.halogen_train(p, tag, ranks=4, extra=base + extra, env=env)
            except Exception as e:  # keep going: one failed run is a missing row, not the section
                log(f"# {section} {what} {name} failed: {str(e)[-1500:]}")
                continue
            med = {k: statistics.median(r.get(k, 0) for r in eps) for k in self.BREAKDOWN}
            res[name] = (t, med)
            log(f"{name:22s} {t:9.4f} {med['compute_s']:10.4f} {med['quant_s']:9.4f} {med['halo_wait_s']:9.4f} "
                f"{med['host_syncs']:10.0f}")
        return res

    def halos(self):
        d = self.dataset(f"rmat{self.a.small_scale}", self.a.small_scale, 16)
        p = self.parts(d, 4)
        env = dict(os.environ, HALOGEN_DEVICE="0")
        cases = [("fp32 sync", []), ("1-bit stale", ["--bits-fwd", "1", "--bits-bwd", "1", "--mode", "stale"]),
                 ("no exchange (floor)", ["--skip-exchange"])]
        for model, key, what, base in self.halo_models():
            log(f"\n# halos: 4 ranks on one GPU over MPI staging, {what}; medians of the training epochs")
            res = self.halo_runs("halos", p, env, key, what, base, cases)
            t = {name: r[0] for name, r in res.items()}
            if "fp32 sync" in t and "1-bit stale" in t:
                self.row("halos", f"{what}: 1-bit stale epoch vs fp32 sync (4 ranks, 1 GPU)",
                         f"{t['1-bit stale'] * 1e3:.1f} ms", f"{t['fp32 sync'] * 1e3:.1f} ms",
                         t["fp32 sync"] / t["1-bit stale"], 1.0)
            if "no exchange (floor)" in t and "1-bit stale" in t:
                self.row("halos", f"{what}: 1-bit stale epoch vs no exchange", f"{t['1-bit stale'] * 1e3:.1f} ms",
                         f"{t['no exchange (floor)'] * 1e3:.1f} ms", t["1-bit stale"] / t["no exchange (floor)"],
                         None, higher_is_better=False)

    def exchange(self):
        if self.a.device == "cuda" and not gpu_count():
            log("\n# exchange: no GPU (nvidia-smi lists none): section not run")
            return
        # 1. The send side's kernels, staged against fused, against the device copy.
        bench = os.path.join(self.a.bin, "bench_spmm_gpu")
        if self.a.device != "cuda":
            log("\n# exchange: bench_spmm_gpu needs a GPU: left out of a --device cpu run")
        elif not os.path.exists(bench):
            log(f"\n# exchange: no bench_spmm_gpu in {self.a.bin}")
        else:
            self.send_bench(bench)
        # 2. Epochs, 4 ranks sharing the GPU (under MPS where it starts), staged against fused.
        # The floor is measured here too, under the same MPS as the two sends: the halos
        # section's runs share the GPU without it. fp32 sync is the halos section's.
        d = self.dataset(f"rmat{self.a.small_scale}", self.a.small_scale, 16)
        p = self.parts(d, 4)
        env = dict(os.environ, HALOGEN_DEVICE="0")
        mps = self.start_mps(env) if self.a.device == "cuda" else False
        stale = ["--bits-fwd", "1", "--bits-bwd", "1", "--mode", "stale"]
        cases = [("1-bit stale staged", stale + ["--device-exchange", "staged"]),
                 ("1-bit stale fused", stale + ["--device-exchange", "fused"]), ("no exchange", ["--skip-exchange"])]
        # Residual forward codes (staged sends, then the estimate advanced from the words sent)
        # on GCN only, which keeps the section inside its time.
        residual = ("1-bit stale residual", stale + ["--device-exchange", "staged", "--halo-forward-coding", "residual"])
        try:
            for model, key, what, base in self.halo_models():
                log(f"\n# exchange: 4 ranks on one GPU{' (MPS)' if mps else ''} over MPI staging, {what}; medians of "
                    "the training epochs")
                res = self.halo_runs("exchange", p, env, key, what, base, cases + ([residual] if model == "gcn" else []))
                floor = res.get("no exchange", (None,))[0]
                target = TARGETS["stale_gcn_vs_floor"] if model == "gcn" else TARGETS["stale_deep_vs_floor"]
                for name in ("1-bit stale staged", "1-bit stale fused", "1-bit stale residual"):
                    if name in res and floor:
                        t, med = res[name]
                        self.row("exchange", f"{what}: {name} vs no exchange (host_syncs {med['host_syncs']:.0f})",
                                 f"{t * 1e3:.1f} ms", f"{floor * 1e3:.1f} ms", t / floor, target,
                                 higher_is_better=False)
                if "1-bit stale staged" in res and "1-bit stale fused" in res:
                    staged, fused = res["1-bit stale staged"][0], res["1-bit stale fused"][0]
                    self.row("exchange", f"{what}: 1-bit stale fused vs staged", f"{fused * 1e3:.1f} ms",
                             f"{staged * 1e3:.1f} ms", staged / fused, None)
        finally:
            if mps:
                subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=env, check=False)

    def send_bench(self, bench):
        cmd = [bench, "--only", "send", "--quant-rows", str(1 << 20), "--quant-cols", "128", "--peers", "4",
               "--iters", "20"]
        try:
            out = run(cmd, timeout=120, check=False)
            log("\n# exchange: send side at 1 bit (bench_spmm_gpu --only send)\n" + out)
        except subprocess.TimeoutExpired as e:  # its rows so far are kept, and the training runs still run
            out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
            log(f"\n# exchange: bench_spmm_gpu --only send ran past {e.timeout:.0f} s; what it printed:\n{out}")
        open(os.path.join(self.a.out, "exchange-send.txt"), "w").write(out)
        gbs = {}
        for line in out.splitlines():
            name = line.strip().split("  ")[0]
            f = line.split()
            if name in ("cudaMemcpy D2D", "staged: gather + quantize_rows/peer", "fused: quantize_send_fused",
                        "dequantize_rows/peer", "dequantize_rows_by_row/peer") and len(f) >= 4:
                gbs[name] = (float(f[-2]), "") if name == "cudaMemcpy D2D" else (float(f[-3]), f[-1])
        copy = gbs.get("cudaMemcpy D2D")
        for name, label in [("staged: gather + quantize_rows/peer", "staged gather + quantize + pack"),
                            ("fused: quantize_send_fused", "fused gather + quantize + pack"),
                            ("dequantize_rows/peer", "dequantize by value"),
                            ("dequantize_rows_by_row/peer", "dequantize by row")]:
            if copy and name in gbs:
                g, check = gbs[name]
                self.row("exchange", f"{label} 1 bit vs D2D copy (check {check})", f"{g:.0f} GB/s",
                         f"{copy[0]:.0f} GB/s", g / copy[0], TARGETS["send1_vs_copy"])

    def start_mps(self, env):
        if not shutil.which("nvidia-cuda-mps-control"):
            log("# exchange: nvidia-cuda-mps-control not found: the 4 ranks time-slice the GPU")
            return False
        for var, sub in [("CUDA_MPS_PIPE_DIRECTORY", "mps-pipe"), ("CUDA_MPS_LOG_DIRECTORY", "mps-log")]:
            env[var] = self.path(sub)
            os.makedirs(env[var], exist_ok=True)
        r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            log(f"# exchange: MPS did not start ({r.stdout.strip()[-300:]}): the ranks time-slice the GPU")
            for var in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
                env.pop(var)
            return False
        time.sleep(1)
        return True

    def tests(self):
        env = dict(os.environ)
        if self.a.shared_data:
            env["HALOGEN_SHARED_DATA"] = os.path.abspath(self.a.shared_data)
        log("\n# tests: GPU test programs")
        # (program, ranks, gtest filter, seconds)
        programs = [("test_gpu_kernels", 1, "*", 300), ("test_gpu_tasks", 1, "*", 300),
                    ("test_quantize_cuda", 1, "*", 300),
                    ("test_quantize_fused", 1, "*", 300),
                    ("test_nccl_communicator", 1, "*", 300),
                    ("test_gpu_training", 1, "*", 300), ("test_gpu_training", 2, "*", 300),
                    ("test_exactness", 2, "*cuda*", 600), ("test_exactness", 4, "*cuda*", 600),
                    ("test_gradcheck", 2, "*cuda*", 600), ("test_grad_allreduce", 2, "*cuda*", 300),
                    ("test_grad_allreduce", 4, "*cuda*", 300), ("test_staleness_runs", 2, "*cuda*", 600),
                    ("test_residual_coding", 2, "*cuda*", 300), ("test_task_training", 2, "*cuda*", 600)]
        for name, ranks, only, limit in programs:
            exe = os.path.join(self.a.bin, name)
            if not os.path.exists(exe):
                self.test_rows.append((name, ranks, "absent", f"not in {self.a.bin}"))
                continue
            cmd = self.mpirun + ["-np", str(ranks), exe, "--gtest_color=no", f"--gtest_filter={only}"]
            self.run_test(name, ranks, cmd, env, limit, gtest=True)
        # The end-to-end scenarios of tests/e2e on the GPU path (CTest's e2e_*.cuda): checkpoint
        # and resume bit for bit, failures and bad input, a saved model read back.
        e2e = os.path.join(os.path.dirname(HERE), "tests", "e2e")
        env_cuda = dict(env, HALOGEN_TEST_DEVICE="cuda")
        for script in ["resume_test.sh", "failure_test.sh", "model_test.sh", "tasks_test.sh"]:
            cmd = ["bash", os.path.join(e2e, script), self.halogen, self.mpirun[0]] + self.mpirun[1:]
            self.run_test("e2e " + script.replace("_test.sh", "") + ".cuda", 2, cmd, env_cuda, 600, gtest=False)
        # Resume and failures (non-finite input reported as on the CPU) with the fused send.
        env_fused = dict(env_cuda, HALOGEN_TEST_DEVICE_EXCHANGE="fused")
        for script in ["resume_test.sh", "failure_test.sh"]:
            cmd = ["bash", os.path.join(e2e, script), self.halogen, self.mpirun[0]] + self.mpirun[1:]
            self.run_test("e2e " + script.replace("_test.sh", "") + ".cuda_fused", 2, cmd, env_fused, 600,
                          gtest=False)

    def run_test(self, name, ranks, cmd, env, limit, gtest):
        try:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=limit)
            out, code = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
            code = -1
        open(os.path.join(self.a.out, f"tests-{name.replace(' ', '_')}-np{ranks}.txt"), "w").write(out)
        if not gtest:  # a script: exit 0 passed, 77 skipped; its own FAILED lines say what
            outcome = {0: "passed", 77: "skipped", -1: "TIMEOUT"}.get(code, "FAILED")
            failed = [l.strip() for l in out.splitlines() if "FAIL" in l][:3]
            detail = "; ".join(failed)[:300] or f"exit {code}"
            if outcome == "passed":
                detail = f"{sum(1 for l in out.splitlines() if l.startswith('ok') or l.startswith('PASS'))} checks"
            self.test_rows.append((name, ranks, outcome, detail))
            log(f"{name:20s} np={ranks}  {outcome}  {detail}")
            return
        failed = [l.split("]", 1)[1].strip() for l in out.splitlines() if l.startswith("[  FAILED  ]")]
        # gtest's closing lines: "[  PASSED  ] N tests." and "[  SKIPPED ] N tests, listed below:"
        def closing(tag):
            counts = [int(l.split()[3]) for l in out.splitlines() if l.startswith(tag) and l.split()[3].isdigit()]
            return max(counts, default=0)
        passed, skipped = closing("[  PASSED  ]"), closing("[  SKIPPED ]")
        if code == -1:
            outcome, detail = "TIMEOUT", f"over {limit} s"
        elif code != 0 or failed:
            outcome, detail = "FAILED", ", ".join(sorted(set(f.split(" ")[0] for f in failed)))[:300] or f"exit {code}"
        else:
            outcome = "passed" if passed > 0 else "skipped"
            detail = f"{passed} passed, {skipped} skipped"
        self.test_rows.append((name, ranks, outcome, detail))
        log(f"{name:20s} np={ranks}  {outcome}  {detail}")

    def profile(self):
        ncu = shutil.which("ncu")
        if not ncu:
            log("# profile: ncu not found")
            return
        p = self.parts(self.path(f"rmat{self.a.scale}"), 1)
        for precision in ["fp32", "fp16"]:
            # A short run: every kernel of two epochs and the set-up, one duration each.
            cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                   "--print-summary", "per-kernel", "--launch-count", "400",
                   self.halogen, "train", "--parts", p, "--device", "cuda", "--precision", precision,
                   "--hidden", "256", "--epochs", "2", "--eval-every", "2", "--patience", "0", "-q",
                   "--memory-limit", "none"]
            try:
                out = run(cmd, timeout=120, check=False)
            except subprocess.TimeoutExpired:
                log(f"# profile {precision}: ncu timed out")
                continue
            open(os.path.join(self.a.out, f"profile-{precision}.csv"), "w").write(out)
            log(f"\n# profile {precision}: per-kernel device time over a 2-epoch run (ncu)")
            summarize_ncu(out)

    def summary(self):
        if self.test_rows:
            log("\n# GPU tests")
            log("| program | ranks | outcome | detail |")
            log("|---|---|---|---|")
            for name, ranks, outcome, detail in self.test_rows:
                log(f"| {name} | {ranks} | {outcome} | {detail} |")
        log(f"\n# summary ({getattr(self, 'versions', 'PyG not run')})")
        log(f"| section | figure | halogen | anchor | ratio | target | met |")
        log("|---|---|---|---|---|---|---|")
        for section, what, ours, anchor, ratio, target, met, higher in self.rows:
            tgt = "" if target is None else (f">= {target:g}" if higher else f"<= {target:g}")
            log(f"| {section} | {what} | {ours} | {anchor} | {ratio:.2f} | {tgt} | "
                f"{'' if met is None else ('yes' if met else 'NO')} |")
        self.write_summary()

    def write_summary(self):
        """summary.json (the figures' rows) and tests.json (the tests' outcomes) as they stand:
        written after every section, so that a call stopped part way keeps what it measured."""
        for name, rows in [("summary.json", [r[:7] for r in self.rows]), ("tests.json", self.test_rows)]:
            tmp = os.path.join(self.a.out, name + ".tmp")
            with open(tmp, "w") as f:
                json.dump(rows, f, indent=1)
            os.replace(tmp, os.path.join(self.a.out, name))


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for l in out.splitlines() if l.startswith("GPU"))


def summarize_ncu(out):
    """Totals per kernel name from ncu's CSV (one row per launch and metric)."""
    import csv, io
    lines = [l for l in out.splitlines() if l.startswith('"')]
    if not lines:
        log(out[-2000:])
        return
    totals = {}
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        name = rec.get("Kernel Name") or rec.get("Function Name") or "?"
        try:
            value = float(rec.get("Metric Value", rec.get("Average", "nan")).replace(",", ""))
        except ValueError:
            continue
        unit = rec.get("Metric Unit", "")
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
        calls = int(float(rec.get("Invocations", "1") or 1))
        n, t = totals.get(name[:90], (0, 0.0))
        totals[name[:90]] = (n + calls, t + value * scale * calls)
    whole = sum(t for _, t in totals.values())
    for name, (n, t) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:15]:
        log(f"  {t:9.2f} ms {100 * t / whole:5.1f}%  x{n:<4d} {name}")
    log(f"  {whole:9.2f} ms in all")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--work", default="/tmp/halogen-gpu-suite")
    ap.add_argument("--out", default=None)
    ap.add_argument("--sections", default="tests,train,spmm,gat,halos")
    ap.add_argument("--shared-data", default=None,
                    help="tests: the shared datasets (default: HALOGEN_SHARED_DATA, else beside the sources)")
    ap.add_argument("--models", default="gcn,sage", help="train: models")
    ap.add_argument("--layers", default="2,3", help="train: layer counts")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--halo-models", default="gcn,gcnii:16,appnp",
                    help="halos and exchange: models, each MODEL or MODEL:LAYERS (registry defaults otherwise)")
    ap.add_argument("--scale", type=int, default=21)
    ap.add_argument("--edge-factor", type=int, default=30)
    ap.add_argument("--small-scale", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--budget", type=float, default=480, help="seconds; later sections are skipped past it")
    ap.add_argument("--ranks", type=int, default=1, help="accuracy: ranks per run")
    ap.add_argument("--accuracy-configs", default="gcnii fp32 sync",
                    help="accuracy: bench/accuracy.py configurations")
    ap.add_argument("--accuracy-datasets", default="amazon-photo,coauthor-cs")
    ap.add_argument("--accuracy-seeds", type=int, default=10)
    ap.add_argument("--accuracy-jobs", type=int, default=4, help="accuracy: runs at once")
    ap.add_argument("--accuracy-seconds", type=float, default=300, help="accuracy: stop after this long")
    args = ap.parse_args()
    args.out = args.out or os.path.join(args.work, "out")
    suite = Suite(args)
    log(f"# halogen GPU suite, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, device {args.device}")
    if args.device == "cuda":
        try:
            log("# " + run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           check=False).strip())
        except OSError as e:
            log(f"# no GPU: nvidia-smi cannot run ({e.strerror}); the sections that need one say so")
    t0 = time.time()
    for section in args.sections.split(","):
        s0 = time.time()
        if s0 - t0 > args.budget:
            log(f"# section {section} skipped: {s0 - t0:.0f} s of the {args.budget:.0f} s budget spent")
            continue
        try:
            getattr(suite, section)()
        except Exception as e:
            log(f"# section {section} failed: {str(e)[-2000:]}")
        suite.write_summary()
        log(f"# section {section}: {time.time() - s0:.0f} s")
    suite.summary()
    log(f"# suite: {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
