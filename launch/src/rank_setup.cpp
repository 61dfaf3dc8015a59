// What every distributed subcommand (train, predict, evaluate) does first on each rank: get
// its shard and its communicator.
#include <fstream>
#include <memory>

#include "cli.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/comm/device_binding.hpp"
#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen::cli {

namespace {

// Rank 0 loads the dataset, partitions it with METIS in memory and sends each rank its shard.
Shard scatter_partitioned_dataset(const std::string& path, int rank, int size, uint64_t seed) {
  std::vector<std::string> blobs;
  run_collectively(MPI_COMM_WORLD, "partitioning the dataset on rank 0", [&] {
    if (rank != 0) return;
    const Dataset ds = load_dataset(path);
    PartitionOptions popt;
    popt.num_parts = size;
    popt.seed = seed;
    const auto part = partition_graph(ds, popt);
    auto shards = build_shards(ds, part, size);
    blobs.reserve(shards.size());
    for (const auto& s : shards) blobs.push_back(serialize_shard(s));
  });
  auto bytes = std::make_shared<std::string>(scatter_blobs(blobs, 0, MPI_COMM_WORLD));
  Shard shard;
  run_collectively(MPI_COMM_WORLD, "receiving the shard", [&] {
    shard = deserialize_shard(reinterpret_cast<const std::byte*>(bytes->data()), bytes->size(), bytes,
                              fmt::format("shard {} from rank 0", rank));
  });
  return shard;
}

}  // namespace

Shard load_rank_shard(const std::string& parts_dir, const std::string& dataset, int rank, int size, uint64_t seed) {
  if (parts_dir.empty()) return scatter_partitioned_dataset(dataset, rank, size, seed);
  Shard shard;
  run_collectively(MPI_COMM_WORLD, "loading shards", [&] {
    const auto file = shard_path(parts_dir, rank, size);
    if (!std::filesystem::exists(file)) {
      std::string hint;
      if (std::filesystem::exists(std::filesystem::path(parts_dir) / "partition.json")) {
        try {
          const auto report = nlohmann::json::parse(std::ifstream(std::filesystem::path(parts_dir) / "partition.json"));
          hint = fmt::format("; {} holds a partition into {} parts, so run with mpirun -np {}", parts_dir,
                             report.value("num_parts", 0), report.value("num_parts", 0));
        } catch (...) {
        }
      }
      HALOGEN_FAIL("rank {} of {}: no shard '{}'{}", rank, size, file.string(), hint);
    }
    shard = read_shard(file);
  });
  return shard;
}

std::unique_ptr<Communicator> make_communicator(Device device, const std::string& comm_name) {
  // The GPU path binds each rank to its node-local GPU, then talks NCCL between device buffers
  // (or MPI through pinned host memory).
  std::unique_ptr<Communicator> comm;
  if (device == Device::kCuda) {
    select_local_device(MPI_COMM_WORLD);
#if HALOGEN_HAVE_NCCL
    if (comm_name != "mpi") comm = std::make_unique<NcclCommunicator>(MPI_COMM_WORLD);
#endif
  }
  if (!comm) comm = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  return comm;
}

}  // namespace halogen::cli
