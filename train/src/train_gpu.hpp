// The GPU training path (train --device cuda): one GPU per rank, the same model, inputs,
// initialisation and metrics as the CPU trainer (trainer_common.hpp), with the local matrices
// in device memory as fp32 or fp16 (TrainOptions::precision) and the halo exchange on device
// buffers (train/src/cuda/device_halo_exchanger.hpp). Defined in cuda/gpu_trainer.cpp; a
// CPU-only build's definition throws.
#pragma once

#include "halogen/comm/communicator.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/trainer.hpp"

namespace halogen::train_detail {

/// Collective over `comm`. The calling thread's current device is used (select_local_device
/// first). With an NcclCommunicator the halos and gradients move between device buffers;
/// with another backend they are staged through pinned host memory.
TrainResult train_gpu(const Shard& shard, Communicator& comm, const TrainOptions& options);

}  // namespace halogen::train_detail
