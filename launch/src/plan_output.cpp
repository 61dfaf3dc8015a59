// The plan as a person reads it (format_plan) and as JSON (plan_to_json); cost_model.hpp
// declares them beside the predictions they print.
#include <fmt/format.h>

#include <algorithm>

#include "cost_model.hpp"

namespace halogen::plan {

std::string format_plan(const Plan& plan, const nlohmann::json& report, const cluster::ClusterConfig& cluster,
                        const Calibration& calibration) {
  std::string out;
  auto line = [&](const std::string& s) {
    out += s;
    out += '\n';
  };
  line(fmt::format("plan for '{}' ({} nodes, {} undirected edges) on {} ranks = {} node{} of cluster {}",
                   report.value("dataset", "?"), report.value("num_nodes", int64_t{0}),
                   report.value("num_undirected_edges", int64_t{0}), plan.ranks, plan.nodes, plan.nodes == 1 ? "" : "s",
                   describe(cluster)));
  if (calibration.compute_s > 0.0) {
    line(fmt::format(
        "compute calibrated from {}: {:.4f} s/epoch on {} ranks (median of {} epochs) -> {:.4f} s/epoch here",
        calibration.source, calibration.compute_s, calibration.ranks, calibration.epochs_used,
        plan.work_max * plan.seconds_per_work));
    line(fmt::format("synchronisation slack: {:.4f} s/epoch{}", plan.slack_s,
                     calibration.ranks == plan.ranks ? " (median comm_s of that run; communication hides in it)"
                                                     : " (the calibration ran on another part count)"));
  } else if (plan.nominal_rate) {
    line(
        fmt::format("uncalibrated: nominal {:g} GFLOP/s per rank ({}); calibrate with --metrics for real figures: "
                    "{:.4f} s/epoch of compute",
                    plan.gflops,
                    cluster.has_gpus()
                        ? fmt::format("{:g} per GPU", kNominalGpuGflops)
                        : fmt::format("{:g} per core, {} cores per node", kNominalCoreGflops, cluster.cores_per_node),
                    plan.work_max * plan.seconds_per_work));
  } else {
    line(fmt::format("compute from --gflops {:g} per rank: {:.4f} s/epoch", plan.gflops,
                     plan.work_max * plan.seconds_per_work));
  }
  line(fmt::format(
      "{} parameters: gradient all-reduce {:.3f} MB per epoch ({})", plan.parameters,
      static_cast<double>(plan.predictions.empty() ? 0 : plan.predictions[0].allreduce_bytes_per_epoch) / 1e6,
      plan.grad_rank > 0           ? fmt::format("PowerSGD rank {}, fp32", plan.grad_rank)
      : plan.grad_bits > 0         ? fmt::format("{}-bit codes for the large matrices, the rest fp32", plan.grad_bits)
      : plan.grad_value_bytes == 8 ? std::string("fp64, packed")
                                   : std::string("fp32, layer-wise")));
  line(fmt::format("{:>4} {:>8} {:>12} {:>10} {:>9} {:>10} {:>10} {:>10} {:>9} {:>10} {:>8}", "bits", "mode",
                   "halo MB/ep", "compute s", "quant s", "halo s", "exposed s", "allred. s", "wait s", "epoch s",
                   "speedup"));
  const Prediction* base = plan.find(32, "sync");
  for (const auto& p : plan.predictions) {
    line(fmt::format("{:>4} {:>8} {:>12.3f} {:>10.4f} {:>9.4f} {:>10.4f} {:>10.4f} {:>10.4f} {:>9.4f} {:>10.4f} {:>8}",
                     p.bits, p.mode, static_cast<double>(p.halo_bytes_per_epoch) / 1e6, p.compute_s, p.quant_s,
                     p.halo_comm_s, p.exposed_comm_s, p.allreduce_s, p.wait_s, p.epoch_s,
                     base ? fmt::format("{:.2f}x", base->epoch_s / p.epoch_s) : std::string("-")));
  }
  bool has_stale = false;
  for (const auto& p : plan.predictions) has_stale = has_stale || p.mode == "stale";
  if (has_stale)
    line(
        "stale: the best case, every epoch stale. The adaptive policy (train's default) makes an epoch synchronous "
        "until two evaluations have measured how fast the halos change, and whenever the estimated error exceeds "
        "--stale-error-bound; such an epoch costs what the overlap row does");
  const Prediction& best = plan.fastest();
  line(fmt::format("expected fastest: --bits-fwd {0} --bits-bwd {0} --mode {1}: {2:.4f} s/epoch{3}", best.bits,
                   best.mode, best.epoch_s,
                   base ? fmt::format(" ({:.2f}x fp32 sync)", base->epoch_s / best.epoch_s) : std::string()));
  line(fmt::format("(epochs within {:g}% of the quickest tie: more bits, then fresh halos, win a tie)",
                   100.0 * kTieTolerance));
  // Which traffic dominates the fastest configuration, and what would shrink it.
  line(fmt::format("there: halo exchange {:.4f} s exposed, weight gradients {:.4f} s", best.exposed_comm_s,
                   best.allreduce_s));
  if (plan.grad_rank == 0 && plan.grad_bits == 0 && best.allreduce_s > best.exposed_comm_s &&
      best.allreduce_s > 0.1 * best.epoch_s)
    line(
        "gradients dominate: --grad-compression quantized sends the large weight matrices as 4-bit codes (about 8x "
        "fewer bytes, the exact run's epochs to a target); --grad-compression auto decides from this model after "
        "epoch 1");
  return out;
}

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json j;
  j["ranks"] = plan.ranks;
  j["nodes"] = plan.nodes;
  j["parameters"] = plan.parameters;
  j["gradient_values_per_rank"] = plan.gradient_values;
  j["gradient_values_per_rank_powersgd4"] = plan.gradient_values_powersgd;
  j["seconds_per_work"] = plan.seconds_per_work;
  j["slack_s"] = plan.slack_s;
  j["predictions"] = nlohmann::json::array();
  for (const auto& p : plan.predictions) {
    j["predictions"].push_back({{"bits", p.bits},
                                {"mode", p.mode},
                                {"halo_bytes_per_epoch", p.halo_bytes_per_epoch},
                                {"allreduce_bytes_per_epoch", p.allreduce_bytes_per_epoch},
                                {"compute_s", p.compute_s},
                                {"quant_s", p.quant_s},
                                {"halo_comm_s", p.halo_comm_s},
                                {"exposed_comm_s", p.exposed_comm_s},
                                {"allreduce_s", p.allreduce_s},
                                {"wait_s", p.wait_s},
                                {"epoch_s", p.epoch_s}});
  }
  const auto& best = plan.fastest();
  j["fastest"] = {{"bits", best.bits}, {"mode", best.mode}, {"epoch_s", best.epoch_s}};
  j["tie_tolerance"] = kTieTolerance;
  if (plan.nominal_rate) j["nominal_gflops_per_rank"] = plan.gflops;
  return j;
}

}  // namespace halogen::plan
