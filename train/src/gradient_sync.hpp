// The sum over ranks of the weight gradients, as one component of the training step.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "gradient_layout.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/trainer.hpp"
#include "nn/layer.hpp"
#include "quantized_gradients.hpp"

namespace halogen {

/// The gradient layout of a model's parameters (the layers of nn::layout): every layer's range,
/// and its declared weight matrices.
GradientLayout gradient_layout(const std::vector<nn::LayerDecl>& layers);

/// Sums the weight gradients over ranks, the same on both devices:
/// - layer-wise (default): each layer's fp32 sum is started (Communicator::start_allreduce_sum)
///   as soon as the backward pass has completed it, so it overlaps the layers below; finish()
///   sums the step's host scalars in one small fp64 all-reduce and waits for every layer;
/// - packed: finish() sums the gradients and the scalars in ONE fp64 all-reduce;
/// - PowerSGD (with layer-wise): each matrix where a rank-R approximation saves half the bytes
///   travels as its factors (P = M Q and Q = M^T P summed over ranks, P orthonormalised on the
///   host in fp64, error feedback per rank, Q warm-started), the rest of its layer as ranges.
/// - quantized codes (with layer-wise): QuantizedGradients, for matrices of 16384 values or
///   more; their first round starts with their layer, the second is waited for in finish().
/// Where MPI carries a GPU's data, the gradients are staged through host memory here, once.
/// Every choice keeps the exactness invariant: the sums are in a fixed order on every rank.
class GradientSync {
 public:
  /// `scalars`: how many fp64 values finish() sums beside the gradients (allocated now in
  /// packed mode, with the gradients).
  GradientSync(Communicator& comm, const ExecContext& ctx, const TrainOptions& options, GradientLayout layout,
               int64_t scalars);

  /// Layer-wise: starts the sum of layer l's gradients (complete on the device). A no-op when
  /// the gradients travel packed or not at all.
  void start_layer(int l, const Tensor& grads, int epoch);
  /// Sums `scalars` over ranks (fp64) and completes the gradient sums of this step.
  void finish(const Tensor& grads, std::span<double> scalars);

  /// The bytes this component allocates on the rank's device for `options`: the packed fp64
  /// buffer, PowerSGD's factors, error feedback and scratch (what the memory plan counts).
  static uint64_t device_bytes(const GradientLayout& layout, const TrainOptions& options, int64_t scalars, int ranks);

  /// A blocking sum over ranks of a contiguous fp32 or fp64 tensor, in place.
  void allreduce_now(const TensorView& v);

  /// This epoch's time spent waiting for the layer-wise sums, and the gradient bytes this rank
  /// sent.
  double wait_seconds() const { return wait_s_; }
  uint64_t bytes() const { return bytes_; }
  void reset_epoch() {
    wait_s_ = 0.0;
    bytes_ = 0;
  }

  /// From the next step on, the weight matrices travel as quantized codes (--grad-compression
  /// quantized from the start; auto once it has chosen so). A no-op on one rank.
  void use_quantized();
  bool quantized() const { return quantized_ != nullptr; }

  /// PowerSGD's state (each matrix's Q and error feedback): resuming without it would not
  /// continue the same run.
  void save(CheckpointWriter& w, nlohmann::json& meta) const;
  void restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& where);

 private:
  struct Compressed {
    GradientLayout::Matrix m;
    Tensor q, error;
    Tensor p, approx;  // scratch of every step: P (rows x rank) and P Q^T (rows x cols)
  };
  struct Bucket {
    int64_t begin = 0, end = 0;
    std::unique_ptr<CommRequest> request;
  };
  // Whether PowerSGD replaces a rows x cols matrix: only where the factors save at least half
  // the bytes and the matrix is at least 4 ranks wide both ways.
  static bool compressed(int64_t rows, int64_t cols, int64_t rank) {
    return std::min(rows, cols) >= 4 * rank && 2 * rank * (rows + cols) <= rows * cols;
  }
  bool staged() const { return ctx_.device != kDevCpu && !comm_.takes_device_buffers(); }
  void start_range(const Tensor& grads, int64_t begin, int64_t end);
  void compress(Compressed& c, const Tensor& grads);
  void finish_layers(const Tensor& grads);

  Communicator& comm_;
  const ExecContext& ctx_;
  const TrainOptions& opt_;
  GradientLayout layout_;
  std::vector<Compressed> compressed_;
  std::unique_ptr<QuantizedGradients> quantized_;  // --grad-compression quantized, more than one rank
  std::vector<Bucket> buckets_;
  Tensor packed_;                 // f64: gradients then scalars (packed mode)
  HostBuffer<float> grad_host_;   // the layers' host copy when MPI carries GPU data
  HostBuffer<std::byte> staged_;  // allreduce_now's host copy when MPI carries GPU data
  double wait_s_ = 0.0;
  uint64_t bytes_ = 0;
};

}  // namespace halogen
