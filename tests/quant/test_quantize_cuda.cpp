// The CUDA quantizer must produce exactly the CPU's packed words and dequantized values.
// Skips without a GPU; compiles to a single skipped test in CPU-only builds.
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include <cuda_runtime.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/quant/quantize.hpp"

namespace halogen::quant {
namespace {

using cuda::DeviceBuffer;

/// Values spread over magnitudes, with a constant row (row 1) and a zero row (row 2).
std::vector<float> test_matrix(int64_t rows, int64_t cols, int64_t ld, float magnitude, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(rows * ld), 0.0f);
  const RngStream rng = RngStream::make(seed, RngPurpose::kGenerator);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const Philox4x32 b = rng.bits(static_cast<uint32_t>(r), static_cast<uint32_t>(c), 0, 0);
      const float u = uniform_from_bits(b.v[0]) * 2.0f - 1.0f;
      const float row_scale = std::ldexp(1.0f, static_cast<int>(b.v[1] % 12) - 6);  // rows differ in range
      float v = magnitude * row_scale * u;
      if (r == 1) v = 0.75f * magnitude;
      if (r == 2) v = 0.0f;
      x[static_cast<size_t>(r * ld + c)] = v;
    }
  }
  return x;
}

class QuantCuda : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(QuantCuda, PackedWordsAndDequantizedValuesMatchCpu) {
  struct Shape {
    int64_t rows, cols, ld;
  };
  cudaStream_t stream;
  HALOGEN_CHECK_CUDA(cudaStreamCreate(&stream));
  for (const Shape s : {Shape{1, 1, 1}, Shape{3, 5, 8}, Shape{7, 33, 33}, Shape{64, 256, 260}, Shape{1000, 100, 100},
                        Shape{3, 1000, 1001}, Shape{20000, 64, 64}, Shape{4, 0, 0},
                        // Narrow rows whose codes widen (quantize.hpp): a GAT output layer's 15 and 8.
                        Shape{1000, 15, 15}, Shape{333, 8, 9}}) {
    for (const float magnitude : {1e-9f, 1.0f, 1e6f}) {
      const auto x = test_matrix(s.rows, s.cols, s.ld, magnitude, 7 + static_cast<uint64_t>(s.cols));
      auto x_dev = DeviceBuffer<float>::from_host(x);
      for (int case_index = 0; case_index < 10; ++case_index) {
        // Both roundings at every coded width (deterministic codes: one thread per row).
        const int bits = std::array{1, 2, 4, 8, 16, 32, 1, 2, 4, 8}[case_index];
        QuantKey key;
        key.rounding = case_index >= 6 ? Rounding::kDeterministic : Rounding::kStochastic;
        key.seed = 42;
        key.epoch = 5;
        key.layer = 1;
        key.direction = bits % 2 ? Direction::kForward : Direction::kBackward;
        key.rank = 3;
        key.peer = 1;
        const size_t words = packed_words(bits, s.rows, s.cols);
        std::vector<uint32_t> cpu(words);
        quantize_rows<kDevCpu>(x.data(), s.rows, s.cols, s.ld, bits, key, cpu.data());
        DeviceBuffer<uint32_t> gpu_dev(words);
        quantize_rows<kDevCuda>(x_dev.data(), s.rows, s.cols, s.ld, bits, key, gpu_dev.data(), stream);
        HALOGEN_CHECK_CUDA(cudaStreamSynchronize(stream));
        const auto gpu = gpu_dev.to_host();
        size_t first_mismatch = words;
        for (size_t i = 0; i < words && first_mismatch == words; ++i) {
          if (cpu[i] != gpu[i]) first_mismatch = i;
        }
        ASSERT_EQ(first_mismatch, words) << s.rows << "x" << s.cols << " magnitude " << magnitude << " " << bits
                                         << " bits, rounding " << static_cast<int>(key.rounding) << ": word "
                                         << first_mismatch << " cpu " << std::hex << cpu[first_mismatch] << " gpu "
                                         << gpu[first_mismatch];

        // Dequantize on both, plain and accumulating onto a non-zero output with stride, by
        // values and by rows.
        const int64_t ld_out = s.cols + 3;
        for (const int schedule : {0, 1}) {
          for (const bool accumulate : {false, true}) {
            std::vector<float> cpu_out(static_cast<size_t>(s.rows * ld_out), 0.5f);
            dequantize_rows<kDevCpu>(cpu.data(), s.rows, s.cols, bits, cpu_out.data(), ld_out, accumulate);
            auto out_dev =
                DeviceBuffer<float>::from_host(std::vector<float>(static_cast<size_t>(s.rows * ld_out), 0.5f));
            if (schedule == 0) {
              dequantize_rows<kDevCuda>(gpu_dev.data(), s.rows, s.cols, bits, out_dev.data(), ld_out, accumulate,
                                        stream);
            } else {
              dequantize_rows_by_row(gpu_dev.data(), s.rows, s.cols, bits, out_dev.data(), ld_out, accumulate, stream);
            }
            HALOGEN_CHECK_CUDA(cudaStreamSynchronize(stream));
            const auto gpu_out = out_dev.to_host();
            for (size_t i = 0; i < cpu_out.size(); ++i) {
              ASSERT_EQ(std::bit_cast<uint32_t>(cpu_out[i]), std::bit_cast<uint32_t>(gpu_out[i]))
                  << s.rows << "x" << s.cols << " " << bits << " bits accumulate " << accumulate << " schedule "
                  << (schedule == 0 ? "by value" : "by row") << " index " << i << ": cpu " << cpu_out[i] << " gpu "
                  << gpu_out[i];
            }
          }
        }
      }
    }
  }
  HALOGEN_CHECK_CUDA(cudaStreamDestroy(stream));
}

TEST_F(QuantCuda, NonFiniteReportsFirstRowAndColumn) {
  const int64_t rows = 300, cols = 70;
  auto x = test_matrix(rows, cols, cols, 1.0f, 3);
  x[static_cast<size_t>(250 * cols + 3)] = std::numeric_limits<float>::quiet_NaN();
  x[static_cast<size_t>(120 * cols + 66)] = -std::numeric_limits<float>::infinity();
  auto x_dev = DeviceBuffer<float>::from_host(x);
  for (int bits : {1, 8, 16, 32}) {
    QuantKey key;
    key.layer = 4;
    key.direction = Direction::kBackward;
    DeviceBuffer<uint32_t> out(packed_words(bits, rows, cols));
    try {
      quantize_rows<kDevCuda>(x_dev.data(), rows, cols, cols, bits, key, out.data(), nullptr);
      ADD_FAILURE() << "non-finite input accepted at " << bits << " bits";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("layer 4"), std::string::npos) << what;
      EXPECT_NE(what.find("backward gradients"), std::string::npos) << what;
      EXPECT_NE(what.find("row 120 column 66"), std::string::npos) << what;
    }
  }
}

TEST_F(QuantCuda, ZeroRowsIsANoOp) {
  EXPECT_NO_THROW(quantize_rows<kDevCuda>(nullptr, 0, 256, 256, 1, QuantKey{}, nullptr, nullptr));
  EXPECT_NO_THROW(dequantize_rows<kDevCuda>(nullptr, 0, 256, 1, nullptr, 256, false, nullptr));
}

}  // namespace
}  // namespace halogen::quant

#else

TEST(QuantCuda, PackedWordsAndDequantizedValuesMatchCpu) { GTEST_SKIP() << "built without CUDA"; }

#endif
