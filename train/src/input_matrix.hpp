// The input of layer 0 (the aggregated features, or the features themselves, as the model
// asks: nn::InputNeeds): constant across epochs except for dropout. Stored as CSR when sparse enough (node
// features usually are: bag-of-words, one-hot), so that dropout and the layer-0 products
// touch only the non-zeros; dense otherwise. Both forms apply exactly the same keyed
// dropout mask (core/rng.hpp), so the choice never changes which values are dropped.
#pragma once

#include <cstdint>
#include <optional>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/tensor.hpp"
#include "kernels/dense.hpp"
#include "kernels/sparse_input.hpp"

namespace halogen {

class InputMatrix {
 public:
  /// Takes rows x cols values (row-major). Stored sparse when `sparse` is set; with `bf16`,
  /// the values are kept as bfloat16 (kernels/dense.hpp: half the bytes, rounded to 8
  /// significant bits) and widened to fp32 as the products read them, which then equal the
  /// products of an fp32 matrix of the rounded values bit for bit.
  void assign(const float* values, int64_t rows, int64_t cols, bool sparse, bool bf16 = false);
  /// Fraction of non-zeros of a dense matrix.
  static int64_t count_nonzeros(const float* values, int64_t n);
  /// Density (nonzeros / entries) under which CSR storage beats dense GEMM on these ranks.
  static constexpr double kSparseBelow = 0.3;

  /// Sets this epoch's dropout (p = 0: the stored values as they are). Global ids key the
  /// mask by node; they must stay valid while the products use it. No dropped copy is made:
  /// the dense products draw the mask as they read the rows, the sparse form keeps a byte per
  /// non-zero; bit for bit the products of a dropped copy.
  void prepare(float p, const DropoutKey& key, const int32_t* global_ids);
  /// Y = beta * Y + D W, D the prepared matrix (rows x cols), W cols x n, Y with row stride
  /// ldy (0: n).
  void multiply(const float* w, int64_t n, float beta, float* y, int64_t ldy = 0) const;
  /// dW = D^T dY (cols x n), dY rows x n; with `accumulate`, dW += D^T dY.
  void multiply_transposed(const float* dy, int64_t n, float* dw, bool accumulate = false) const;

  int64_t rows() const noexcept { return rows_; }
  int64_t cols() const noexcept { return cols_; }
  bool sparse() const noexcept { return sparse_; }
  bool bf16() const noexcept { return bf16_; }
  int64_t nonzeros() const noexcept { return static_cast<int64_t>(col_.size()); }
  /// Bytes held for the values and their structure (the memory model's input matrices).
  uint64_t stored_bytes() const noexcept;

 private:
  int64_t rows_ = 0, cols_ = 0;
  bool sparse_ = false;
  bool bf16_ = false;
  bool dropped_ = false;  // prepare() set a mask for this epoch
  float p_ = 0.0f;
  DropoutKey key_;
  const int32_t* global_ids_ = nullptr;
  // Dense form (fp32 or bf16).
  HostBuffer<float> dense_;
  HostBuffer<uint16_t> dense16_;
  // Sparse form; with dropout, each non-zero's keep decision for the epoch (0 or 1).
  HostBuffer<int64_t> off_;
  HostBuffer<int32_t> col_;
  HostBuffer<float> val_;
  HostBuffer<uint16_t> val16_;  // bf16 values instead of val_
  HostBuffer<uint8_t> keep_;
  float keep_scale_ = 1.0f;
  // The sparse form as its products read it this epoch.
  SparseInputView view() const;
};

/// The non-zero share of a host matrix whose n values on this rank are part of it, over all
/// ranks of `comm` (collective): the same on every rank.
double global_density(Communicator& comm, const float* values, int64_t n);

/// A layer-0 input matrix on the trainer's device: on the CPU an InputMatrix (sparse or dense,
/// chosen from the density over all ranks), on a GPU a dense tensor of the activation dtype and
/// its dropped copy. Products go through the op layer, so the model code is the same on both.
class LayerInput {
 public:
  /// Stores `values` (owned rows x features, fp32, on ctx's device). Collective over `comm`
  /// on the CPU (the sparse-or-dense decision uses global counts), unless `density`, the
  /// matrix's non-zero share over all ranks, is given (then on every rank). On the CPU, `bf16`
  /// keeps the values as bfloat16 (--input-storage bf16); on a GPU they are stored as `dtype`.
  void assign(const ExecContext& ctx, Communicator& comm, const TensorView& values, DType dtype, bool bf16 = false,
              std::optional<double> density = {});
  /// This epoch's input: the stored values with dropout p at `key` (p = 0: as stored).
  void prepare(const ExecContext& ctx, float p, const DropoutKey& key, const TensorView& global_ids);
  /// y = beta * y + D w (D: the prepared input, rows x cols; w: cols x n).
  void multiply(const ExecContext& ctx, const TensorView& w, float beta, const TensorView& y) const;
  /// dw = D^T dy; with `accumulate`, dw += D^T dy.
  void multiply_transposed(const ExecContext& ctx, const TensorView& dy, const TensorView& dw,
                           bool accumulate = false) const;
  bool sparse() const noexcept { return host_.sparse(); }

 private:
  Device device_ = kDevCpu;
  InputMatrix host_;         // CPU
  Tensor stored_, dropped_;  // GPU
  bool dropped_now_ = false;
};

}  // namespace halogen
