// Local rank -> GPU binding for the CUDA path (one rank per GPU).
//
// Policy, in order:
//  1. HALOGEN_DEVICE=<ordinal> in the environment picks the device explicitly (ordinals count
//     the devices this process sees, i.e. after CUDA_VISIBLE_DEVICES). Ranks may then share a
//     GPU deliberately.
//  2. Otherwise, with at least as many visible GPUs as ranks on this node, local rank L gets
//     device L.
//  3. Otherwise, when CUDA_VISIBLE_DEVICES is set (a launcher such as srun --gpus-per-task
//     or a wrapper script gave each rank its own devices), local rank L gets device L mod G.
//  4. Otherwise it is an error: "rank R is local rank L of N on this node but only G GPUs are
//     visible; run at most G ranks per node or set HALOGEN_DEVICE".
// Every choice not made explicitly is then checked across the node: two ranks that would
// share one physical GPU (same UUID) are an error, whatever the visibility settings.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <span>

#include "halogen/comm/communicator.hpp"

namespace halogen {

/// What the policy looks at (pure data, so it can be tested without GPUs or MPI).
struct DeviceBindingInput {
  int rank = 0;                                // in the job, for messages
  LocalRankInfo local;                         // among the ranks of this node
  int visible_gpus = 0;                        // devices this process sees
  const char* halogen_device = nullptr;        // HALOGEN_DEVICE, nullptr when unset
  const char* cuda_visible_devices = nullptr;  // CUDA_VISIBLE_DEVICES, nullptr when unset
};

struct DeviceBinding {
  int device = 0;
  bool explicit_choice = false;  // from HALOGEN_DEVICE: sharing a GPU is allowed
};

/// Applies steps 1-4 of the policy; throws halogen::Error with the messages above.
DeviceBinding choose_device(const DeviceBindingInput& in);

/// The node's view of one rank's choice, for the shared-GPU check.
struct BoundGpu {
  std::array<uint8_t, 16> uuid{};
  bool explicit_choice = false;
};

/// The local rank other than `self` that holds the same GPU as `self` when neither chose
/// explicitly, or -1 when `self`'s GPU is its own.
int find_shared_gpu(std::span<const BoundGpu> node, int self);

/// Collective over `comm`: chooses this rank's device (policy above), makes it current for
/// the calling thread and returns its ordinal. All ranks fail together: the rank whose
/// choice failed throws its own message, the others name it. CPU-only builds throw.
int select_local_device(MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace halogen
