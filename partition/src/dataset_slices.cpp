#include "dataset_slices.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "mpi_exchange.hpp"

namespace halogen::detail {

namespace {

namespace fs = std::filesystem;

// Node rows of features written at a time.
constexpr size_t kFeatureRoundBytes = size_t{8} << 20;

// pwrite of all `bytes`, or an error naming the file.
void write_at(const fs::path& file, uint64_t offset, const void* data, size_t bytes) {
  if (bytes == 0) return;
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  HALOGEN_EXPECTS(fd >= 0, "cannot open '{}': {}", file.string(), std::strerror(errno));
  const char* p = static_cast<const char*>(data);
  std::string error;
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min<size_t>(bytes, size_t{1} << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = fmt::format("write to '{}' at byte {} failed: {}", file.string(), offset, std::strerror(errno));
      break;
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  // No fsync here: the rank that seals the file fsyncs it once, with every rank's writes.
  ::close(fd);
  HALOGEN_EXPECTS(error.empty(), "{}", error);
}

template <typename T>
void write_elements(const fs::path& dir, std::string_view array, int64_t first, const T* data, size_t count) {
  write_at(dir / array_file_name(array), kArrayHeaderBytes + static_cast<uint64_t>(first) * sizeof(T), data,
           count * sizeof(T));
}

}  // namespace

SlicedDatasetWriter::SlicedDatasetWriter(const fs::path& out, bool overwrite, MPI_Comm comm,
                                         CollectiveStep collectively)
    : comm_(comm), collectively_(std::move(collectively)) {
  const Ranks ranks(comm);
  collectively_("checking the output directory", [&] {
    if (ranks.rank == 0) target_ = prepare_dataset_target(out, overwrite);
  });
}

SlicedDatasetWriter::~SlicedDatasetWriter() {
  if (!installed_ && !target_.temp.empty()) {
    std::error_code ec;
    fs::remove_all(target_.temp, ec);
  }
}

void SlicedDatasetWriter::write(DatasetSlice& slice) {
  const Ranks ranks(comm_);
  const int64_t n = slice.num_nodes, begin = slice.begin, end = slice.end, rows = end - begin;
  std::vector<uint64_t>& pairs = slice.pairs;
  const auto entries = static_cast<int64_t>(pairs.size());
  int64_t before = 0, total = 0;
  HALOGEN_CHECK_MPI(MPI_Exscan(&entries, &before, 1, MPI_INT64_T, MPI_SUM, comm_));
  if (ranks.rank == 0) before = 0;
  HALOGEN_CHECK_MPI(MPI_Allreduce(&entries, &total, 1, MPI_INT64_T, MPI_SUM, comm_));
  // The rows' offsets, and their columns compacted in place into the front of `pairs` (4 bytes
  // written at 4k, below the 8 bytes at 8k read before), so the indices never sit beside a
  // second copy of the pairs.
  HostBuffer<int64_t> offsets(static_cast<size_t>(rows) + 1);
  char* const columns = reinterpret_cast<char*>(pairs.data());
  {
    size_t k = 0;
    for (int64_t i = 0; i < rows; ++i) {
      offsets[static_cast<size_t>(i)] = before + static_cast<int64_t>(k);
      while (k < pairs.size() && static_cast<int64_t>(pairs[k] >> 32) == i) {
        const auto column = static_cast<int32_t>(pairs[k] & 0xffffffffu);
        std::memcpy(columns + k * sizeof(int32_t), &column, sizeof(column));
        ++k;
      }
    }
    offsets[static_cast<size_t>(rows)] = before + entries;
  }

  std::string temp = target_.temp.string();
  int length = static_cast<int>(temp.size());
  HALOGEN_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, comm_));
  temp.resize(static_cast<size_t>(length));
  HALOGEN_CHECK_MPI(MPI_Bcast(temp.data(), length, MPI_CHAR, 0, comm_));
  const fs::path dir = temp;
  const int64_t F = slice.feature_dim;
  const LabelKind kind = slice.label_kind;
  const bool classes = kind == LabelKind::kClass;
  const int64_t label_width = classes ? 1 : slice.num_classes;
  const std::array<std::string_view, 5> arrays = dataset_arrays(kind);
  const std::array<uint64_t, 5> counts = {static_cast<uint64_t>(n) + 1, static_cast<uint64_t>(total),
                                          static_cast<uint64_t>(n * F), static_cast<uint64_t>(n * label_width),
                                          static_cast<uint64_t>(n)};
  step("creating the dataset's files", [&] {
    if (ranks.rank != 0) return;
    for (size_t a = 0; a < arrays.size(); ++a) create_array_file(dir, arrays[a], counts[a]);
  });

  std::array<int64_t, 3> split_counts{};
  step("writing the dataset's slices", [&] {
    // The last rank's offsets include the final one (the total).
    write_elements(dir, "offsets", begin, offsets.data(), static_cast<size_t>(rows) + (end == n ? 1 : 0));
    write_at(dir / array_file_name("indices"), kArrayHeaderBytes + static_cast<uint64_t>(offsets[0]) * sizeof(int32_t),
             columns, static_cast<size_t>(entries) * sizeof(int32_t));
    const int64_t round_rows =
        std::max<int64_t>(1, static_cast<int64_t>(kFeatureRoundBytes / sizeof(float)) / std::max<int64_t>(F, 1));
    HostBuffer<float> features(static_cast<size_t>(std::min(rows, round_rows) * F));
    for (int64_t v0 = begin; v0 < end && F > 0; v0 += round_rows) {
      const int64_t v1 = std::min(end, v0 + round_rows);
      slice.features(v0, v1, features.data());
      write_elements(dir, "features", v0 * F, features.data(), static_cast<size_t>((v1 - v0) * F));
    }
    if (slice.after_features) slice.after_features();
    HALOGEN_EXPECTS(static_cast<int64_t>(slice.split.size()) == rows,
                    "dataset slice [{}, {}): {} split roles, expected {}", begin, end, slice.split.size(), rows);
    for (uint8_t role : slice.split)
      if (role >= 1 && role <= 3) split_counts[role - 1]++;
    if (classes) {
      HALOGEN_EXPECTS(static_cast<int64_t>(slice.labels.size()) == rows && slice.targets.empty(),
                      "dataset slice [{}, {}): {} labels and {} targets, expected {} labels", begin, end,
                      slice.labels.size(), slice.targets.size(), rows);
      write_elements(dir, "labels", begin, slice.labels.data(), slice.labels.size());
    } else {
      HALOGEN_EXPECTS(static_cast<int64_t>(slice.targets.size()) == rows * label_width && slice.labels.empty(),
                      "dataset slice [{}, {}): {} targets and {} labels, expected {} rows x {} targets", begin, end,
                      slice.targets.size(), slice.labels.size(), rows, label_width);
      check_targets(kind, slice.targets.span(), slice.num_classes, begin, fmt::format("dataset '{}'", slice.name));
      write_elements(dir, "targets", begin * label_width, slice.targets.data(), slice.targets.size());
    }
    write_elements(dir, "split", begin, slice.split.data(), slice.split.size());
  });
  pairs = {};
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, split_counts.data(), 3, MPI_INT64_T, MPI_SUM, comm_));

  // Every array sealed by one rank (each reads its file once), the checksums gathered on all.
  std::array<uint64_t, 5> checksums{};
  step("sealing the dataset's arrays", [&] {
    for (size_t a = 0; a < arrays.size(); ++a)
      if (static_cast<int>(a) % ranks.size == ranks.rank) checksums[a] = seal_array_file(dir, arrays[a], counts[a]);
  });
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, checksums.data(), 5, MPI_UINT64_T, MPI_BOR, comm_));
  step("installing the dataset", [&] {
    if (ranks.rank != 0) return;
    nlohmann::json files = nlohmann::json::object();
    for (size_t a = 0; a < arrays.size(); ++a)
      files[std::string(arrays[a])] = array_entry(arrays[a], counts[a], checksums[a]);
    const nlohmann::json meta = dataset_meta(slice.name, n, total, F, slice.num_classes, split_counts, files, kind);
    write_file_atomic(dir / "meta.json", meta.dump(2) + "\n");
    install_dataset_target(target_);
    installed_ = true;
  });
}

}  // namespace halogen::detail
