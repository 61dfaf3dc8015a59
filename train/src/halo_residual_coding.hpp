// Residual coding of forward halo rows (options.hpp, ForwardCoding): per layer, what the
// receivers of this rank's send rows hold of them, and whether this rank's own halo rows have
// been received yet. The halo channel owns one and asks it, around each forward exchange of a
// training pass, for the estimate to send against and whether to add or write what arrives.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "halogen/core/tensor.hpp"
#include "halogen/train/checkpoint.hpp"

namespace halogen {

class HaloResidualCoding {
 public:
  /// `residual[l]`: layer l's forward rows are coded as residuals. `send_entries`: the rows of
  /// this rank's send lists (one estimate row each).
  HaloResidualCoding(const ExecContext& ctx, int64_t send_entries, std::vector<bool> residual);

  bool applies(int l) const { return l >= 0 && l < static_cast<int>(residual_.size()) && residual_[l]; }
  bool any() const;
  /// Layer l's estimate of its send rows, `cols` wide (fp32 on ctx's device, contiguous): zeros
  /// until the layer first sends, so that its first message is the rows' own code.
  TensorView estimate(int l, int64_t cols);
  /// Whether what arrives for layer l is added to the halo rows (they hold the senders' earlier
  /// residuals) or written (the layer's first exchange); call received() once it is applied.
  bool accumulates(int l) const { return layers_.at(static_cast<size_t>(l)).received; }
  void received(int l) { layers_.at(static_cast<size_t>(l)).received = true; }

  /// Checkpointing: each layer's estimate (fp32) and whether it has received. A checkpoint
  /// whose layers were coded otherwise than this run's cannot resume it: its halo rows and the
  /// exchanges it left in flight mean something else (throws, naming the option to resume with).
  void save(CheckpointWriter& w, nlohmann::json& meta) const;
  void restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir);

 private:
  struct Layer {
    Tensor estimate;
    bool received = false;
  };
  const ExecContext& ctx_;
  const int64_t send_entries_;
  const std::vector<bool> residual_;
  std::vector<Layer> layers_;
};

}  // namespace halogen
