// Saved models on disk (model.hpp): a model.json may only name array files inside its own
// directory, and save_model replaces only an empty directory or an earlier model unless told
// to overwrite, so a mistyped --save-model never deletes a user's files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "halogen/core/io.hpp"
#include "halogen/train/model.hpp"
#include "nn/registry.hpp"
#include "test_data.hpp"
#include "trainer_common.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::ScratchDir;

// A 2-layer GCN from 3 features to 2 classes with distinct parameter values.
SavedModel tiny_model() {
  SavedModel m;
  m.options.model.name = "gcn";
  m.options.model.layers = 2;
  m.options.model.hidden = 4;
  m.feature_dim = 3;
  m.num_classes = 2;
  const auto layout = nn::layout(m.options, m.feature_dim, m.num_classes);
  m.params.resize(layout.back().end);
  for (size_t i = 0; i < m.params.size(); ++i) m.params[i] = 0.25f * static_cast<float>(i) - 1.0f;
  m.training = {{"epochs", 1}};
  return m;
}

// Rewrites the "file" of one array in dir/model.json.
void set_array_file(const fs::path& dir, const std::string& array, const std::string& file) {
  nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "model.json"));
  j["arrays"][array]["file"] = file;
  write_file_atomic(dir / "model.json", j.dump(2));
}

TEST(ModelFiles, ArrayFileMustBeAPlainNameInsideTheModelDirectory) {
  ScratchDir scratch("model-io");
  const fs::path dir = scratch / "m";
  save_model(dir, tiny_model());
  EXPECT_EQ(load_model(dir).params, tiny_model().params);
  // Exact copies of the array outside the directory and in a subdirectory: their checksums
  // match, so only the name rule keeps them from being read.
  fs::copy_file(dir / "layer0.weight.npy", scratch / "x.npy");
  fs::create_directories(dir / "sub");
  fs::copy_file(dir / "layer0.weight.npy", dir / "sub" / "x.npy");
  for (const std::string bad : {"../x.npy", "/etc/passwd", "sub/x.npy", "sub\\x.npy", "..", ".", ""}) {
    set_array_file(dir, "layer0.weight", bad);
    const std::string msg = error_of([&] { load_model(dir); });
    EXPECT_NE(msg.find((dir / "model.json").string()), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("array 'layer0.weight' names the file '" + bad + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("plain file name inside the model directory"), std::string::npos) << msg;
  }
  set_array_file(dir, "layer0.weight", "layer0.weight.npy");
  EXPECT_EQ(load_model(dir).params, tiny_model().params);
}

TEST(ModelFiles, SaveReplacesOnlyAnEmptyDirectoryOrAModel) {
  ScratchDir scratch("model-io");
  SavedModel model = tiny_model();
  // A new path, an empty directory, and an earlier model are written.
  save_model(scratch / "new", model);
  fs::create_directories(scratch / "empty");
  save_model(scratch / "empty", model);
  EXPECT_TRUE(is_model_dir(scratch / "empty"));
  model.params[0] = 42.0f;
  save_model(scratch / "new", model);
  EXPECT_EQ(load_model(scratch / "new").params[0], 42.0f);

  // A directory of someone else's files is refused, naming it and --overwrite, untouched.
  const fs::path foreign = scratch / "thesis";
  fs::create_directories(foreign);
  write_file_atomic(foreign / "thesis.tex", "precious");
  const std::string msg = error_of([&] { save_model(foreign, model); });
  EXPECT_NE(msg.find(foreign.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("--overwrite"), std::string::npos) << msg;
  EXPECT_NE(msg.find("halogen model directory"), std::string::npos) << msg;
  EXPECT_EQ(read_text_file(foreign / "thesis.tex"), "precious");
  EXPECT_NE(error_of([&] { check_model_output(foreign, false, "--save-model"); }).find("--save-model"),
            std::string::npos);
  // A model.json of another program does not make a model directory.
  write_file_atomic(foreign / "model.json", R"({"format": 3})");
  EXPECT_FALSE(is_model_dir(foreign));
  EXPECT_THROW(save_model(foreign, model), Error);
  EXPECT_EQ(read_text_file(foreign / "thesis.tex"), "precious");

  // With overwrite it is replaced as a whole, and nothing is left beside it.
  save_model(foreign, model, /*overwrite=*/true);
  EXPECT_FALSE(fs::exists(foreign / "thesis.tex"));
  EXPECT_EQ(load_model(foreign).params, model.params);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(scratch.path())) ++entries;
  EXPECT_EQ(entries, 3u);  // new, empty, thesis: no temporary or old copy

  // A file is never replaced by a model directory.
  write_file_atomic(scratch / "file", "data");
  EXPECT_NE(error_of([&] { save_model(scratch / "file", model, true); }).find("is not a directory"), std::string::npos);
  EXPECT_EQ(read_text_file(scratch / "file"), "data");
}

}  // namespace
}  // namespace halogen
