#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/comm/device_binding.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"

namespace halogen {

namespace {

std::string visibility(const char* cuda_visible_devices) {
  return cuda_visible_devices == nullptr ? std::string("unset") : fmt::format("'{}'", cuda_visible_devices);
}

}  // namespace

DeviceBinding choose_device(const DeviceBindingInput& in) {
  const int gpus = in.visible_gpus;
  if (in.halogen_device != nullptr && in.halogen_device[0] != '\0') {
    const std::string_view text(in.halogen_device);
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ordinal);
    HALOGEN_EXPECTS(ec == std::errc() && end == text.data() + text.size() && ordinal >= 0,
                    "HALOGEN_DEVICE='{}' on rank {} is not a device ordinal: expected an integer in [0, {})", text,
                    in.rank, gpus);
    HALOGEN_EXPECTS(ordinal < gpus,
                    "HALOGEN_DEVICE={} on rank {} but only {} GPUs are visible (CUDA_VISIBLE_DEVICES {})", ordinal,
                    in.rank, gpus, visibility(in.cuda_visible_devices));
    return {ordinal, true};
  }
  HALOGEN_EXPECTS(gpus > 0,
                  "rank {} sees no CUDA device (CUDA_VISIBLE_DEVICES {}); run with --device cpu or on a GPU node",
                  in.rank, visibility(in.cuda_visible_devices));
  if (in.local.local_size <= gpus) return {in.local.local_rank, false};
  if (in.cuda_visible_devices != nullptr) return {in.local.local_rank % gpus, false};
  HALOGEN_FAIL(
      "rank {} is local rank {} of {} on this node but only {} GPUs are visible; run at most {} ranks per node or set "
      "HALOGEN_DEVICE",
      in.rank, in.local.local_rank, in.local.local_size, gpus, gpus);
}

int find_shared_gpu(std::span<const BoundGpu> node, int self) {
  const BoundGpu& mine = node[static_cast<size_t>(self)];
  if (mine.explicit_choice) return -1;
  for (size_t other = 0; other < node.size(); ++other) {
    if (static_cast<int>(other) == self || node[other].explicit_choice) continue;
    if (node[other].uuid == mine.uuid) return static_cast<int>(other);
  }
  return -1;
}

int select_local_device(MPI_Comm comm) {
#if HALOGEN_HAVE_CUDA
  int rank = 0;
  HALOGEN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  MPI_Comm node_comm = MPI_COMM_NULL;
  HALOGEN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_comm));
  LocalRankInfo local;
  MPI_Comm_rank(node_comm, &local.local_rank);
  MPI_Comm_size(node_comm, &local.local_size);

  // Each step records its failure instead of throwing, so that every rank reaches the
  // collectives below and all fail together.
  std::string error;
  DeviceBinding binding;
  BoundGpu mine;
  try {
    DeviceBindingInput in;
    in.rank = rank;
    in.local = local;
    in.visible_gpus = cuda_device_count();
    in.halogen_device = std::getenv("HALOGEN_DEVICE");
    in.cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES");
    binding = choose_device(in);
    HALOGEN_CHECK_CUDA(cudaSetDevice(binding.device));
    cudaDeviceProp prop{};
    HALOGEN_CHECK_CUDA(cudaGetDeviceProperties(&prop, binding.device));
    static_assert(sizeof(prop.uuid.bytes) == 16);
    std::memcpy(mine.uuid.data(), prop.uuid.bytes, 16);
    mine.explicit_choice = binding.explicit_choice;
  } catch (const Error& e) {
    error = e.what();
  }

  // The shared-GPU check among the node's ranks (only between ranks that chose a device).
  struct Wire {
    uint8_t uuid[16];
    int32_t explicit_choice;
    int32_t ok;
  };
  Wire w{};
  std::memcpy(w.uuid, mine.uuid.data(), 16);
  w.explicit_choice = mine.explicit_choice ? 1 : 0;
  w.ok = error.empty() ? 1 : 0;
  std::vector<Wire> all(static_cast<size_t>(local.local_size));
  const int gather_status = MPI_Allgather(&w, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, node_comm);
  MPI_Comm_free(&node_comm);
  HALOGEN_CHECK_MPI(gather_status);
  if (error.empty()) {
    std::vector<BoundGpu> node;
    std::vector<int> node_rank;  // index in `node` -> local rank
    int self = -1;
    for (int l = 0; l < local.local_size; ++l) {
      const Wire& x = all[static_cast<size_t>(l)];
      if (!x.ok) continue;
      if (l == local.local_rank) self = static_cast<int>(node.size());
      BoundGpu g;
      std::memcpy(g.uuid.data(), x.uuid, 16);
      g.explicit_choice = x.explicit_choice != 0;
      node.push_back(g);
      node_rank.push_back(l);
    }
    if (const int other = find_shared_gpu(node, self); other >= 0) {
      error = fmt::format(
          "rank {} is local rank {} of {} on this node and would share its GPU (device {} of the {} it sees, "
          "CUDA_VISIBLE_DEVICES {}) with local rank {}; give each rank its own GPU, or set HALOGEN_DEVICE to share one "
          "deliberately",
          rank, local.local_rank, local.local_size, binding.device, cuda_device_count(),
          visibility(std::getenv("CUDA_VISIBLE_DEVICES")), node_rank[static_cast<size_t>(other)]);
    }
  }

  // Agree across the job: the lowest failing rank is named by the others.
  int failed_rank = error.empty() ? INT32_MAX : rank;
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &failed_rank, 1, MPI_INT, MPI_MIN, comm));
  if (!error.empty()) throw Error(error);
  HALOGEN_EXPECTS(failed_rank == INT32_MAX, "GPU selection failed on rank {} (see its error)", failed_rank);
  return binding.device;
#else
  (void)comm;
  HALOGEN_FAIL("select_local_device: this halogen was built without CUDA");
#endif
}

}  // namespace halogen
