// Error feedback on halo gradients under a changing loss scale (fp16 training's scaler halves
// or doubles the scale between epochs). A carried error is the part of a scaled gradient that
// its codes left out, so when the scale moves it must move with it: the messages of a run whose
// gradients are halved with the scale are exactly half those of the unscaled run, and a
// checkpoint taken between the two sends keeps that. Runs on the CPU with 2 and 4 ranks: the
// feedback code is the same for both devices.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "halo_gradient_feedback.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/train/checkpoint.hpp"
#include "sbm_shards.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

constexpr int64_t kCols = 19;
constexpr int kLayer = 1;

struct Fixture {
  int rank = 0, size = 1;
  std::vector<Shard> shards;
  Fixture() : rank(test::world_rank()), size(test::world_size()), shards(test::sbm_shards(1500, 4, 5, size)) {}
  const Shard& mine() const { return shards[static_cast<size_t>(rank)]; }
};

// Gradient rows that differ by epoch and row, with values on both sides of each row's mean so
// that 1-bit codes leave a real error.
std::vector<float> gradient_rows(const Shard& s, int epoch, float factor) {
  std::vector<float> rows(static_cast<size_t>(s.num_local() * kCols), 0.0f);
  for (int64_t h = 0; h < s.num_halo; ++h)
    for (int64_t j = 0; j < kCols; ++j)
      rows[static_cast<size_t>((s.num_owned + h) * kCols + j)] =
          factor * static_cast<float>(((h * 7 + j * 13 + epoch * 5) % 23) - 11) / 8.0f;
  return rows;
}

// One backward exchange of layer kLayer through `feedback`: returns what this rank sent, as its
// owners dequantize it (halo rows x kCols).
std::vector<float> send(HaloGradientFeedback& feedback, HaloExchanger& exch, const Shard& s, int epoch,
                        float loss_scale) {
  std::vector<float> local = gradient_rows(s, epoch, loss_scale);
  const TensorView all = TensorView::of(local.data(), s.num_local(), kCols);
  quant::QuantKey key{3, static_cast<uint32_t>(epoch), kLayer, quant::Direction::kBackward, 0, 0};
  key.rounding = feedback.rounding(1);
  Exchange exchange = feedback.send(kLayer, all.row_range(s.num_owned, s.num_local()), loss_scale, exch,
                                    [&] { return exch.start_backward(all, 1, key, /*tag=*/40); });
  std::vector<float> sent(static_cast<size_t>(s.num_halo * kCols));
  exch.dequantize_sent(exchange, TensorView::of(sent.data(), s.num_halo, kCols));
  exch.finish_backward(exchange, all);
  return sent;
}

TEST(HaloGradientFeedback, CarriedErrorFollowsTheLossScale) {
  Fixture f;
  const Shard& s = f.mine();
  MpiCommunicator comm;
  HostHaloExchanger exch(s, comm);
  const ExecContext ctx{kDevCpu, nullptr};
  const auto feedback = [&] { return HaloGradientFeedback(ctx, DType::kF32, s.num_halo, 3, /*enabled=*/true); };

  // Scale 2 throughout, and scale 2 then 1 (the scaler backing off after an overflow).
  HaloGradientFeedback steady = feedback(), backed_off = feedback();
  const std::vector<float> first = send(steady, exch, s, 0, 2.0f);
  EXPECT_EQ(send(backed_off, exch, s, 0, 2.0f), first);
  const std::vector<float> second = send(steady, exch, s, 1, 2.0f);
  const std::vector<float> halved = send(backed_off, exch, s, 1, 1.0f);
  ASSERT_EQ(second.size(), halved.size());
  for (size_t i = 0; i < second.size(); ++i) ASSERT_EQ(halved[i], 0.5f * second[i]) << "value " << i;

  // The error carried into the second send is not zero: without it the messages differ.
  HaloGradientFeedback fresh = feedback();
  const std::vector<float> without = send(fresh, exch, s, 1, 2.0f);
  int differ = without != second ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &differ, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (f.size > 1) {
    EXPECT_EQ(differ, 1) << "no rank carried an error into its second send";
  }

  // A checkpoint between the two sends, resumed at the backed-off scale, sends the same.
  int id = static_cast<int>(getpid());
  MPI_Bcast(&id, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const auto path = std::filesystem::temp_directory_path() /
                    ("halogen-test-feedback-" + std::to_string(id) + "-" + std::to_string(f.rank));
  HaloGradientFeedback saved = feedback();
  send(saved, exch, s, 0, 2.0f);
  CheckpointWriter w;
  nlohmann::json meta;
  saved.save(w, meta);
  w.write(path);
  HaloGradientFeedback resumed = feedback();
  resumed.restore(CheckpointReader(path), meta, path.string());
  EXPECT_EQ(send(resumed, exch, s, 1, 1.0f), halved);
  std::filesystem::remove_all(path);
}

}  // namespace
}  // namespace halogen
