#include "nn/registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "optimizer.hpp"

namespace halogen::nn {

const ModelSpec& gcn_spec();
const ModelSpec& sage_spec();
const ModelSpec& gat_spec();
const ModelSpec& gcnii_spec();
const ModelSpec& appnp_spec();

namespace {
// The registered models: a new model is its file and one line here.
const std::vector<const ModelSpec*>& registry() {
  static const std::vector<const ModelSpec*> models = {
      &gcn_spec(),    // nn/gcn.cpp
      &sage_spec(),   // nn/sage.cpp
      &gat_spec(),    // nn/gat.cpp
      &gcnii_spec(),  // nn/gcnii.cpp
      &appnp_spec(),  // nn/appnp.cpp
  };
  return models;
}
}  // namespace

const ModelSpec& model_spec(std::string_view name) {
  for (const ModelSpec* m : registry()) {
    if (m->name() == name) return *m;
    for (std::string_view alias : m->aliases())
      if (alias == name) return *m;
  }
  HALOGEN_FAIL("unknown model '{}': expected one of {}", name, fmt::join(model_names(), ", "));
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelSpec* m : registry()) names.emplace_back(m->name());
  return names;
}

double ModelSpec::hyperparameter(const TrainOptions& opt, std::string_view name) const {
  if (const auto it = opt.model.params.find(std::string(name)); it != opt.model.params.end()) return it->second;
  for (const Hyperparameter& h : hyperparameters())
    if (h.name == name) return h.value;
  HALOGEN_FAIL("model '{}' has no hyper-parameter '{}'", this->name(), name);
}

void describe_model(const TrainOptions& opt, nlohmann::json& j) {
  const ModelSpec& spec = model_spec(opt.model.name);
  spec.describe(opt, j);
  for (const ModelSpec::Hyperparameter& h : spec.hyperparameters())
    j[std::string(h.name)] = spec.hyperparameter(opt, h.name);
}

void read_model_description(const nlohmann::json& j, TrainOptions& opt) {
  const ModelSpec& spec = model_spec(opt.model.name);
  spec.read_description(j, opt);
  for (const ModelSpec::Hyperparameter& h : spec.hyperparameters())
    opt.model.params[std::string(h.name)] = j.at(std::string(h.name)).get<double>();
}

std::vector<double> halo_error_gains(const std::vector<LayerDecl>& decl) {
  std::vector<double> gains(decl.size());
  double above = 1.0;
  for (size_t l = decl.size(); l-- > 0;) {
    above *= decl[l].damping;
    gains[l] = above;
  }
  return gains;
}

std::vector<LayerDecl> layout(const TrainOptions& opt, int64_t feature_dim, int64_t classes) {
  std::vector<LayerDecl> layers = model_spec(opt.model.name).declare(opt, feature_dim, classes);
  size_t offset = 0;
  for (LayerDecl& layer : layers) {
    layer.begin = offset;
    for (ParamArray& a : layer.arrays) {
      a.offset = offset;
      offset += static_cast<size_t>(a.size());
    }
    layer.end = offset;
  }
  return layers;
}

void Workspace::reserve(const std::string& name, DType dtype, int64_t rows, int64_t cols) {
  for (Buffer& b : buffers_) {
    if (b.name != name) continue;
    HALOGEN_EXPECTS(b.dtype == dtype, "scratch '{}' reserved with two element types", name);
    // Rows and columns grow separately: views are rows x cols prefixes of rows x max cols.
    b.rows = std::max(b.rows, rows);
    b.cols = std::max(b.cols, cols);
    return;
  }
  buffers_.push_back({name, dtype, rows, cols, Tensor{}});
}

void Workspace::allocate(Device device) {
  for (Buffer& b : buffers_)
    if (b.rows > 0 && b.cols > 0) b.tensor.reset(device, b.dtype, b.rows, b.cols);
}

TensorView Workspace::view(const std::string& name, int64_t rows, int64_t cols) const {
  for (const Buffer& b : buffers_) {
    if (b.name != name) continue;
    HALOGEN_EXPECTS(rows * cols <= b.tensor.numel(), "scratch '{}': {} x {} exceeds what was reserved", name, rows,
                    cols);
    return b.tensor.view().reshaped(rows, cols);
  }
  HALOGEN_FAIL("scratch '{}' was never reserved", name);
}

namespace {
TensorView array_view(const TensorView& flat, const ParamArray& a) {
  const auto begin = static_cast<int64_t>(a.offset);
  return flat.row_range(begin, begin + a.size()).reshaped(a.rows(), a.cols());
}
}  // namespace

TensorView LayerContext::param(const ParamArray& a) const { return array_view(params.params().view(), a); }
TensorView LayerContext::weight(const ParamArray& a) const { return array_view(params.weights().view(), a); }
TensorView LayerContext::grad(const ParamArray& a) const { return array_view(params.grads().view(), a); }

}  // namespace halogen::nn

namespace halogen {

std::vector<std::string> model_names() { return nn::model_names(); }
std::string model_name(const std::string& name_or_alias) { return std::string(nn::model_spec(name_or_alias).name()); }
TrainOptions model_defaults(const std::string& model) {
  TrainOptions t;
  t.model.name = model_name(model);
  nn::model_spec(t.model.name).defaults(t);
  return t;
}
int default_hidden(const std::string& model) { return model_defaults(model).model.hidden; }
int model_layer_count(const TrainOptions& options) { return nn::model_spec(options.model.name).layer_count(options); }

std::vector<ModelParam> model_params() {
  std::vector<ModelParam> params;
  for (const std::string& name : nn::model_names())
    for (const nn::ModelSpec::Hyperparameter& h : nn::model_spec(name).hyperparameters()) {
      auto it = std::find_if(params.begin(), params.end(), [&](const ModelParam& p) { return p.name == h.name; });
      if (it == params.end()) {
        params.push_back({std::string(h.name), std::string(h.help), {name}});
      } else {
        it->models.push_back(name);
      }
    }
  return params;
}

}  // namespace halogen
