// The value-labelled tasks' loss on the GPU (ops::value_loss on CUDA tensors, the multilabel
// and regression tasks' training loss) against the same op on CPU tensors: random logits with
// extremes, NaN (unlabelled) entries, rows without a labelled entry, masked-out rows, widths 1
// to 300 around the warp and rows 0 to 5000 around the kernel's blocks of rows, several
// gradient scales. The loss agrees to fp64 rounding, every gradient entry within 2 fp32 ulps
// (exact zeros where the CPU writes zeros), two GPU runs give the same bits, and a call waits
// on the GPU once. Skips without a device.
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/host_syncs.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/tensor.hpp"
#include "ops.hpp"
#include "tasks/task.hpp"

namespace halogen {
namespace {

using cuda::DeviceBuffer;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const ExecContext kCpu{kDevCpu, nullptr};

class GpuTasks : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    HALOGEN_CHECK_CUDA(cudaSetDevice(0));
  }
};

const char* name_of(ValueLoss kind) {
  return kind == ValueLoss::kBinaryCrossEntropy ? "binary cross-entropy" : "squared error";
}

struct Case {
  int64_t rows = 0, cols = 0;
  std::vector<float> logits, labels;
  std::vector<uint8_t> mask;
};

// Logits mostly N(0, 3) with some far out (where exp underflows and the sigmoid saturates),
// labels 0/1 or N(0, 2), about one entry in six unlabelled, every eleventh row entirely
// unlabelled and every fourth row (from row 1) masked out.
Case make_case(ValueLoss kind, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> logit(0.0f, 3.0f), target(0.0f, 2.0f);
  const float extremes[] = {25.0f, -25.0f, 60.0f, -60.0f, 100.0f, -100.0f, 0.0f, -0.0f};
  Case c;
  c.rows = rows, c.cols = cols;
  for (int64_t r = 0; r < rows; ++r) {
    c.mask.push_back(r % 4 == 1 ? 0 : static_cast<uint8_t>(1 + rng() % 255));
    for (int64_t j = 0; j < cols; ++j) {
      const uint64_t draw = rng();
      c.logits.push_back(draw % 53 == 0 ? extremes[(draw >> 8) % 8] : logit(rng));
      const bool unlabelled = r % 11 == 5 || (draw >> 16) % 6 == 0;
      c.labels.push_back(unlabelled                               ? kNaN
                         : kind == ValueLoss::kBinaryCrossEntropy ? static_cast<float>((draw >> 24) % 2)
                                                                  : target(rng));
    }
  }
  return c;
}

struct DeviceCase {
  DeviceBuffer<float> logits, labels;
  DeviceBuffer<uint8_t> mask;
  explicit DeviceCase(const Case& c)
      : logits(DeviceBuffer<float>::from_host(c.logits)),
        labels(DeviceBuffer<float>::from_host(c.labels)),
        mask(DeviceBuffer<uint8_t>::from_host(c.mask)) {}
  TensorView z(const Case& c) const { return TensorView::of(logits.data(), c.rows, c.cols, kDevCuda); }
  TensorView y(const Case& c) const { return TensorView::of(labels.data(), c.rows, c.cols, kDevCuda); }
  TensorView m(const Case& c) const { return TensorView::of(mask.data(), c.rows, 1, kDevCuda); }
};

struct Result {
  double loss = 0.0;
  std::vector<float> grad;
};

Result cpu_loss(ValueLoss kind, Case& c, float scale) {
  Result out;
  out.grad.assign(c.logits.size(), 123.0f);  // every entry must be written
  out.loss = ops::value_loss(kCpu, kind, TensorView::of(c.logits.data(), c.rows, c.cols),
                             TensorView::of(c.labels.data(), c.rows, c.cols), TensorView::of(c.mask.data(), c.rows, 1),
                             scale, TensorView::of(out.grad.data(), c.rows, c.cols));
  return out;
}

Result gpu_loss(const ExecContext& gpu, ValueLoss kind, const Case& c, const DeviceCase& d, float scale) {
  DeviceBuffer<float> grad = DeviceBuffer<float>::from_host(std::vector<float>(c.logits.size(), 123.0f));
  Result out;
  out.loss =
      ops::value_loss(gpu, kind, d.z(c), d.y(c), d.m(c), scale, TensorView::of(grad.data(), c.rows, c.cols, kDevCuda));
  out.grad = grad.to_host(gpu.stream);
  return out;
}

// Distance in representable fp32 values (+0 and -0 are one value).
int64_t ulps(float a, float b) {
  auto key = [](float f) {
    int32_t i = 0;
    std::memcpy(&i, &f, sizeof i);
    return i >= 0 ? int64_t{i} : -int64_t{i & 0x7fffffff};
  };
  return std::llabs(key(a) - key(b));
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_F(GpuTasks, ValueLossMatchesTheCpuOpAndRepeatsItsBits) {
  const ExecStream stream(kDevCuda);
  const ExecContext& gpu = stream.context();
  const float scales[] = {1.0f, 0.37f, 1.0f / 4096.0f};
  int index = 0;
  for (ValueLoss kind : {ValueLoss::kBinaryCrossEntropy, ValueLoss::kSquaredError}) {
    for (int64_t rows : {0, 1, 63, 64, 65, 1000, 5000}) {
      for (int64_t cols : {1, 2, 31, 32, 33, 100, 300}) {
        const float scale = scales[index++ % 3];
        SCOPED_TRACE(testing::Message() << name_of(kind) << " rows " << rows << " cols " << cols << " grad_scale "
                                        << scale);
        Case c = make_case(kind, rows, cols, 1000 + static_cast<uint64_t>(index));
        const Result cpu = cpu_loss(kind, c, scale);
        const DeviceCase d(c);
        const Result first = gpu_loss(gpu, kind, c, d, scale);
        const Result second = gpu_loss(gpu, kind, c, d, scale);

        ASSERT_TRUE(std::isfinite(cpu.loss));
        EXPECT_NEAR(first.loss, cpu.loss, 1e-11 * std::max(1.0, cpu.loss));
        EXPECT_TRUE(same_bits(first.loss, second.loss)) << first.loss << " then " << second.loss;
        EXPECT_TRUE(same_bits(first.grad, second.grad)) << "the gradient changed between runs";
        int64_t far = 0, written = 0;
        for (size_t i = 0; i < cpu.grad.size(); ++i) {
          const int64_t r = static_cast<int64_t>(i) / cols;
          const bool counted = c.mask[static_cast<size_t>(r)] != 0 && !std::isnan(c.labels[i]);
          if (!counted) {
            ASSERT_EQ(cpu.grad[i], 0.0f) << "row " << r;  // the CPU op's own contract
            ASSERT_EQ(first.grad[i], 0.0f) << "row " << r << " entry " << i % cols;
            continue;
          }
          ++written;
          if (ulps(first.grad[i], cpu.grad[i]) > 2) {
            if (++far <= 5)
              ADD_FAILURE() << "row " << r << " entry " << i % cols << ": gpu " << first.grad[i] << " cpu "
                            << cpu.grad[i] << " (logit " << c.logits[i] << ", label " << c.labels[i] << ")";
          }
        }
        EXPECT_EQ(far, 0) << "of " << written << " gradient entries";
        if (rows * cols >= 1000) {
          EXPECT_GT(written, 0);  // the case exercises the gradient
        }
      }
    }
  }
}

TEST_F(GpuTasks, ValueLossWithoutGradientAndItsHostWaits) {
  const ExecStream stream(kDevCuda);
  const ExecContext& gpu = stream.context();
  for (ValueLoss kind : {ValueLoss::kBinaryCrossEntropy, ValueLoss::kSquaredError}) {
    SCOPED_TRACE(name_of(kind));
    Case c = make_case(kind, 777, 45, 5);
    const DeviceCase d(c);
    const Result with_grad = gpu_loss(gpu, kind, c, d, 0.5f);
    synchronize(gpu);
    const uint64_t before = cuda::host_sync_count();
    const double alone = ops::value_loss(gpu, kind, d.z(c), d.y(c), d.m(c), 0.5f, {});
    EXPECT_EQ(cuda::host_sync_count() - before, 1u) << "one copy of the sum back";
    EXPECT_TRUE(same_bits(alone, with_grad.loss)) << alone << " vs " << with_grad.loss;
    EXPECT_GT(alone, 0.0);
  }
  // No rows: a zero sum, still one wait.
  Case empty = make_case(ValueLoss::kSquaredError, 0, 3, 6);
  const DeviceCase d(empty);
  const uint64_t before = cuda::host_sync_count();
  EXPECT_EQ(ops::value_loss(gpu, ValueLoss::kSquaredError, d.z(empty), d.y(empty), d.m(empty), 1.0f, {}), 0.0);
  EXPECT_EQ(cuda::host_sync_count() - before, 1u);
}

TEST_F(GpuTasks, TasksTrainOnTheGpu) {
  const ExecStream stream(kDevCuda);
  const ExecContext& gpu = stream.context();
  for (const char* name : {"multilabel", "regression"}) {
    SCOPED_TRACE(name);
    const ValueLoss kind =
        std::string(name) == "multilabel" ? ValueLoss::kBinaryCrossEntropy : ValueLoss::kSquaredError;
    Case c = make_case(kind, 300, 17, 9);
    const DeviceCase d(c);
    const Result op = gpu_loss(gpu, kind, c, d, 0.25f);
    DeviceBuffer<float> grad(c.logits.size());
    const double loss = tasks::make_task(name)->loss(gpu, d.z(c), d.y(c), d.m(c), 0.25f,
                                                     TensorView::of(grad.data(), c.rows, c.cols, kDevCuda));
    EXPECT_TRUE(same_bits(loss, op.loss));
    EXPECT_TRUE(same_bits(grad.to_host(gpu.stream), op.grad));
    EXPECT_NEAR(loss, cpu_loss(kind, c, 0.25f).loss, 1e-11 * std::max(1.0, loss));
    // Host labels given to the GPU loss: refused, naming the devices.
    try {
      tasks::make_task(name)->loss(gpu, d.z(c), TensorView::of(c.labels.data(), c.rows, c.cols), d.m(c), 1.0f, {});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("a tensor on cpu given to the loss on cuda"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace halogen

#else

TEST(GpuTasks, RequiresCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif  // HALOGEN_HAVE_CUDA
