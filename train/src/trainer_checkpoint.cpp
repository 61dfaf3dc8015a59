// The trainer's checkpoints: every rank's file of one epoch, the manifest and latest.json that
// publish it, and reading them back on resume (trainer_common.hpp declares them).
#include <cmath>
#include <cstdlib>
#include <limits>

#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "trainer_common.hpp"

namespace halogen::train_detail {

bool checkpoint_due(const TrainOptions& opt, int epoch, bool last) {
  return !opt.reliability.checkpoint_dir.empty() &&
         ((opt.reliability.checkpoint_every > 0 && (epoch + 1) % opt.reliability.checkpoint_every == 0) || last);
}

void write_checkpoint(const TrainOptions& opt, const Shard& s, int epoch, const nlohmann::json& model,
                      const EpochLog& log, const std::function<void(CheckpointWriter&, nlohmann::json& meta)>& fill) {
  const auto dir = opt.reliability.checkpoint_dir;
  const std::string partition_id = fmt::format("{:016x}", s.partition_id);
  run_collectively(MPI_COMM_WORLD, fmt::format("writing the checkpoint of epoch {}", epoch), [&] {
    std::filesystem::create_directories(checkpoint_epoch_dir(dir, epoch));
    CheckpointWriter w;
    nlohmann::json meta = {{"format", "halogen-checkpoint"},
                           {"epoch", epoch},
                           {"rank", s.part},
                           {"num_parts", s.num_parts},
                           {"partition_id", partition_id},
                           {"model", model},
                           {"training", training_description(opt)},
                           {"best_val", log.best_val},
                           {"improved_epoch", log.improved_epoch},
                           {"best_epoch", log.best_epoch},
                           {"test_at_best", log.test_at_best}};
    if (std::isfinite(log.best_val_loss)) meta["best_val_loss"] = log.best_val_loss;  // JSON has no infinity
    if (std::isfinite(log.val_loss_at_best)) meta["val_loss_at_best"] = log.val_loss_at_best;
    fill(w, meta);
    w.add_json("meta", meta);
    w.write(checkpoint_rank_file(dir, epoch, s.part));
  });
  // Every rank's file is complete: publish the manifest, then point latest.json at it.
  run_collectively(MPI_COMM_WORLD, "publishing the checkpoint", [&] {
    if (s.part != 0) return;
    nlohmann::json manifest = {{"format", "halogen-checkpoint"},
                               {"epoch", epoch},
                               {"num_parts", s.num_parts},
                               {"partition_id", partition_id},
                               {"dataset", s.dataset_name},
                               {"model", model},
                               {"training", training_description(opt)}};
    for (int r = 0; r < s.num_parts; ++r) manifest["files"].push_back(fmt::format("rank-{}.ckpt", r));
    write_file_atomic(checkpoint_epoch_dir(dir, epoch) / "manifest.json", manifest.dump(2));
    write_file_atomic(
        dir / "latest.json",
        nlohmann::json{{"directory", checkpoint_epoch_dir(dir, epoch).filename().string()}, {"epoch", epoch}}.dump());
    // Keep the newest two checkpoints.
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("epoch-", 0) != 0) continue;
      const int e = std::atoi(name.c_str() + 6);
      if (e < epoch && e != epoch - std::max(opt.reliability.checkpoint_every, 1))
        std::filesystem::remove_all(entry.path());
    }
  });
  // Test hook: die right after this epoch's checkpoint, as a crashed job would.
  if (const char* f = std::getenv("HALOGEN_FAULT_EXIT_AFTER_EPOCH"); f && std::atoi(f) == epoch) std::_Exit(3);
}

int read_checkpoint(const TrainOptions& opt, const Shard& s, const std::filesystem::path& dir,
                    const nlohmann::json& model, EpochLog& log,
                    const std::function<void(const CheckpointReader&, const nlohmann::json& meta)>& restore) {
  int start_epoch = 0;
  run_collectively(MPI_COMM_WORLD, fmt::format("resuming from '{}'", dir.string()), [&] {
    try {
      const auto manifest = read_latest_manifest(dir);
      const int epoch = manifest.at("epoch").get<int>();
      HALOGEN_EXPECTS(manifest.at("num_parts").get<int>() == s.num_parts,
                      "checkpoint in '{}' was written by {} ranks, this run has {}", dir.string(),
                      manifest.at("num_parts").get<int>(), s.num_parts);
      HALOGEN_EXPECTS(manifest.at("partition_id").get<std::string>() == fmt::format("{:016x}", s.partition_id),
                      "checkpoint in '{}' belongs to partition {}, these shards to partition {:016x}", dir.string(),
                      manifest.at("partition_id").get<std::string>(), s.partition_id);
      for (const auto& [key, value] : model.items()) {
        HALOGEN_EXPECTS(manifest.at("model").contains(key) && manifest.at("model").at(key) == value,
                        "checkpoint in '{}' is of another model: {} is {} there, {} in this run", dir.string(), key,
                        manifest.at("model").value(key, nlohmann::json()).dump(), value.dump());
      }
      const nlohmann::json training = training_description(opt);  // items() must not outlive it
      for (const auto& [key, value] : training.items()) {
        // A change of forward coding is refused by the halo channel's restore, which names the
        // option to resume with: no warning before that error.
        if (key == "halo_forward_coding") continue;
        if (manifest.at("training").value(key, nlohmann::json()) != value && s.part == 0)
          log::warn(
              "resuming with {} = {} (the checkpoint was trained with {}): later epochs will differ from the original "
              "run",
              key, value.dump(), manifest.at("training").value(key, nlohmann::json()).dump());
      }
      CheckpointReader r(checkpoint_rank_file(dir, epoch, s.part));
      const auto meta = r.json("meta");
      HALOGEN_EXPECTS(meta.at("rank").get<int>() == s.part && meta.at("epoch").get<int>() == epoch,
                      "checkpoint file '{}' is rank {} epoch {}, expected rank {} epoch {}", r.path().string(),
                      meta.at("rank").get<int>(), meta.at("epoch").get<int>(), s.part, epoch);
      log.best_val = meta.at("best_val").get<double>();
      log.best_epoch = meta.at("best_epoch").get<int>();
      log.test_at_best = meta.at("test_at_best").get<double>();
      log.best_val_loss = meta.value("best_val_loss", std::numeric_limits<double>::infinity());
      log.improved_epoch = meta.value("improved_epoch", log.best_epoch);
      log.val_loss_at_best = meta.value("val_loss_at_best", std::numeric_limits<double>::infinity());
      restore(r, meta);
      start_epoch = epoch + 1;
    } catch (const nlohmann::json::exception& e) {
      // A manifest or record that parses but lacks a field or has the wrong type.
      HALOGEN_FAIL("checkpoint in '{}' (rank {}) is incomplete or from an incompatible halogen: {}", dir.string(),
                   s.part, e.what());
    }
  });
  if (s.part == 0) log::info("resumed from {} at epoch {}", dir.string(), start_epoch);
  return start_epoch;
}

void write_layer_states(CheckpointWriter& w, nlohmann::json& meta, const std::vector<LayerState>& layers) {
  const auto add_floats = [&](const std::string& name, const std::vector<float>& values) {
    w.add(name, values.data(), values.size() * sizeof(float));
  };
  std::vector<int> tracker_epochs, last_rows, last_cols, smoothed_cols;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerState& st = layers[l];
    tracker_epochs.push_back(st.forward_epoch);
    if (!st.halo.empty()) add_floats(fmt::format("halo/{}", l), st.halo);
    last_rows.push_back(st.last_rows);
    last_cols.push_back(st.last_cols);
    if (!st.last_sent.empty()) add_floats(fmt::format("last_sent/{}", l), st.last_sent);
    smoothed_cols.push_back(st.smoothed_cols);
    if (!st.smoothed_grad.empty()) add_floats(fmt::format("smoothed_grad/{}", l), st.smoothed_grad);
    for (int dir_i = 0; dir_i < 2; ++dir_i) {
      const auto& pending = dir_i == 0 ? st.pending_fwd : st.pending_bwd;
      std::vector<int> epochs;
      for (size_t i = 0; i < pending.size(); ++i) {
        w.add_string(fmt::format("{}/{}/{}", dir_i == 0 ? "fwd" : "bwd", l, i), pending[i].second);
        epochs.push_back(pending[i].first);
      }
      meta[dir_i == 0 ? "pending_fwd" : "pending_bwd"].push_back(epochs);
    }
  }
  meta["tracker_forward"] = tracker_epochs;
  meta["last_sent_rows"] = last_rows;
  meta["last_sent_cols"] = last_cols;
  meta["smoothed_grad_cols"] = smoothed_cols;
}

std::vector<LayerState> read_layer_states(const CheckpointReader& r, const nlohmann::json& meta,
                                          const std::vector<int64_t>& halo_values, int64_t sends) {
  const size_t L = halo_values.size();
  const auto tracker_epochs = meta.at("tracker_forward").get<std::vector<int>>();
  const auto last_rows = meta.at("last_sent_rows").get<std::vector<int>>();
  const auto last_cols = meta.at("last_sent_cols").get<std::vector<int>>();
  const auto smoothed_cols = meta.value("smoothed_grad_cols", std::vector<int>(L, 0));
  HALOGEN_EXPECTS(
      tracker_epochs.size() == L && last_rows.size() == L && last_cols.size() == L && smoothed_cols.size() == L,
      "checkpoint '{}' has the state of another number of layers", r.path().string());
  const auto read_floats = [&](const std::string& name, int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    r.read_array(name, std::span<float>(values));
    return values;
  };
  std::vector<LayerState> layers(L);
  for (size_t l = 0; l < L; ++l) {
    LayerState& st = layers[l];
    st.forward_epoch = tracker_epochs[l];
    if (halo_values[l] > 0) st.halo = read_floats(fmt::format("halo/{}", l), halo_values[l]);
    st.last_rows = last_rows[l];
    st.last_cols = last_cols[l];
    // A record exists exactly when it holds values: a rank that sends nothing (one rank, or a
    // part without boundary rows) keeps the state's width but writes no rows.
    if (const int64_t n = static_cast<int64_t>(st.last_rows) * st.last_cols; n > 0)
      st.last_sent = read_floats(fmt::format("last_sent/{}", l), n);
    st.smoothed_cols = smoothed_cols[l];
    if (const int64_t n = sends * st.smoothed_cols; n > 0)
      st.smoothed_grad = read_floats(fmt::format("smoothed_grad/{}", l), n);
    for (int dir_i = 0; dir_i < 2; ++dir_i) {
      auto& pending = dir_i == 0 ? st.pending_fwd : st.pending_bwd;
      const auto epochs = meta.at(dir_i == 0 ? "pending_fwd" : "pending_bwd").at(l).get<std::vector<int>>();
      for (size_t i = 0; i < epochs.size(); ++i)
        pending.emplace_back(epochs[i], r.bytes(fmt::format("{}/{}/{}", dir_i == 0 ? "fwd" : "bwd", l, i)));
    }
  }
  return layers;
}

}  // namespace halogen::train_detail
