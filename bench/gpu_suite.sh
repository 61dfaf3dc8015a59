#!/usr/bin/env bash
# halogen's GPU path measured against its anchors in one run on one GPU (PyG side by side,
# cuSPARSE, the device copy; see bench/gpu_suite.py for the sections). Needs a CUDA build, a
# python3 with torch and torch_geometric (PyG is never a dependency of halogen) and mpirun.
#
#   bash bench/gpu_suite.sh [--bundle DIR] [gpu_suite.py options]
#
# --bundle DIR runs a relocatable bundle of halogen's executables (build/halogen,
# build/bench/bench_spmm_gpu and the GPU test programs build/tests/gpu/test_gpu_kernels,
# build/tests/gpu/test_gpu_tasks, build/tests/gpu/test_gpu_training,
# build/tests/gpu/test_nccl_communicator,
# build/tests/quant/test_quantize_cuda, build/tests/quant/test_quantize_fused,
# build/tests/train/test_exactness,
# build/tests/train/test_gradcheck, build/tests/train/test_grad_allreduce,
# build/tests/pipeline/test_staleness_runs, build/tests/pipeline/test_residual_coding and
# build/tests/train/test_task_training, with their
# libraries and Open MPI) made on another machine, for a GPU host without halogen's Debian
# packages: the bundle's environment script is sourced and its executables used. Without it,
# those of build/ (the tests section then finds no test programs beside halogen).
# The whole suite takes about 8 minutes on one H100 or H200; --sections tests,exchange about
# 7.5 (docs/gpu.md, the exchange section, says from which measured figures). Make the bundle with
#   bash ../shared/tools/runtime-bundle.sh DIR build/halogen build/bench/bench_spmm_gpu \
#     build/tests/gpu/test_gpu_kernels build/tests/gpu/test_gpu_tasks \
#     build/tests/gpu/test_gpu_training build/tests/gpu/test_nccl_communicator \
#     build/tests/quant/test_quantize_cuda \
#     build/tests/quant/test_quantize_fused build/tests/train/test_exactness \
#     build/tests/train/test_gradcheck build/tests/train/test_grad_allreduce \
#     build/tests/pipeline/test_staleness_runs build/tests/pipeline/test_residual_coding \
#     build/tests/train/test_task_training
# and carry the sources beside it (the tests section runs tests/e2e's scripts).
set -euo pipefail
suite_dir=$(cd "$(dirname "$0")" && pwd)
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$(cd "$2" && pwd); shift 2
      # shellcheck disable=SC1091
      source "$bundle/env.sh"; args+=(--bin "$bundle/bin") ;;
    *) args+=("$1"); shift ;;
  esac
done
export PYTHONUNBUFFERED=1
exec python3 "$suite_dir/gpu_suite.py" "${args[@]}"
