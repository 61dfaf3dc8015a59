// Saved models (model.hpp): .npy weights and model.json, read back with checks that name the
// file; the rows of a distributed result written as one .npy in global order with MPI-IO.
#include "halogen/train/model.hpp"

#include <fmt/ranges.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <type_traits>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/output.hpp"
#include "halogen/train/checkpoint.hpp"
#include "nn/registry.hpp"
#include "tasks/task.hpp"
#include "trainer_common.hpp"

namespace halogen {

namespace {

constexpr int kModelFormatVersion = 1;

// One parameter array of the flat layout: its name, offset and shape.
struct ArraySpec {
  std::string name;
  size_t offset = 0;
  std::vector<int64_t> shape;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::vector<ArraySpec> array_specs(const TrainOptions& opt, int64_t feature_dim, int64_t classes) {
  // One array per declared parameter array, named by its layer.
  std::vector<ArraySpec> specs;
  const auto layout = nn::layout(opt, feature_dim, classes);
  for (size_t l = 0; l < layout.size(); ++l)
    for (const nn::ParamArray& a : layout[l].arrays)
      specs.push_back({fmt::format("layer{}.{}", l, a.name), a.offset, a.shape});
  return specs;
}

template <typename T>
const char* npy_descr() {
  if constexpr (std::is_same_v<T, float>) return "<f4";
  if constexpr (std::is_same_v<T, int32_t>) return "<i4";
  if constexpr (std::is_same_v<T, uint8_t>) return "|u1";
}

// The .npy header (format 1.0) of a C-order array, padded so the data starts at a multiple
// of 64 bytes.
std::string npy_header(const char* descr, const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i)
    dims += fmt::format("{}{}", shape[i], shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += static_cast<char>(1);
  header += static_cast<char>(0);
  const auto len = static_cast<uint16_t>(dict.size());
  header += static_cast<char>(len & 0xff);
  header += static_cast<char>(len >> 8);
  return header + dict;
}

// Parses the bytes of an fp32 .npy written by save_model (or NumPy: little-endian <f4, C order), checking it
// against the expected shape; errors name the file.
std::vector<float> parse_npy_f32(const std::filesystem::path& path, const std::string& bytes,
                                 const std::vector<int64_t>& shape) {
  HALOGEN_EXPECTS(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0, "'{}' is not a .npy file",
                  path.string());
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    start = 10;
  } else {
    HALOGEN_EXPECTS(major == 2 || major == 3, "'{}': .npy format version {} is not supported", path.string(), major);
    HALOGEN_EXPECTS(bytes.size() >= 12, "'{}' is truncated", path.string());
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    start = 12;
  }
  HALOGEN_EXPECTS(bytes.size() >= start + header_len, "'{}' is truncated in its header", path.string());
  const std::string header = bytes.substr(start, header_len);
  HALOGEN_EXPECTS(header.find("'descr': '<f4'") != std::string::npos,
                  "'{}' must hold little-endian float32 ('<f4'); its header is {}", path.string(), header);
  HALOGEN_EXPECTS(header.find("'fortran_order': False") != std::string::npos, "'{}' must be in C order", path.string());
  std::vector<int64_t> found;
  const size_t open = header.find("'shape': (");
  HALOGEN_EXPECTS(open != std::string::npos, "'{}' has no shape in its header", path.string());
  const size_t close = header.find(')', open);
  std::string dims = header.substr(open + 10, close - open - 10);
  for (size_t pos = 0; pos < dims.size();) {
    const size_t comma = std::min(dims.find(',', pos), dims.size());
    std::string item = dims.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(' '));
    if (!item.empty()) found.push_back(std::stoll(item));
    pos = comma + 1;
  }
  HALOGEN_EXPECTS(found == shape, "'{}' has shape ({}), the model needs ({})", path.string(), fmt::join(found, ", "),
                  fmt::join(shape, ", "));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t data = start + header_len;
  HALOGEN_EXPECTS(bytes.size() == data + static_cast<size_t>(n) * 4, "'{}' holds {} data bytes, expected {}",
                  path.string(), bytes.size() - data, n * 4);
  std::vector<float> values(static_cast<size_t>(n));
  std::memcpy(values.data(), bytes.data() + data, values.size() * sizeof(float));
  return values;
}

nlohmann::json shape_json(const SavedModel& m) {
  const TrainOptions& o = m.options;
  nlohmann::json j = {{"model", o.model.name},
                      {"layers", o.model.layers},
                      {"hidden", o.model.hidden},
                      {"feature_dim", m.feature_dim},
                      {"classes", m.num_classes},
                      {"feature_norm", to_string(o.model.feature_norm)},
                      {"task", o.model.task.empty() ? std::string("multiclass") : o.model.task}};
  nn::describe_model(o, j);
  return j;
}

// The options of a model from its description (model.json or a checkpoint's manifest).
TrainOptions options_of(const nlohmann::json& j, const std::string& where) {
  try {
    TrainOptions o;
    o.model.name = j.at("model").get<std::string>();
    o.model.layers = j.at("layers").get<int>();
    o.model.hidden = j.at("hidden").get<int>();
    // Models and checkpoints from before other tasks existed are multiclass.
    o.model.task = j.value("task", std::string("multiclass"));
    nn::read_model_description(j, o);
    o.model.feature_norm = parse_feature_norm(j.value("feature_norm", std::string("row")));
    o.output.progress = false;
    o.validate();
    return o;
  } catch (const nlohmann::json::exception& e) {
    HALOGEN_FAIL("{}: the model description is incomplete: {}", where, e.what());
  }
}

// An array's file must be a plain name inside the model directory: a model.json may come from
// anywhere, and "../../etc/passwd" or "/etc/shadow" must not even be opened.
void check_array_file_name(const std::filesystem::path& json_path, const std::string& array, const std::string& file) {
  const bool plain = !file.empty() && file != "." && file != ".." &&
                     file.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos;
  HALOGEN_EXPECTS(plain,
                  "'{}': array '{}' names the file '{}'; an array file must be a plain file name inside the model "
                  "directory (no '/', '\\', '.' or '..')",
                  json_path.string(), array, file);
}

// `dir` as an absolute path naming the directory itself: "m/" and "." have no file name of
// their own, and the temporary beside the target needs one.
std::filesystem::path model_target(const std::filesystem::path& dir) {
  std::filesystem::path target = std::filesystem::absolute(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  HALOGEN_EXPECTS(!target.filename().empty(), "cannot write a model to '{}': no directory name", dir.string());
  return target;
}

}  // namespace

bool is_model_dir(const std::filesystem::path& dir) {
  const nlohmann::json j = read_json_object_or_null(dir / "model.json");
  return j.is_object() && j.contains("format") && j["format"] == "halogen-model";
}

void check_model_output(const std::filesystem::path& dir, bool overwrite, std::string_view option) {
  check_output_dir({model_target(dir), option,
                    "a halogen model directory (one whose model.json has \"format\": \"halogen-model\")", is_model_dir},
                   overwrite, DirWrite::kReplaced);
}

void save_model(const std::filesystem::path& model_dir, const SavedModel& model, bool overwrite) {
  const auto specs = array_specs(model.options, model.feature_dim, model.num_classes);
  HALOGEN_EXPECTS(
      !specs.empty() && model.params.size() == specs.back().offset + static_cast<size_t>(specs.back().size()),
      "save_model: {} parameters for a model of {}", model.params.size(),
      specs.empty() ? 0 : specs.back().offset + specs.back().size());
  check_model_output(model_dir, overwrite);
  const std::filesystem::path dir = model_target(model_dir);
  // Everything goes into a fresh sibling folder, which then replaces `dir` in two renames.
  const std::filesystem::path parent = dir.parent_path();
  std::filesystem::create_directories(parent);
  const std::filesystem::path tmp =
      parent / fmt::format(".{}.tmp-{}-{}", dir.filename().string(), ::getpid(), std::random_device{}());
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  try {
    nlohmann::json arrays = nlohmann::json::object();
    for (const ArraySpec& a : specs) {
      const std::string file = a.name + ".npy";
      std::string bytes = npy_header("<f4", a.shape);
      const size_t data = bytes.size();
      bytes.resize(data + static_cast<size_t>(a.size()) * sizeof(float));
      std::memcpy(bytes.data() + data, model.params.data() + a.offset, static_cast<size_t>(a.size()) * sizeof(float));
      write_file_atomic(tmp / file, bytes);
      arrays[a.name] = {{"file", file},
                        {"shape", a.shape},
                        {"dtype", "float32"},
                        {"xxh64", fmt::format("{:016x}", checksum64(bytes.data(), bytes.size()))}};
    }
    nlohmann::json j = {{"format", "halogen-model"}, {"version", kModelFormatVersion}};
    j.update(shape_json(model));
    j["aggregation"] = nn::model_spec(model.options.model.name).aggregation_text();
    j["arrays"] = arrays;
    j["training"] = model.training;
    write_file_atomic(tmp / "model.json", j.dump(2) + "\n");
    std::filesystem::path old;
    if (std::filesystem::exists(dir)) {
      // A name of its own, so that nothing already there is deleted with the old model.
      old = parent / fmt::format(".{}.old-{}-{}", dir.filename().string(), ::getpid(), std::random_device{}());
      std::filesystem::rename(dir, old);
    }
    std::filesystem::rename(tmp, dir);
    if (!old.empty()) std::filesystem::remove_all(old);
  } catch (const std::filesystem::filesystem_error& e) {
    std::filesystem::remove_all(tmp);
    HALOGEN_FAIL("writing the model to '{}': {}", dir.string(), e.what());
  } catch (...) {
    std::filesystem::remove_all(tmp);
    throw;
  }
}

SavedModel load_model(const std::filesystem::path& dir) {
  const auto json_path = dir / "model.json";
  HALOGEN_EXPECTS(std::filesystem::exists(json_path), "'{}' is not a model directory: '{}' is missing", dir.string(),
                  json_path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(json_path));
  } catch (const nlohmann::json::exception& e) {
    HALOGEN_FAIL("'{}' is not valid JSON: {}", json_path.string(), e.what());
  }
  HALOGEN_EXPECTS(j.value("format", "") == "halogen-model", "'{}' is not a halogen model (format '{}')",
                  json_path.string(), j.value("format", ""));
  HALOGEN_EXPECTS(j.value("version", 0) == kModelFormatVersion,
                  "'{}' is model format version {}; this halogen reads {}", json_path.string(), j.value("version", 0),
                  kModelFormatVersion);
  SavedModel m;
  m.options = options_of(j, json_path.string());
  try {
    m.feature_dim = j.at("feature_dim").get<int64_t>();
    m.num_classes = j.at("classes").get<int64_t>();
    m.training = j.value("training", nlohmann::json::object());
    const auto specs = array_specs(m.options, m.feature_dim, m.num_classes);
    m.params.assign(specs.back().offset + static_cast<size_t>(specs.back().size()), 0.0f);
    const auto& arrays = j.at("arrays");
    HALOGEN_EXPECTS(arrays.size() == specs.size(), "'{}' lists {} arrays; a {} of this shape has {}",
                    json_path.string(), arrays.size(), m.options.model.name, specs.size());
    for (const ArraySpec& a : specs) {
      HALOGEN_EXPECTS(arrays.contains(a.name), "'{}' lacks the array '{}' of this model", json_path.string(), a.name);
      const auto& entry = arrays.at(a.name);
      const std::string file_name = entry.at("file").get<std::string>();
      check_array_file_name(json_path, a.name, file_name);
      const std::filesystem::path file = dir / file_name;
      HALOGEN_EXPECTS(std::filesystem::exists(file), "'{}' is missing (listed in '{}')", file.string(),
                      json_path.string());
      const std::string bytes = read_text_file(file);
      const std::string sum = fmt::format("{:016x}", checksum64(bytes.data(), bytes.size()));
      HALOGEN_EXPECTS(sum == entry.at("xxh64").get<std::string>(),
                      "'{}' is damaged: its checksum is {}, model.json says {}", file.string(), sum,
                      entry.at("xxh64").get<std::string>());
      const std::vector<float> values = parse_npy_f32(file, bytes, a.shape);
      std::copy(values.begin(), values.end(), m.params.begin() + static_cast<std::ptrdiff_t>(a.offset));
    }
  } catch (const nlohmann::json::exception& e) {
    HALOGEN_FAIL("'{}' is incomplete: {}", json_path.string(), e.what());
  }
  return m;
}

SavedModel model_from_checkpoint(const std::filesystem::path& checkpoint_dir) {
  const nlohmann::json manifest = read_latest_manifest(checkpoint_dir);
  const std::string where = fmt::format("checkpoint in '{}'", checkpoint_dir.string());
  SavedModel m;
  nlohmann::json description = manifest.at("model");
  description["feature_norm"] = manifest.at("training").value("feature_norm", std::string("row"));
  m.options = options_of(description, where);
  m.feature_dim = description.at("feature_dim").get<int64_t>();
  m.num_classes = description.at("classes").get<int64_t>();
  const int epoch = manifest.at("epoch").get<int>();
  // Every rank holds the same parameters; rank 0's file has them.
  CheckpointReader r(checkpoint_rank_file(checkpoint_dir, epoch, 0));
  const auto specs = array_specs(m.options, m.feature_dim, m.num_classes);
  m.params.assign(specs.back().offset + static_cast<size_t>(specs.back().size()), 0.0f);
  // The best-validation epoch's weights, as --save-model keeps them (a checkpoint written
  // before any evaluation has only the current ones).
  const bool best = r.has("best_params");
  r.read_array(best ? "best_params" : "params", std::span<float>(m.params));
  const auto meta = r.json("meta");
  m.training = {{"epochs", epoch + 1},
                {"weights_of_epoch", best ? meta.value("best_epoch", epoch) : epoch},
                {"from_checkpoint", checkpoint_dir.string()},
                {fmt::format("best_val_{}", selection_metric(m.options.model.task)), meta.value("best_val", 0.0)},
                {"best_epoch", meta.value("best_epoch", -1)},
                {"settings", manifest.at("training")}};
  return m;
}

static_assert(kMultilabelPositiveAbove == tasks::kPositiveAbove, "predict and the F1-micro threshold agree");

void apply_task_output(std::string_view task, float* values, int64_t rows, int64_t cols) {
  tasks::apply_output(tasks::make_task(task)->output(), values, rows, cols);
}

std::string selection_metric(std::string_view task) {
  const std::unique_ptr<tasks::Task> t = tasks::make_task(task);
  return std::string(t->metric_names().at(t->selection().metric));
}

std::optional<float> task_weight_decay(std::string_view task, LabelKind labels) {
  return tasks::make_task(task, labels)->weight_decay();
}

double Inference::metric(std::string_view key) const {
  for (const auto& [name, value] : metrics)
    if (name == key) return value;
  std::vector<std::string> keys;
  for (const auto& m : metrics) keys.push_back(m.first);
  HALOGEN_FAIL("task '{}' reports no metric '{}' (it reports {})", task, key, fmt::join(keys, ", "));
}

template <typename T>
void write_global_npy(const std::filesystem::path& path, Communicator& comm, const int32_t* global_ids, int64_t rows,
                      const T* values, int64_t cols, int64_t total_rows) {
  // Rank 0 writes the header, every rank its rows at their global positions (an indexed file
  // view, one collective write), all under a temporary name that rank 0 renames at the end.
  MPI_Comm world = MPI_COMM_WORLD;
  if (auto* mc = dynamic_cast<MpiCommunicator*>(&comm)) world = mc->mpi_comm();
  std::vector<int64_t> shape = {total_rows};
  if (cols > 0) shape.push_back(cols);
  const std::string header = npy_header(npy_descr<T>(), shape);
  const int64_t row_values = std::max<int64_t>(cols, 1);
  const std::filesystem::path tmp = path.string() + ".tmp";
  comm.barrier();
  MPI_File fh;
  HALOGEN_CHECK_MPI(MPI_File_open(world, tmp.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
  HALOGEN_CHECK_MPI(
      MPI_File_set_size(fh, static_cast<MPI_Offset>(header.size() + total_rows * row_values * sizeof(T))));
  if (comm.rank() == 0)
    HALOGEN_CHECK_MPI(
        MPI_File_write_at(fh, 0, header.data(), static_cast<int>(header.size()), MPI_BYTE, MPI_STATUS_IGNORE));
  MPI_Datatype row;
  HALOGEN_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(row_values * sizeof(T)), MPI_BYTE, &row));
  HALOGEN_CHECK_MPI(MPI_Type_commit(&row));
  std::vector<int> displacements(global_ids, global_ids + rows);
  // A file view lists displacements in increasing order; the rows are reordered to match.
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return global_ids[a] < global_ids[b]; });
  std::vector<T> sorted(static_cast<size_t>(rows * row_values));
  for (int64_t k = 0; k < rows; ++k) {
    displacements[static_cast<size_t>(k)] = global_ids[order[static_cast<size_t>(k)]];
    std::memcpy(sorted.data() + k * row_values, values + order[static_cast<size_t>(k)] * row_values,
                static_cast<size_t>(row_values) * sizeof(T));
  }
  MPI_Datatype view;
  HALOGEN_CHECK_MPI(MPI_Type_create_indexed_block(static_cast<int>(rows), 1, displacements.data(), row, &view));
  HALOGEN_CHECK_MPI(MPI_Type_commit(&view));
  HALOGEN_CHECK_MPI(MPI_File_set_view(fh, static_cast<MPI_Offset>(header.size()), row, view, "native", MPI_INFO_NULL));
  HALOGEN_CHECK_MPI(MPI_File_write_all(fh, sorted.data(), static_cast<int>(rows), row, MPI_STATUS_IGNORE));
  HALOGEN_CHECK_MPI(MPI_File_close(&fh));
  MPI_Type_free(&view);
  MPI_Type_free(&row);
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::rename(tmp, path);
  comm.barrier();
}

template void write_global_npy<float>(const std::filesystem::path&, Communicator&, const int32_t*, int64_t,
                                      const float*, int64_t, int64_t);
template void write_global_npy<int32_t>(const std::filesystem::path&, Communicator&, const int32_t*, int64_t,
                                        const int32_t*, int64_t, int64_t);
template void write_global_npy<uint8_t>(const std::filesystem::path&, Communicator&, const int32_t*, int64_t,
                                        const uint8_t*, int64_t, int64_t);

}  // namespace halogen
