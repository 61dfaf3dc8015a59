# Sourced by the end-to-end scripts: HALOGEN_TEST_DEVICE=cpu (default) or cuda chooses the
# device of every `halogen train` they start, so the same scenarios cover the GPU path where
# a GPU exists (CTest's *.cuda variants, label gpu); without one the cuda variant exits 77
# (skipped). The cuda variant uses the MPI backend (staged through pinned memory), whose
# messages the scripts match; several ranks share GPU 0 when the node has fewer GPUs.
device=${HALOGEN_TEST_DEVICE:-cpu}
device_flags=(--device "$device")
device_env=()
if [ "$device" = cuda ]; then
  gpus=0
  command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$gpus" -eq 0 ]; then echo "HALOGEN_TEST_DEVICE=cuda but no GPU: skipped"; exit 77; fi
  device_flags+=(--comm mpi)
  # HALOGEN_TEST_DEVICE_EXCHANGE=fused: the same scenarios with the fused device send.
  if [ -n "${HALOGEN_TEST_DEVICE_EXCHANGE:-}" ]; then
    device_flags+=(--device-exchange "$HALOGEN_TEST_DEVICE_EXCHANGE")
  fi
  if [ "$gpus" -lt 4 ]; then
    export HALOGEN_DEVICE=0
    device_env=(-x HALOGEN_DEVICE)
  fi
elif [ "$device" != cpu ]; then
  echo "HALOGEN_TEST_DEVICE must be cpu or cuda, got '$device'"; exit 2
fi
