#!/usr/bin/env bash
# End-to-end test of the halogen program: generate -> info -> partition -> mpirun train, and
# the bad-input cases that must fail clearly on every rank without hanging.
# usage: cli_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

# --help shows numeric defaults as a user writes them (not a float's 0.00999999978).
help=$("$halogen" train --help)
for shown in "--lr arg (=0.01)" "--weight-decay arg (=0.0005)" "--dropout arg (=0.5)"; do
  grep -qF -- "$shown" <<<"$help" && pass "help shows $shown" || fail "help lacks '$shown'"
done
"$halogen" generate --help | grep -qF -- "--homophily arg (=0.6)" && pass "generate help defaults" \
  || fail "generate --help lacks '--homophily arg (=0.6)'"

"$halogen" generate sbm --nodes 3000 --classes 4 --feature-dim 16 --seed 2 --out "$work/ds" >/dev/null || fail generate
# Progress lines: shown when asked for (a terminal, or HALOGEN_PROGRESS=always), never in logs.
HALOGEN_PROGRESS=always "$halogen" generate rmat --scale 12 --feature-dim 8 --out "$work/rmat" >/dev/null 2>"$work/progress"
grep -q "generating rmat-s12: done" "$work/progress" && grep -q "writing rmat: done" "$work/progress" \
  && pass "generate shows progress" || { fail "generate progress"; cat "$work/progress"; }
printf '0 1\n1 2\n2 0\n' > "$work/edges.txt"
HALOGEN_PROGRESS=always "$halogen" convert --format edgelist "$work/edges.txt" --out "$work/conv" >/dev/null 2>"$work/progress"
grep -q "reading edges.txt: done" "$work/progress" && grep -q "writing conv: done" "$work/progress" \
  && pass "convert shows progress for reading and writing" || { fail "convert progress"; cat "$work/progress"; }
"$halogen" generate rmat --scale 12 --feature-dim 8 --out "$work/rmat" --overwrite >/dev/null 2>"$work/progress"
[ ! -s "$work/progress" ] && pass "no progress lines in a log" || { fail "progress leaked into a log"; cat "$work/progress"; }
"$halogen" info "$work/ds" > "$work/info" && grep -q "nodes        3000" "$work/info" && pass info || { fail info; cat "$work/info"; }
"$halogen" partition "$work/ds" --parts 2 --out "$work/p2" --hidden 16 > "$work/part" || { fail partition; cat "$work/part"; }
[ -f "$work/p2/partition.json" ] && pass "partition writes partition.json" || fail "partition.json missing"
"$halogen" partition "$work/ds" --parts 3 --out "$work/p3" --seed 5 --hidden 16 >/dev/null || fail "partition 3"

timeout 300 "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p2" --epochs 30 --hidden 16 \
  --metrics "$work/m.jsonl" > "$work/train" 2>&1 || { fail "train -np 2"; cat "$work/train"; }
python3 - "$work/m.jsonl" <<'PY' && pass "metrics file" || fail "metrics file"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
epochs = [l for l in lines if "epoch" in l and not l.get("summary")]
summary = [l for l in lines if l.get("summary")]
assert len(epochs) == 30, len(epochs)
for k in ["epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_s", "compute_s", "comm_s", "bytes_sent"]:
    assert k in epochs[0], k
assert len(summary) == 1
for k in ["best_val_acc", "test_acc_at_best_val", "total_s", "peak_rss_bytes", "peak_rss_bytes_per_rank",
          "estimated_peak_bytes_per_rank"]:
    assert k in summary[0], k
assert len(summary[0]["peak_rss_bytes_per_rank"]) == 2 and min(summary[0]["peak_rss_bytes_per_rank"]) > 0
assert summary[0]["peak_rss_bytes"] == max(summary[0]["peak_rss_bytes_per_rank"])
assert epochs[-1]["val_acc"] > epochs[0]["val_acc"], "validation accuracy did not rise"
assert epochs[-1]["loss"] < epochs[0]["loss"]
assert all(e["bytes_sent"] > 0 for e in epochs), "no halo bytes counted with 2 ranks"
PY

# --dataset: rank 0 partitions in memory and scatters; same shards as partition with the same seed.
timeout 300 "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --dataset "$work/ds" --epochs 5 --hidden 16 -q \
  --metrics "$work/m2.jsonl" > "$work/train2" 2>&1 && pass "train --dataset" || { fail "train --dataset"; cat "$work/train2"; }

# Bad input: each a clear error, on every rank, no hang.
expect_error "np differs from shard count" "3 parts|-np 3|np must" \
  "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p3" --epochs 2
mkdir -p "$work/mixed"; cp "$work/p2/"*-of-* "$work/mixed/" 2>/dev/null
"$halogen" partition "$work/ds" --parts 2 --out "$work/p2b" --method random --hidden 16 >/dev/null
first=$(ls "$work/p2b" | grep -- '-of-' | head -1); cp "$work/p2b/$first" "$work/mixed/"
expect_error "shards from different partitions" "different partitions" \
  "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/mixed" --epochs 2
expect_error "unknown model" "unknown model 'gat2'" \
  "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p2" --model gat2
expect_error "hidden size 0" "--hidden must be at least 1" \
  "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p2" --hidden 0
expect_error "unsupported bits" "3 bits not supported" \
  "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p2" --bits-fwd 3
expect_error "graph that does not fit" "does not fit: rank [01] needs about .* but may use 1.00 MiB" \
  "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p2" --memory-limit 1M
expect_error "bad --memory-limit" "memory-limit: unknown unit" \
  "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p2" --memory-limit 3X
expect_error "missing dataset" "does not exist" "$halogen" info "$work/nope"
expect_error "parts < 1" "[Pp]arts|at least 1" "$halogen" partition "$work/ds" --parts 0 --out "$work/p0"
[ ! -e "$work/p0" ] && pass "nothing written for parts 0" || fail "p0 written"
expect_error "different partition in output dir" "different partition|already holds" \
  "$halogen" partition "$work/ds" --parts 2 --out "$work/p2" --method random --hidden 16

# The partition's memory, predicted from meta.json before anything is read: --method auto takes
# METIS where it fits and label propagation where only that fits; a run that fits in no way is
# refused with the numbers, and nothing is written.
"$halogen" generate rmat --scale 16 --feature-dim 8 --out "$work/r16" >/dev/null
"$halogen" partition "$work/r16" --parts 2 --out "$work/pa" --hidden 16 >"$work/log" 2>&1 &&
  grep -q "partition method metis (--method auto): predicted peak" "$work/log" &&
  pass "partition --method auto: metis where it fits" || { fail "auto metis"; cat "$work/log"; }
"$halogen" partition "$work/r16" --parts 2 --out "$work/pl" --hidden 16 --memory-limit 115M >"$work/log" 2>&1 &&
  grep -q '"method": "lp"' "$work/pl/partition.json" &&
  pass "partition --method auto: lp where only lp fits the limit" || { fail "auto lp"; cat "$work/log"; }
expect_error "a partition that fits no way is refused with the numbers" \
  "r16.* will not fit: each rank has 20.0 MiB \(--memory-limit\)" \
  "$halogen" partition "$work/r16" --parts 2 --out "$work/pn" --memory-limit 20M
grep -q -- "--method lp .*per rank" "$work/out" && grep -q -- "--memory-limit none" "$work/out" &&
  pass "the refusal lists each method's need and the way out" || { fail "refusal text"; cat "$work/out"; }
[ ! -e "$work/pn" ] && pass "nothing written for a refused partition" || fail "pn written"
"$halogen" plan "$work/pa" --cluster local-cpu --gflops 10 >"$work/plan" 2>&1 &&
  grep -q "partition memory per rank (65536 nodes" "$work/plan" && grep -q "lp       on 2 rank(s)" "$work/plan" &&
  pass "plan predicts the partition's memory per method" || { fail "plan partition memory"; cat "$work/plan"; }

echo "$failures failed"
[ $failures -eq 0 ]
