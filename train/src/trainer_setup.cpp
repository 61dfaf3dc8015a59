// Trainer set-up: the local graph, parameters, the halo channel, the layer-0 inputs and the
// layers.
#include "halogen/core/io.hpp"
#include "halogen/quant/quantize.hpp"
#include "trainer_impl.hpp"

namespace halogen::trainer_impl {

Trainer::Trainer(const Shard& shard, Communicator& comm, const TrainOptions& opt)
    : s_(shard),
      comm_(comm),
      opt_(opt),
      spec_(nn::model_spec(opt.model.name)),
      act_(opt.device.kind == kDevCuda && opt.device.precision == Precision::kFp16 ? DType::kF16 : DType::kF32),
      stream_(opt.device.kind),
      decl_(nn::layout(opt, shard.feature_dim, shard.num_classes)),
      graph_(shard, stream_.context(), spec_.aggregation()),
      task_(tasks::make_task(opt.model.task, shard.label_kind)),
      log_(comm, shard, opt, *task_) {
  init_params();
  halo_ = std::make_unique<HaloChannel>(s_, comm_, ctx(), opt_, act_, graph_, nn::halo_error_gains(decl_),
                                        optim_->precision().active(),
                                        train_detail::halo_error_feedback(opt_, s_.feature_dim, s_.num_classes));
  // The layer-0 inputs first: their set-up temporaries (all local features, their exchange,
  // the aggregation) are freed before the activations are allocated, so the two never add up.
  prepare_inputs();
  build_layers();
  synchronize(ctx());  // host arrays placed on the device may go now
}

void Trainer::init_params() {
  std::vector<float> host(nn::num_params(decl_));
  train_detail::init_parameters(opt_, decl_, host.data());
  // The task may start the output bias at its labels' prior (multilabel: each label's log-odds).
  tasks::SplitRows train{nullptr, s_.num_owned, s_.num_classes, train_detail::host_labels(s_), s_.split.data()};
  train.role = static_cast<uint8_t>(SplitRole::kTrain);
  if (const std::vector<float> bias = tasks::initial_output_bias(*task_, comm_, train); !bias.empty())
    train_detail::set_output_bias(decl_, bias, host.data());
  // Decay applies to weights and attention vectors, not biases: the runs of adjacent arrays
  // with the same coefficient, one range each.
  std::vector<Optimizer::Range> decayed;
  for (const nn::LayerDecl& layer : decl_)
    for (const nn::ParamArray& a : layer.arrays) {
      if (a.kind == nn::ParamArray::Kind::kBias) continue;
      const auto begin = static_cast<int64_t>(a.offset);
      const float decay = a.weight_decay >= 0.0f ? a.weight_decay : opt_.optim.weight_decay;
      if (!decayed.empty() && decayed.back().end == begin && decayed.back().weight_decay == decay) {
        decayed.back().end += a.size();
      } else {
        decayed.push_back({begin, begin + a.size(), decay});
      }
    }
  optim_ = std::make_unique<Optimizer>(ctx(), opt_, host, std::move(decayed));
  grad_sync_ =
      std::make_unique<GradientSync>(comm_, ctx(), opt_, gradient_layout(decl_), train_detail::step_scalars(L()));
}

void Trainer::prepare_inputs() {
  // Layer-0 input features never change: exchange them once (fp32) and aggregate them once, or
  // keep the halo rows for a layer 0 that projects them itself every epoch.
  const int64_t F = s_.feature_dim;
  Matrix<float> host = train_detail::input_features(s_, opt_, graph_.local());
  // What layer 0 reads may depend on how sparse the features are: over all ranks, so that every
  // rank, device and rank count takes the same path.
  const double density = global_density(comm_, host.data(), owned() * F);
  inputs_.needs = spec_.inputs(density);
  const nn::InputNeeds needs = inputs_.needs;
  release_resident_pages(s_.features.data(), s_.features.size() * sizeof(float));  // copied into `host`
  const TensorView x_host = TensorView::of(host.data(), host.rows(), F);
  Tensor x_device;
  TensorView x = x_host;
  if (ctx().device != kDevCpu) {
    x_device.reset(ctx().device, DType::kF32, host.rows(), F);
    copy(ctx(), x_host, x_device);
    x = x_device.view();
    host = {};
  }
  {
    // A one-off fp32 exchanger: the activations' may hold fp16, and it keeps its buffers for
    // the next exchange, which this one (F columns, fp32) would leave oversized for training.
    // On the CPU it moves kSetupExchangeCols columns at a time, so that its gathered, send and
    // receive rows stay a fraction of the features themselves on a graph whose halo outnumbers
    // its rows. (The device exchanger takes contiguous matrices only: one exchange there.)
    const std::unique_ptr<HaloExchanger> exchange = make_halo_exchanger(s_, comm_, ctx(), DType::kF32);
    const quant::QuantKey key{opt_.seed, 0, 0, quant::Direction::kForward, 0, 0};
    const int64_t width = ctx().device == kDevCpu ? train_detail::kSetupExchangeCols : F;
    for (int64_t c = 0; c < F; c += width) {
      const TensorView block = x.col_range(c, std::min(F, c + width));
      Exchange pending = exchange->start_forward(block, 32, key, 0);
      exchange->finish_forward(pending, block);
    }
  }
  const bool bf16 = opt_.device.input_storage == InputStorage::kBf16;
  Tensor agg;
  if (needs.aggregated) {
    agg.reset(ctx().device, DType::kF32, owned(), F);
    graph_.aggregate(x, agg, /*halo_part=*/false);
    graph_.aggregate(x, agg, /*halo_part=*/true);
  }
  // With the halo rows' features at hand, a layer 0 that projects before it aggregates (GAT)
  // computes its halo rows' projections itself: the same keyed dropout and weights as their
  // owners use, so the same rows, without a quantized (or stale) exchange and with exact
  // layer-0 weight gradients.
  if (needs.features) inputs_.features.assign(ctx(), comm_, x.row_range(0, owned()), act_, bf16, density);
  // The halo rows are other ranks' owned rows: stored as the same density decides (both forms
  // give the same products).
  if (needs.halo_features)
    inputs_.halo_features.assign(ctx(), comm_, x.row_range(owned(), graph_.local()), act_, bf16, density);
  // The local features go before the aggregation is stored, so that the set-up never holds
  // them, the aggregation and its stored copy at once.
  synchronize(ctx());
  host = {};
  x_device = {};
  if (needs.aggregated) {
    inputs_.aggregated.assign(ctx(), comm_, agg, act_, bf16);
    synchronize(ctx());  // agg is freed at scope exit
  }
  halo_->stats().reset();
}

void Trainer::build_layers() {
  const nn::InputNeeds needs = inputs_.needs;
  nn::InputFeatures inputs;
  if (needs.aggregated) inputs.aggregated = &inputs_.aggregated;
  if (needs.features) inputs.features = &inputs_.features;
  if (needs.halo_features) inputs.halo_features = &inputs_.halo_features;
  layer_ctx_ = std::make_unique<nn::LayerContext>(
      nn::LayerContext{ctx(), opt_, act_, graph_, inputs, *optim_, *halo_, scratch_, L()});
  HALOGEN_EXPECTS(L() == spec_.layer_count(opt_), "model '{}' declares {} layers, expected {}", opt_.model.name, L(),
                  spec_.layer_count(opt_));
  for (int l = 0; l < L(); ++l) layers_.push_back(spec_.make_layer(decl_, l, *layer_ctx_, layers_));
  for (const auto& layer : layers_) layer->allocate();
  // Backward work matrices hold layer outputs and hidden inputs, never the input features
  // (their gradient is not needed), so they are as wide as the widest output.
  int64_t widest = 0;
  for (const nn::LayerDecl& d : decl_) widest = std::max(widest, d.out);
  dy_.reset(ctx().device, act_, owned(), widest);
  if (act_ != DType::kF32) dlogits_.reset(ctx().device, DType::kF32, owned(), decl_.back().out);
  scratch_.allocate(ctx().device);
}

}  // namespace halogen::trainer_impl
