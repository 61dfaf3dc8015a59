// The fused send (quant/quantize_fused.hpp) must produce, for every peer, exactly the CPU
// quantizer's message of that peer's gathered rows, followed by their fp32 tail columns, and
// report non-finite input with the CPU's row, column and value. Skips without a GPU; compiles
// to a single skipped test in CPU-only builds.
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/quant/quantize_fused.hpp"

namespace halogen::quant {
namespace {

using cuda::DeviceBuffer;

/// One exchange's send side: a local matrix, and per peer the local rows it is sent.
struct Exchange {
  int64_t local_rows = 0, cols = 0, tail = 0, ld = 0;
  std::vector<std::vector<int32_t>> peer_rows;  // per peer
  std::vector<float> local;                     // local_rows x ld (fp16-representable when fp16)
};

/// Values spread over magnitudes (rows differ in range), with a constant row and a zero row.
/// Peer q gets counts[q] rows; local row 0 is sent `hub` times in all (a row of high degree
/// repeats in the send lists), the others drawn at random.
Exchange make_exchange(const std::vector<int64_t>& counts, int64_t cols, int64_t tail, int64_t pad, int64_t hub,
                       bool fp16, float magnitude, uint64_t seed) {
  Exchange ex;
  ex.local_rows = 64;
  ex.cols = cols;
  ex.tail = tail;
  ex.ld = cols + tail + pad;
  ex.local.assign(static_cast<size_t>(ex.local_rows * ex.ld), 0.0f);
  const RngStream rng = RngStream::make(seed, RngPurpose::kGenerator);
  for (int64_t r = 0; r < ex.local_rows; ++r) {
    for (int64_t c = 0; c < cols + tail; ++c) {
      const Philox4x32 b = rng.bits(static_cast<uint32_t>(r), static_cast<uint32_t>(c), 0, 0);
      const float u = uniform_from_bits(b.v[0]) * 2.0f - 1.0f;
      const float row_scale = std::ldexp(1.0f, static_cast<int>(b.v[1] % 12) - 6);
      float v = magnitude * row_scale * u;
      if (r == 1) v = 0.75f * magnitude;
      if (r == 2) v = 0.0f;
      if (fp16) v = __half2float(__float2half_rn(v));
      ex.local[static_cast<size_t>(r * ex.ld + c)] = v;
    }
  }
  int64_t hubs_left = hub;
  int64_t draw = 0;
  for (const int64_t n : counts) {
    std::vector<int32_t> rows;
    for (int64_t i = 0; i < n; ++i) {
      const Philox4x32 b = rng.bits(0xffffu, static_cast<uint32_t>(draw++), 1, 0);
      rows.push_back(hubs_left-- > 0 ? 0 : static_cast<int32_t>(b.v[0] % static_cast<uint32_t>(ex.local_rows)));
    }
    ex.peer_rows.push_back(std::move(rows));
  }
  return ex;
}

QuantKey test_key(int bits) {
  QuantKey key;
  key.seed = 42;
  key.epoch = 5;
  key.layer = 2;
  key.direction = bits % 2 ? Direction::kForward : Direction::kBackward;
  key.rank = 3;
  return key;
}

/// The CPU's words: per peer with rows, quantize_rows of its gathered rows, then their tails.
std::vector<uint32_t> cpu_words(const Exchange& ex, int bits, const QuantKey& key) {
  std::vector<uint32_t> out;
  for (size_t q = 0; q < ex.peer_rows.size(); ++q) {
    const auto& rows = ex.peer_rows[q];
    const auto n = static_cast<int64_t>(rows.size());
    if (n == 0) continue;
    std::vector<float> gathered(static_cast<size_t>(n * (ex.cols + ex.tail)));
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(&gathered[static_cast<size_t>(i * (ex.cols + ex.tail))],
                  &ex.local[static_cast<size_t>(rows[static_cast<size_t>(i)] * ex.ld)],
                  static_cast<size_t>(ex.cols + ex.tail) * sizeof(float));
    }
    QuantKey k = key;
    k.peer = static_cast<uint32_t>(q);
    const size_t words = packed_words(bits, n, ex.cols);
    const size_t start = out.size();
    out.resize(start + words + static_cast<size_t>(n * ex.tail));
    quantize_rows<kDevCpu>(gathered.data(), n, ex.cols, ex.cols + ex.tail, bits, k, out.data() + start);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < ex.tail; ++c) {
        out[start + words + static_cast<size_t>(i * ex.tail + c)] =
            std::bit_cast<uint32_t>(gathered[static_cast<size_t>(i * (ex.cols + ex.tail) + ex.cols + c)]);
      }
    }
  }
  return out;
}

/// The fused send on the device: its words and the status it left.
struct FusedResult {
  std::vector<uint32_t> words;
  NonFiniteStatus status{};
};

FusedResult fused_words(const Exchange& ex, int bits, const QuantKey& key, bool fp16, size_t expected_words,
                        const NonFiniteStatus& status_before = NonFiniteStatus{}) {
  std::vector<int32_t> source, row_peer;
  std::vector<int64_t> peer_rows(1, 0);
  for (size_t q = 0; q < ex.peer_rows.size(); ++q) {
    source.insert(source.end(), ex.peer_rows[q].begin(), ex.peer_rows[q].end());
    row_peer.insert(row_peer.end(), ex.peer_rows[q].size(), static_cast<int32_t>(q));
    peer_rows.push_back(peer_rows.back() + static_cast<int64_t>(ex.peer_rows[q].size()));
  }
  auto source_dev = DeviceBuffer<int32_t>::from_host(source);
  auto row_peer_dev = DeviceBuffer<int32_t>::from_host(row_peer);
  auto peer_rows_dev = DeviceBuffer<int64_t>::from_host(peer_rows);
  SendRowMap map;
  map.source_rows = source_dev.data();
  map.row_peer = row_peer_dev.data();
  map.peer_rows = peer_rows_dev.data();
  map.rows = static_cast<int64_t>(source.size());
  map.num_peers = static_cast<int>(ex.peer_rows.size());
  DeviceBuffer<unsigned char> scratch(fused_send_scratch_bytes(map.rows, map.num_peers));
  // Poisoned, so that a word the kernel fails to write shows.
  auto out = DeviceBuffer<uint32_t>::from_host(std::vector<uint32_t>(expected_words, 0xdeadbeefu));
  auto status = DeviceBuffer<NonFiniteStatus>::from_host(std::vector<NonFiniteStatus>{status_before});
  cudaStream_t stream;
  HALOGEN_CHECK_CUDA(cudaStreamCreate(&stream));
  if (fp16) {
    std::vector<__half> local(ex.local.size());
    for (size_t i = 0; i < local.size(); ++i) local[i] = __float2half_rn(ex.local[i]);
    auto local_dev = DeviceBuffer<__half>::from_host(local);
    quantize_send_fused(local_dev.data(), ex.ld, ex.cols, ex.tail, bits, key, map, scratch.data(), out.data(),
                        status.data(), stream);
    HALOGEN_CHECK_CUDA(cudaStreamSynchronize(stream));
  } else {
    auto local_dev = DeviceBuffer<float>::from_host(ex.local);
    quantize_send_fused(local_dev.data(), ex.ld, ex.cols, ex.tail, bits, key, map, scratch.data(), out.data(),
                        status.data(), stream);
    HALOGEN_CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  HALOGEN_CHECK_CUDA(cudaStreamDestroy(stream));
  return FusedResult{out.to_host(), status.to_host()[0]};
}

class QuantFused : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

struct Case {
  std::vector<int64_t> counts;
  int64_t cols, tail, pad, hub;
  bool fp16;
  float magnitude;
};

void expect_same_words(const Case& c, int bits) {
  const Exchange ex = make_exchange(c.counts, c.cols, c.tail, c.pad, c.hub, c.fp16, c.magnitude,
                                    7 + static_cast<uint64_t>(c.cols) + static_cast<uint64_t>(c.counts.size()));
  const QuantKey key = test_key(bits);
  const auto cpu = cpu_words(ex, bits, key);
  const FusedResult gpu = fused_words(ex, bits, key, c.fp16, cpu.size());
  EXPECT_EQ(gpu.status.flagged, 0u);
  size_t first_mismatch = cpu.size();
  for (size_t i = 0; i < cpu.size() && first_mismatch == cpu.size(); ++i) {
    if (cpu[i] != gpu.words[i]) first_mismatch = i;
  }
  ASSERT_EQ(first_mismatch, cpu.size()) << c.counts.size() << " peers, " << c.cols << " columns + " << c.tail
                                        << " fp32, ld pad " << c.pad << ", hub " << c.hub << ", fp16 " << c.fp16
                                        << ", magnitude " << c.magnitude << ", " << bits << " bits: word "
                                        << first_mismatch << " cpu " << std::hex << cpu[first_mismatch] << " gpu "
                                        << gpu.words[first_mismatch];
}

TEST_F(QuantFused, EveryWidthMatchesCpu) {
  // Widths 1 to 257 (narrow rows whose codes widen, a warp's 32 and 128 columns and beyond),
  // 3 peers of which the middle one gets no rows, strided rows.
  for (int64_t cols = 1; cols <= 257; ++cols) {
    for (const int bits : {1, 2, 4, 8, 16, 32}) expect_same_words(Case{{5, 0, 9}, cols, 0, 3, 2, false, 1.0f}, bits);
  }
}

TEST_F(QuantFused, PeersDegreesStridesAndFp16MatchCpu) {
  const std::vector<std::vector<int64_t>> peer_counts = {
      {1}, {0, 7}, {3, 0, 0, 4}, {40, 1, 0, 12, 0, 0, 300, 2}, {0, 0, 0, 0, 0, 0, 0, 1000}, {1200, 0, 5}};
  for (const auto& counts : peer_counts) {
    for (const int64_t cols : {1, 8, 15, 33, 64, 128, 257}) {
      for (const int64_t hub : {0, 1, 1000}) {  // row 0 sent up to 1000 times over the peers
        for (const bool fp16 : {false, true}) {
          for (const float magnitude : {1e-9f, 1.0f, 1e3f}) {
            if (fp16 && magnitude < 1e-6f) continue;  // below fp16's range: the rows are zeros
            for (const int bits : {1, 2, 4, 8, 16, 32})
              expect_same_words(Case{counts, cols, 0, cols % 3, hub, fp16, magnitude}, bits);
          }
        }
      }
    }
  }
}

TEST_F(QuantFused, Fp32TailFollowsEachMessage) {
  for (const int64_t tail : {1, 2, 16}) {
    for (const int bits : {1, 4, 16, 32}) {
      expect_same_words(Case{{6, 0, 3, 11}, 64, tail, 1, 1, false, 1.0f}, bits);
      expect_same_words(Case{{6, 0, 3, 11}, 64, tail, 0, 1, true, 1.0f}, bits);
    }
  }
}

TEST_F(QuantFused, NonFiniteInputFlagsTheCpuReport) {
  for (const int bits : {1, 8, 16, 32}) {
    Exchange ex = make_exchange({4, 0, 9, 6}, 70, 1, 2, 0, false, 1.0f, 11);
    // Local rows 60 and 61 hold the bad values and are sent once each, as row 5 of peer 2's
    // message and row 1 of peer 3's: the CPU reports the first peer's, at its first column.
    for (auto& rows : ex.peer_rows) {
      for (auto& r : rows) r = (r == 60 || r == 61) ? 3 : r;
    }
    ex.peer_rows[2][5] = 60;
    ex.peer_rows[3][1] = 61;
    ex.local[static_cast<size_t>(60 * ex.ld + 66)] = -std::numeric_limits<float>::infinity();
    ex.local[static_cast<size_t>(60 * ex.ld + 3)] = std::numeric_limits<float>::quiet_NaN();
    ex.local[static_cast<size_t>(61 * ex.ld + 0)] = std::numeric_limits<float>::infinity();
    ex.local[static_cast<size_t>(5 * ex.ld + 70)] = std::numeric_limits<float>::quiet_NaN();  // tail: not checked
    const QuantKey key = test_key(bits);
    std::string cpu_error;
    try {
      cpu_words(ex, bits, key);
    } catch (const Error& e) {
      cpu_error = e.what();
    }
    ASSERT_NE(cpu_error.find("row 5 column 3"), std::string::npos) << cpu_error;
    size_t words = 0;
    for (const auto& rows : ex.peer_rows)
      words += packed_words(bits, static_cast<int64_t>(rows.size()), 70) + rows.size();
    const FusedResult gpu = fused_words(ex, bits, key, false, words);
    ASSERT_EQ(gpu.status.flagged, 1u) << bits << " bits";
    EXPECT_EQ(gpu.status.peer, 2u);
    EXPECT_EQ(gpu.status.row, 5);
    EXPECT_EQ(gpu.status.col, 3);
    std::string gpu_error;
    try {
      throw_if_flagged(gpu.status, key.rank);
    } catch (const Error& e) {
      gpu_error = e.what();
    }
    EXPECT_EQ(gpu_error, cpu_error) << bits << " bits";

    // The status keeps the first report: a later clean send leaves it as it was.
    const Exchange clean = make_exchange({4, 0, 9, 6}, 70, 1, 2, 0, false, 1.0f, 12);
    const FusedResult again = fused_words(clean, bits, test_key(bits), false, words, gpu.status);
    EXPECT_EQ(std::memcmp(&again.status, &gpu.status, sizeof(NonFiniteStatus)), 0);
  }
}

TEST_F(QuantFused, NoRowsIsANoOp) {
  SendRowMap map;
  map.num_peers = 3;
  EXPECT_NO_THROW(quantize_send_fused(static_cast<const float*>(nullptr), 256, 256, 0, 1, QuantKey{}, map, nullptr,
                                      nullptr, nullptr, nullptr));
}

}  // namespace
}  // namespace halogen::quant

#else

TEST(QuantFused, EveryWidthMatchesCpu) { GTEST_SKIP() << "built without CUDA"; }

#endif
