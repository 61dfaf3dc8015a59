// Residual coding of forward halo rows (options.hpp, ForwardCoding): per layer, what the
// receivers of this rank's send rows hold of them, and the halo rows this rank has received as
// the sum of its owners' residuals. The halo channel owns one and asks it, around each forward
// exchange, for the estimate to send against and for the rows to add what arrives into.
//
// A training exchange updates the estimate when it is sent, but its receivers add it only when
// it is applied, one or more epochs later in stale mode: so the coding keeps the estimate each
// exchange in flight leads to, oldest first, beside the one its receivers hold now. A training
// exchange is coded against the newest (what the receivers will hold once everything sent has
// arrived), an evaluation exchange against what they hold now.
#pragma once

#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "halogen/core/tensor.hpp"
#include "halogen/train/checkpoint.hpp"

namespace halogen {

class HaloResidualCoding {
 public:
  /// `residual[l]`: layer l's forward rows are coded as residuals. `send_entries`: the rows of
  /// this rank's send lists (one estimate row each); `halo_rows`: this rank's halo rows, held
  /// in `act`.
  HaloResidualCoding(const ExecContext& ctx, DType act, int64_t send_entries, int64_t halo_rows,
                     std::vector<bool> residual);

  bool applies(int l) const { return l >= 0 && l < static_cast<int>(residual_.size()) && residual_[l]; }

  /// A training exchange of layer l is being sent: the estimate to code it against (fp32, one
  /// contiguous row of `cols` per send entry; zeros before the layer first sends), which the
  /// exchanger then advances by what it sends. It stays in flight until applied().
  TensorView start(int l, int64_t cols);
  /// The oldest training exchange of layer l in flight has been applied on every rank.
  void applied(int l);
  /// The estimate an evaluation exchange of layer l is coded against: what the receivers hold
  /// now. A copy, which the exchanger may advance without changing the run's.
  TensorView evaluation_estimate(int l, int64_t cols);
  /// Layer l's halo rows as this rank has received them (`cols` wide, in the activations'
  /// dtype; zeros before the first exchange arrives): what each exchange is added into.
  TensorView halo(int l, int64_t cols);

  /// Checkpointing: each layer's estimates (fp32) and received halo rows. A checkpoint whose
  /// layers were coded otherwise than this run's cannot resume it: its halo rows and the
  /// exchanges it left in flight mean something else (throws, naming the option to resume with).
  void save(CheckpointWriter& w, nlohmann::json& meta) const;
  void restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir);

 private:
  struct Layer {
    int64_t cols = 0;              // the estimates' (the sent columns less the fp32 tail); 0: not sent yet
    Tensor held;                   // what the receivers hold now
    std::deque<Tensor> in_flight;  // what they will hold once each exchange in flight is applied
    Tensor halo;
  };
  Layer& layer(int l, int64_t cols);
  Tensor take_estimate(int64_t cols);

  const ExecContext& ctx_;
  const DType act_;
  const int64_t send_entries_, halo_rows_;
  const std::vector<bool> residual_;
  std::vector<Layer> layers_;
  std::vector<Tensor> spare_;  // estimates applied exchanges left behind, reused by the next ones
  Tensor evaluation_;
};

}  // namespace halogen
