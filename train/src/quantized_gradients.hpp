// Weight-gradient matrices summed over ranks as low-bit codes with error feedback: the halo
// quantizer (quant/quantize.hpp) applied to gradients, in the two-phase compressed all-reduce
// of 1-bit Adam (Tang et al. 2021).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradient_layout.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/options.hpp"

namespace halogen {

/// One step's sum over ranks of some weight-gradient matrices, each sent as `bits`-bit codes
/// (per row a min and a scale). 2, 4 and 8 bits round stochastically. 1 bit rounds
/// deterministically (quant::Rounding::kDeterministic: two levels split at the row's mean):
/// a stochastic 1-bit code is its row's minimum or maximum, so the error of a value can
/// exceed the value, and the error feedback would grow step after step instead of being sent.
/// A matrix's rows are split into one chunk per rank:
/// 1. every rank adds its error feedback to its gradient, quantizes each chunk and sends chunk
///    j to rank j; what its codes missed becomes its new error feedback;
/// 2. rank j dequantizes and sums the P codes of chunk j in rank order, adds its own error
///    feedback of that sum, quantizes it again and sends it to every rank;
/// 3. every rank dequantizes the P summed chunks into the gradient.
/// Every rank ends with the same values (they come from the same codes), so the model stays
/// identical across ranks, and each rank sends 2 (P-1)/P of a matrix's codes, as a ring
/// all-reduce sends of its fp32 values: the saving does not shrink with the ranks, as an
/// all-gather of codes would. Error feedback (both sides) makes the sum of the updates over
/// steps follow the sum of the exact gradients: what a step's codes drop is sent later.
///
/// Non-finite gradients cannot be quantized. A rank that has them sends zeros and raises
/// nonfinite(); the caller sums that flag over ranks and, where any rank raised it, finishes
/// the step discarded: every rank then sees a non-finite gradient, so the optimizer's own check
/// (stop, skip the step, or back off the loss scale) decides on every rank alike, and no error
/// feedback changes (a skipped step sent nothing).
class QuantizedGradients {
 public:
  using Matrix = GradientLayout::Matrix;

  /// Whether a rows x cols matrix travels as codes: at least 16384 values (smaller ones cost
  /// more in the two extra message rounds than their bytes).
  static bool compressed(int64_t rows, int64_t cols) { return rows * cols >= kQuantizedGradientMinValues; }
  /// The device bytes this component allocates for `matrices` (those compressed()) on `ranks`.
  static uint64_t device_bytes(std::span<const Matrix> matrices, int bits, int ranks);

  QuantizedGradients(Communicator& comm, const ExecContext& ctx, uint64_t seed, int bits, std::vector<Matrix> matrices);
  ~QuantizedGradients();

  const std::vector<Matrix>& matrices() const { return matrices_; }
  /// Phase 1 for matrix k (an index into matrices()), whose gradient in `grads` is complete:
  /// error feedback, codes, and the chunks on their way. `epoch` keys the random rounding.
  void start(size_t k, const Tensor& grads, int epoch);
  /// Phases 2 and 3 of every matrix started this step: `grads` then holds the sums. With
  /// `discard` (the same on every rank) phase 2 is skipped, the matrices are filled with NaN
  /// and the error feedback stays as it was before the step.
  void finish(const Tensor& grads, bool discard);
  /// True when this step's gradient held a non-finite value on this rank (sent as zeros).
  bool nonfinite() const { return nonfinite_; }
  /// The code bytes this rank sent since the last take_bytes().
  uint64_t take_bytes();

  /// Both error feedbacks: resuming without them would not continue the same run.
  void save(CheckpointWriter& w, const std::string& prefix) const;
  void restore(const CheckpointReader& r, const std::string& prefix);

 private:
  struct State;
  int64_t chunk_begin(const Matrix& m, int rank) const;
  uint32_t* wire(Tensor& words, HostBuffer<uint32_t>& host, bool to_host);
  quant::Rounding rounding() const {
    return bits_ == 1 ? quant::Rounding::kDeterministic : quant::Rounding::kStochastic;
  }
  void phase_two(State& s, const Matrix& m, size_t k, const Tensor& grads);

  Communicator& comm_;
  const ExecContext& ctx_;
  uint64_t seed_;
  int bits_;
  std::vector<Matrix> matrices_;
  std::vector<std::unique_ptr<State>> state_;
  std::vector<size_t> started_;
  int epoch_ = 0;
  bool nonfinite_ = false;
  uint64_t bytes_ = 0;
};

}  // namespace halogen
