#!/usr/bin/env bash
# No output command destroys a user's files. For every command that writes an output path
# (train --save-model, --metrics, --checkpoint-dir; export-model --out; predict --out; evaluate
# --json; plan --json; sweep --out-dir; slurm -o): a path holding a file or directory of the
# user's is refused, the message naming the path and --overwrite, the user's file left byte for
# byte; the command's own earlier output is replaced; --overwrite replaces (or, for commands
# that write files into a directory, writes into) the user's. generate, convert and partition
# name --overwrite in their refusals. A tiny generated graph, 2 ranks at most.
# usage: output_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

# A directory of the user's: a thesis, and a file named like an output of the command.
foreign_dir() { mkdir -p "$1"; echo "precious $1" > "$1/thesis.tex"; [ $# -lt 2 ] || echo "mine" > "$1/$2"; }
foreign_file() { echo "precious $1" > "$1"; }
# refused NAME TARGET KEPT CMD...: CMD exits non-zero, names TARGET and --overwrite, and KEPT
# (a file of the user's) is unchanged, byte for byte.
refused() {
  local name=$1 target=$2 kept=$3; shift 3
  cp "$kept" "$work/kept.copy"
  timeout 120 "$@" >"$work/out" 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then fail "$name: exited 0"
  elif ! grep -qF -- "'$target'" "$work/out"; then fail "$name: the message does not name '$target'"; cat "$work/out"
  elif ! grep -qF -- "--overwrite" "$work/out"; then fail "$name: the message does not mention --overwrite"; cat "$work/out"
  elif ! cmp -s "$kept" "$work/kept.copy"; then fail "$name: $kept was changed or removed"
  else pass "$name"; fi
}
# succeeds NAME CMD...: CMD exits 0.
succeeds() {
  local name=$1; shift
  if timeout 120 "$@" >"$work/out" 2>&1; then pass "$name"; else fail "$name: exit $?"; cat "$work/out"; fi
}
check() { if eval "$2"; then pass "$1"; else fail "$1: $2"; fi; }

"$halogen" generate sbm --nodes 300 --classes 3 --feature-dim 8 --seed 2 --out "$work/ds" >/dev/null || fail "generate"
"$halogen" partition "$work/ds" --parts 2 --out "$work/p2" --hidden 8 >/dev/null || fail "partition"
one_rank=("$mpiexec" -np 1 "${mpi_flags[@]}" "$halogen")
two_ranks=("$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen")
train_base=("${two_ranks[@]}" train --parts "$work/p2" --hidden 8 -q)
train=("${train_base[@]}" --epochs 3)

# --- train --save-model: checked before training, replaced as a whole ------------------------
foreign_dir "$work/F-model" model.json
refused "train --save-model: a directory of other files" "$work/F-model" "$work/F-model/thesis.tex" \
  "${train[@]}" --save-model "$work/F-model" --metrics "$work/before.jsonl"
check "train --save-model: refused before training (no metrics written)" '[ ! -e "$work/before.jsonl" ]'
check "train --save-model: the user's model.json kept" '[ "$(cat "$work/F-model/model.json")" = mine ]'
succeeds "train --save-model: a new directory" "${train[@]}" --save-model "$work/model" --checkpoint-dir "$work/ck"
mkdir "$work/empty-model"
succeeds "train --save-model: an empty directory" "${train[@]}" --save-model "$work/empty-model"
md5_before=$(md5sum < "$work/model/layer0.weight.npy")
succeeds "train --save-model: its own earlier model" "${train[@]}" --seed 9 --save-model "$work/model"
check "train --save-model: the earlier model was replaced" '[ "$(md5sum < "$work/model/layer0.weight.npy")" != "$md5_before" ]'
succeeds "train --save-model --overwrite: a directory of other files" "${train[@]}" --save-model "$work/F-model" --overwrite
check "train --save-model --overwrite: replaced by a model" \
  'grep -q halogen-model "$work/F-model/model.json" && [ ! -e "$work/F-model/thesis.tex" ]'
foreign_file "$work/model-file"
expect_error "train --save-model: a file, even with --overwrite" "'$work/model-file' exists and is not a directory" \
  "${train[@]}" --save-model "$work/model-file" --overwrite
check "train --save-model: the file kept" '[ "$(cat "$work/model-file")" = "precious $work/model-file" ]'

# --- export-model --out ------------------------------------------------------------------------
foreign_dir "$work/F-export"
refused "export-model --out: a directory of other files" "$work/F-export" "$work/F-export/thesis.tex" \
  "$halogen" export-model --checkpoint "$work/ck" --out "$work/F-export"
succeeds "export-model --out: a new directory" "$halogen" export-model --checkpoint "$work/ck" --out "$work/exported"
succeeds "export-model --out: its own earlier model" "$halogen" export-model --checkpoint "$work/ck" --out "$work/exported"
succeeds "export-model --out: a model train wrote" "$halogen" export-model --checkpoint "$work/ck" --out "$work/model"
check "export-model --out: the model replaced by the checkpoint's" \
  'grep -q from_checkpoint "$work/model/model.json"'
succeeds "export-model --out --overwrite" "$halogen" export-model --checkpoint "$work/ck" --out "$work/F-export" --overwrite
check "export-model --out --overwrite: replaced by a model" \
  'grep -q halogen-model "$work/F-export/model.json" && [ ! -e "$work/F-export/thesis.tex" ]'

# --- predict --out: written into; files of other names stay ------------------------------------
foreign_dir "$work/F-pred" predictions.npy
refused "predict --out: a directory of other files" "$work/F-pred" "$work/F-pred/predictions.npy" \
  "${one_rank[@]}" predict --model "$work/model" --dataset "$work/ds" --out "$work/F-pred"
check "predict --out: the user's thesis kept" '[ "$(cat "$work/F-pred/thesis.tex")" = "precious $work/F-pred" ]'
succeeds "predict --out: a new directory" "${two_ranks[@]}" predict --model "$work/model" --parts "$work/p2" --out "$work/pred"
echo stale > "$work/pred/predictions.npy"
succeeds "predict --out: its own earlier output" "${two_ranks[@]}" predict --model "$work/model" --parts "$work/p2" --out "$work/pred"
check "predict --out: its earlier predictions replaced" '[ "$(head -c 6 "$work/pred/predictions.npy" | tail -c 5)" = NUMPY ]'
succeeds "predict --out --overwrite: a directory of other files" \
  "${one_rank[@]}" predict --model "$work/model" --dataset "$work/ds" --out "$work/F-pred" --overwrite
check "predict --out --overwrite: predictions written, the thesis kept" \
  '[ "$(head -c 6 "$work/F-pred/predictions.npy" | tail -c 5)" = NUMPY ] && [ -e "$work/F-pred/predict.json" ] && [ -e "$work/F-pred/thesis.tex" ]'

# --- evaluate --json ------------------------------------------------------------------------------
foreign_file "$work/F-eval.json"
refused "evaluate --json: a file of the user's" "$work/F-eval.json" "$work/F-eval.json" \
  "${one_rank[@]}" evaluate --model "$work/model" --dataset "$work/ds" --json "$work/F-eval.json"
succeeds "evaluate --json: a new file" "${one_rank[@]}" evaluate --model "$work/model" --dataset "$work/ds" --json "$work/eval.json"
succeeds "evaluate --json: its own earlier file" "${one_rank[@]}" evaluate --model "$work/model" --dataset "$work/ds" --json "$work/eval.json"
succeeds "evaluate --json --overwrite" "${one_rank[@]}" evaluate --model "$work/model" --dataset "$work/ds" --json "$work/F-eval.json" --overwrite
check "evaluate --json --overwrite: replaced" 'grep -q test_acc "$work/F-eval.json"'

# --- train --metrics -----------------------------------------------------------------------------
foreign_file "$work/F-metrics.jsonl"
refused "train --metrics: a file of the user's" "$work/F-metrics.jsonl" "$work/F-metrics.jsonl" \
  "${train[@]}" --metrics "$work/F-metrics.jsonl"
echo '{"epoch": 0, "note": "my own log"}' > "$work/F-metrics2.jsonl"
refused "train --metrics: a JSON-lines file of another program" "$work/F-metrics2.jsonl" "$work/F-metrics2.jsonl" \
  "${train[@]}" --metrics "$work/F-metrics2.jsonl"
mkdir "$work/metrics-dir"
expect_error "train --metrics: a directory" "is a directory" "${train[@]}" --metrics "$work/metrics-dir"
succeeds "train --metrics: a new file" "${train[@]}" --metrics "$work/m.jsonl"
succeeds "train --metrics: its own earlier file" "${train_base[@]}" --epochs 2 --metrics "$work/m.jsonl"
check "train --metrics: rewritten (2 epochs and the summary)" '[ "$(wc -l < "$work/m.jsonl")" = 3 ]'
succeeds "train --metrics /dev/null" "${train[@]}" --metrics /dev/null
check "train --metrics /dev/null: still a device" '[ -c /dev/null ]'
succeeds "train --metrics --overwrite" "${train[@]}" --metrics "$work/F-metrics.jsonl" --overwrite
check "train --metrics --overwrite: replaced" 'grep -q "\"summary\":true" "$work/F-metrics.jsonl"'

# --- train --checkpoint-dir: written into ----------------------------------------------------------
foreign_dir "$work/F-ck" latest.json
refused "train --checkpoint-dir: a directory of other files" "$work/F-ck" "$work/F-ck/latest.json" \
  "${train[@]}" --checkpoint-dir "$work/F-ck"
check "train --checkpoint-dir: nothing written" '[ ! -e "$work/F-ck/epoch-2" ]'
succeeds "train --checkpoint-dir: its own checkpoints" "${train_base[@]}" --epochs 4 --checkpoint-dir "$work/ck"
check "train --checkpoint-dir: latest.json now names epoch 3" 'grep -q "epoch-3" "$work/ck/latest.json"'
succeeds "train --checkpoint-dir --overwrite" "${train[@]}" --checkpoint-dir "$work/F-ck" --overwrite
check "train --checkpoint-dir --overwrite: a checkpoint written, the thesis kept" \
  'grep -q "epoch-2" "$work/F-ck/latest.json" && [ -e "$work/F-ck/thesis.tex" ]'

# --- plan --json ------------------------------------------------------------------------------------
plan=("$halogen" plan "$work/p2" --cluster local-cpu --gflops 10)
foreign_file "$work/F-plan.json"
refused "plan --json: a file of the user's" "$work/F-plan.json" "$work/F-plan.json" "${plan[@]}" --json "$work/F-plan.json"
succeeds "plan --json: a new file" "${plan[@]}" --json "$work/plan.json"
succeeds "plan --json: its own earlier file" "${plan[@]}" --json "$work/plan.json"
succeeds "plan --json --overwrite" "${plan[@]}" --json "$work/F-plan.json" --overwrite
check "plan --json --overwrite: replaced" 'grep -q calibration "$work/F-plan.json"'

# --- sweep --out-dir: written into -------------------------------------------------------------------
sweep=("$halogen" sweep --grid "dataset=$work/ds" --grid ranks=1 --cluster local-cpu --no-plots --timeout 100)
foreign_dir "$work/F-sweep" sweep.csv
refused "sweep --out-dir: a directory of other files" "$work/F-sweep" "$work/F-sweep/sweep.csv" \
  "${sweep[@]}" --out-dir "$work/F-sweep" -- --epochs 2 --hidden 8
check "sweep --out-dir: refused before any run" '[ ! -e "$work/F-sweep/runs" ] && [ ! -e "$work/F-sweep/parts" ]'
succeeds "sweep --out-dir: a new directory" "${sweep[@]}" --out-dir "$work/sweep" -- --epochs 2 --hidden 8
succeeds "sweep --out-dir: its own earlier output" "${sweep[@]}" --out-dir "$work/sweep" --force -- --epochs 2 --hidden 8
check "sweep --out-dir: rerun wrote its row" '[ "$(grep -c ",ok," "$work/sweep/sweep.csv")" = 1 ]'
succeeds "sweep --out-dir --overwrite" "${sweep[@]}" --out-dir "$work/F-sweep" --overwrite -- --epochs 2 --hidden 8
check "sweep --out-dir --overwrite: its results written, the thesis kept" \
  '[ "$(grep -c ",ok," "$work/F-sweep/sweep.csv")" = 1 ] && [ -e "$work/F-sweep/thesis.tex" ]'

# --- slurm -o ------------------------------------------------------------------------------------------
slurm=("$halogen" slurm --cluster local-cpu --dataset "$work/ds" --parts 2 --out-dir "$work/job")
foreign_file "$work/F-job.sbatch"
refused "slurm -o: a file of the user's" "$work/F-job.sbatch" "$work/F-job.sbatch" "${slurm[@]}" -o "$work/F-job.sbatch"
succeeds "slurm -o: a new file" "${slurm[@]}" -o "$work/job.sbatch"
succeeds "slurm -o: its own earlier script" "${slurm[@]}" --job-name again -o "$work/job.sbatch"
check "slurm -o: the script replaced" 'grep -q "job-name=again" "$work/job.sbatch"'
printf '#!/bin/bash\necho {{PARTS}}\n' > "$work/bare.sbatch.in"
succeeds "slurm -o: a template without the marker line" "${slurm[@]}" --template "$work/bare.sbatch.in" -o "$work/bare.sbatch"
succeeds "slurm -o: its own script from that template" "${slurm[@]}" --template "$work/bare.sbatch.in" -o "$work/bare.sbatch"
check "slurm -o: the marker follows the #! line" '[ "$(sed -n 2p "$work/bare.sbatch")" = "# Generated by \`halogen slurm\`." ]'
succeeds "slurm -o --overwrite" "${slurm[@]}" -o "$work/F-job.sbatch" --overwrite
check "slurm -o --overwrite: replaced" 'grep -q "^#SBATCH" "$work/F-job.sbatch"'

# --- generate, convert, partition name --overwrite --------------------------------------------------
expect_error "generate: an existing dataset names --overwrite" "pass --overwrite to replace it" \
  "$halogen" generate sbm --nodes 300 --feature-dim 8 --out "$work/ds"
foreign_dir "$work/F-data"
expect_error "generate: a directory of other files is never replaced" "not a halogen dataset directory" \
  "$halogen" generate sbm --nodes 300 --feature-dim 8 --out "$work/F-data" --overwrite
check "generate: the thesis kept" '[ -e "$work/F-data/thesis.tex" ]'
foreign_dir "$work/F-parts"
refused "partition: a directory of other files" "$work/F-parts" "$work/F-parts/thesis.tex" \
  "$halogen" partition "$work/ds" --parts 2 --out "$work/F-parts"

echo "$failures failed"
[ $failures -eq 0 ]
