// All-to-all exchange of variable-size blocks and small helpers shared by the distributed
// writer (distributed.cpp) and the label propagation partitioner (lp_*.cpp).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "halogen/core/buffer.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen::detail {

struct Ranks {
  int rank = 0, size = 1;
  explicit Ranks(MPI_Comm comm) {
    HALOGEN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    HALOGEN_CHECK_MPI(MPI_Comm_size(comm, &size));
  }
};

// Every rank's parts of its slice (slice_bounds(n, ranks)) gathered into the assignment of all
// n nodes, the same on every rank. Collective.
inline std::vector<int32_t> allgather_slice_parts(const std::vector<int32_t>& local, int64_t n, MPI_Comm comm) {
  const Ranks ranks(comm);
  const std::vector<int64_t> bounds = slice_bounds(n, ranks.size);
  std::vector<int> counts(static_cast<size_t>(ranks.size)), displs(static_cast<size_t>(ranks.size));
  for (size_t r = 0; r < counts.size(); ++r) {
    displs[r] = static_cast<int>(bounds[r]);
    counts[r] = static_cast<int>(bounds[r + 1] - bounds[r]);
  }
  std::vector<int32_t> part_of(static_cast<size_t>(n));
  HALOGEN_CHECK_MPI(MPI_Allgatherv(local.data(), static_cast<int>(local.size()), MPI_INT32_T, part_of.data(),
                                   counts.data(), displs.data(), MPI_INT32_T, comm));
  return part_of;
}

// An MPI datatype of `bytes` contiguous bytes, freed on scope exit.
class BlockType {
 public:
  explicit BlockType(size_t bytes) {
    HALOGEN_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type_));
    HALOGEN_CHECK_MPI(MPI_Type_commit(&type_));
  }
  ~BlockType() { MPI_Type_free(&type_); }
  BlockType(const BlockType&) = delete;
  BlockType& operator=(const BlockType&) = delete;
  MPI_Datatype get() const noexcept { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// HALOGEN_EXCHANGE_CHUNK=N (elements) forces the point-to-point path with N-element messages
// (tests use it; a billion-edge run takes it by itself once a buffer passes 2^31 elements).
inline int64_t forced_chunk() {
  const char* e = std::getenv("HALOGEN_EXCHANGE_CHUNK");
  return e != nullptr ? std::atoll(e) : 0;
}

// All-to-all of variable-size blocks: `send` holds the block for rank 0, then rank 1, ...
// (`send_counts` elements each). Returns the received blocks in rank order, their sizes in
// `recv_counts`. MPI_Alltoallv when every count and displacement fits its int arguments on
// every rank; otherwise (or forced) non-blocking sends and receives of at most 2^30 bytes.
template <typename T>
HostBuffer<T> exchange(const T* send, const std::vector<int64_t>& send_counts, std::vector<int64_t>& recv_counts,
                       MPI_Comm comm) {
  const Ranks ranks(comm);
  const auto size = static_cast<size_t>(ranks.size);
  recv_counts.assign(size, 0);
  HALOGEN_CHECK_MPI(MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, recv_counts.data(), 1, MPI_INT64_T, comm));
  std::vector<int64_t> sdispl(size + 1, 0), rdispl(size + 1, 0);
  for (size_t r = 0; r < size; ++r) {
    sdispl[r + 1] = sdispl[r] + send_counts[r];
    rdispl[r + 1] = rdispl[r] + recv_counts[r];
  }
  HostBuffer<T> recv(static_cast<size_t>(rdispl[size]));
  const BlockType type(sizeof(T));
  const int64_t forced = forced_chunk();
  int fits = forced <= 0 && sdispl[size] <= INT_MAX && rdispl[size] <= INT_MAX ? 1 : 0;
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, comm));
  if (fits != 0) {
    std::vector<int> sc(size), sd(size), rc(size), rd(size);
    for (size_t r = 0; r < size; ++r) {
      sc[r] = static_cast<int>(send_counts[r]);
      sd[r] = static_cast<int>(sdispl[r]);
      rc[r] = static_cast<int>(recv_counts[r]);
      rd[r] = static_cast<int>(rdispl[r]);
    }
    HALOGEN_CHECK_MPI(
        MPI_Alltoallv(send, sc.data(), sd.data(), type.get(), recv.data(), rc.data(), rd.data(), type.get(), comm));
    return recv;
  }
  // Messages between two ranks with one tag arrive in order, so the pieces need no numbering.
  const int64_t chunk =
      forced > 0 ? forced : std::max<int64_t>(1, std::min<int64_t>(INT_MAX, (int64_t{1} << 30) / sizeof(T)));
  std::vector<MPI_Request> requests;
  for (size_t r = 0; r < size; ++r) {
    for (int64_t off = 0; off < recv_counts[r]; off += chunk) {
      requests.emplace_back();
      HALOGEN_CHECK_MPI(MPI_Irecv(recv.data() + rdispl[r] + off,
                                  static_cast<int>(std::min(chunk, recv_counts[r] - off)), type.get(),
                                  static_cast<int>(r), 0, comm, &requests.back()));
    }
  }
  for (size_t r = 0; r < size; ++r) {
    for (int64_t off = 0; off < send_counts[r]; off += chunk) {
      requests.emplace_back();
      HALOGEN_CHECK_MPI(MPI_Isend(send + sdispl[r] + off, static_cast<int>(std::min(chunk, send_counts[r] - off)),
                                  type.get(), static_cast<int>(r), 0, comm, &requests.back()));
    }
  }
  HALOGEN_CHECK_MPI(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  return recv;
}

// SplitMix64's finaliser: a bijection of 64-bit words that mixes every bit.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace halogen::detail
