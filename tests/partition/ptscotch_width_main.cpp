// Prints the PT-Scotch assignment halogen computes for a fixed graph, for comparing builds:
// tests/partition/CMakeLists.txt compiles this file twice, once with partition/src/ptscotch.cpp
// against Debian's default 32-bit Scotch (ptscotch_width32) and once against the build's own
// (ptscotch_width, 64-bit), and ptscotch_width_test.sh compares what they print. The two are
// not the same assignment: Scotch draws its random numbers as unsigned values of SCOTCH_Num's
// width (intRandVal: UINT % range), so the 64-bit build makes other random choices from the
// same seed; the test compares the quality instead (cut and balance).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "halogen/core/io.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/partition/partitioner.hpp"

extern "C" int SCOTCH_numSizeof(void);  // the Scotch library this program runs with

int main(int argc, char** argv) {
  using namespace halogen;
  MpiSession mpi(&argc, &argv);
  // A ring plus three pseudo-random chords per node, symmetrised: rows sorted and unique.
  // Arguments: NODES (a ring with chords), or "rmat SCALE".
  const bool rmat = argc > 2 && std::string(argv[1]) == "rmat";
  const int rmat_scale = rmat ? std::atoi(argv[2]) : 0;
  const int64_t n = rmat ? int64_t{1} << rmat_scale : argc > 1 ? std::atoll(argv[1]) : 20000;
  std::vector<std::vector<NodeId>> adj(static_cast<size_t>(n));
  auto add = [&](int64_t a, int64_t b) {
    if (a == b) return;
    adj[static_cast<size_t>(a)].push_back(static_cast<NodeId>(b));
    adj[static_cast<size_t>(b)].push_back(static_cast<NodeId>(a));
  };
  if (rmat_scale > 0) {
    // RMAT (Graph500 a, b, c) with edge factor 16, for timing the two builds on a power-law graph.
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int64_t e = 0; e < 16 * n; ++e) {
      int64_t src = 0, dst = 0;
      for (int level = 0; level < rmat_scale; ++level) {
        const double r = uniform(rng);
        const int quadrant = r < 0.57 ? 0 : r < 0.76 ? 1 : r < 0.95 ? 2 : 3;
        src = 2 * src + (quadrant >= 2);
        dst = 2 * dst + (quadrant % 2);
      }
      add(src, dst);
    }
  } else {
    for (int64_t v = 0; v < n; ++v) {
      add(v, (v + 1) % n);
      for (uint64_t k = 1; k <= 3; ++k) {
        add(v, static_cast<int64_t>((static_cast<uint64_t>(v) * 2654435761u * k + 97 * k) % n));
      }
    }
  }
  for (auto& row : adj) {
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
  }
  const std::vector<int64_t> bounds = slice_bounds(n, mpi.size());
  const int64_t begin = bounds[static_cast<size_t>(mpi.rank())], end = bounds[static_cast<size_t>(mpi.rank()) + 1];
  std::vector<EdgeIdx> offsets{0};
  std::vector<NodeId> indices;
  for (int64_t v = begin; v < end; ++v) {
    indices.insert(indices.end(), adj[static_cast<size_t>(v)].begin(), adj[static_cast<size_t>(v)].end());
    offsets.push_back(static_cast<EdgeIdx>(indices.size()));
  }
  PartitionOptions o;
  o.method = PartitionMethod::kPtScotch;
  o.num_parts = 8;
  o.seed = 5;
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  const std::vector<int32_t> local =
      ptscotch_partition_rows("width-test", n, offsets.data(), indices.data(), o, MPI_COMM_WORLD);
  const double seconds = MPI_Wtime() - start;
  std::vector<int> counts(static_cast<size_t>(mpi.size())), displs(static_cast<size_t>(mpi.size()));
  for (int r = 0; r < mpi.size(); ++r) {
    displs[static_cast<size_t>(r)] = static_cast<int>(bounds[static_cast<size_t>(r)]);
    counts[static_cast<size_t>(r)] =
        static_cast<int>(bounds[static_cast<size_t>(r) + 1] - bounds[static_cast<size_t>(r)]);
  }
  std::vector<int32_t> part_of(static_cast<size_t>(n));
  MPI_Gatherv(local.data(), static_cast<int>(local.size()), MPI_INT32_T, part_of.data(), counts.data(), displs.data(),
              MPI_INT32_T, 0, MPI_COMM_WORLD);
  if (mpi.rank() == 0) {
    std::vector<int64_t> sizes(8, 0);
    for (int32_t p : part_of) sizes[static_cast<size_t>(p)]++;
    std::printf("scotch_num_bytes %d\n", SCOTCH_numSizeof());
    std::printf("assignment %016llx\n",
                static_cast<unsigned long long>(checksum64(part_of.data(), part_of.size() * sizeof(int32_t))));
    // Edge cut (undirected pairs) and the folded weight's imbalance (ptscotch.cpp's vertex
    // weight: rounded mean degree + degree), which Scotch keeps within o.imbalance.
    int64_t cut = 0, edges = 0;
    std::vector<double> load(8, 0.0);
    int64_t entries = 0;
    for (const auto& row : adj) entries += static_cast<int64_t>(row.size());
    const double unit = std::max(1.0, std::round(static_cast<double>(entries) / static_cast<double>(n)));
    for (int64_t v = 0; v < n; ++v) {
      load[static_cast<size_t>(part_of[static_cast<size_t>(v)])] +=
          unit + static_cast<double>(adj[static_cast<size_t>(v)].size());
      for (NodeId u : adj[static_cast<size_t>(v)]) {
        if (u < v) {
          ++edges;
          cut += part_of[static_cast<size_t>(u)] != part_of[static_cast<size_t>(v)];
        }
      }
    }
    double total = 0.0, most = 0.0;
    for (double l : load) {
      total += l;
      most = std::max(most, l);
    }
    std::printf("cut %lld of %lld\n", static_cast<long long>(cut), static_cast<long long>(edges));
    std::printf("imbalance %.4f\n", most / (total / 8.0));
    if (rmat) std::printf("partition_seconds %.2f\n", seconds);  // only with rmat: timings vary
  }
  return 0;
}
