#include "partition_memory_check.hpp"

#include <cstdlib>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/train/memory_plan.hpp"

namespace halogen::cli {
namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : 0;
}

}  // namespace

int launched_ranks() {
  if (const int n = env_int("OMPI_COMM_WORLD_SIZE"); n > 0) return n;
  if (const int n = env_int("PMI_SIZE"); n > 0) return n;
  if (std::getenv("SLURM_STEP_ID") != nullptr) {
    if (const int n = env_int("SLURM_NTASKS"); n > 0) return n;
  }
  return 1;
}

std::string describe_partition_memory(const PartitionMemory& m) {
  std::string items;
  for (const auto& [what, bytes] : m.items) {
    if (bytes == 0) continue;
    items += fmt::format("{}{} {}", items.empty() ? "" : " + ", what, format_bytes(bytes));
  }
  return fmt::format("{}{} per rank ({}: {}){}", m.upper_bound ? "up to " : "", format_bytes(m.peak_per_rank), m.phase,
                     items, m.refused ? "; refused: METIS holds at most 2^31-1 stored entries" : "");
}

PartitionMemory choose_partition_method(std::optional<PartitionMethod> requested, const std::string& dataset,
                                        const PartitionCounts& counts, int ranks, uint64_t budget_per_rank,
                                        const std::string& budget_source) {
  const PartitionMethod first_choice = ranks > 1 ? PartitionMethod::kPtScotch : PartitionMethod::kMetis;
  const auto fits = [&](const PartitionMemory& p) {
    return !p.refused && (budget_per_rank == 0 || p.peak_per_rank <= budget_per_rank);
  };
  const std::vector<PartitionMethod> candidates =
      requested ? std::vector<PartitionMethod>{*requested}
                : std::vector<PartitionMethod>{first_choice, PartitionMethod::kLabelProp};
  for (const PartitionMethod m : candidates) {
    const PartitionMemory p = predict_partition_memory(m, counts, ranks);
    // Without a check an explicit method is kept; METIS then refuses a graph it cannot index.
    if (fits(p) || (budget_per_rank == 0 && requested)) return p;
  }
  // Nothing that may be chosen fits: say what each method would need, and what would fit.
  std::string needs;
  for (const PartitionMethod m : {PartitionMethod::kMetis, PartitionMethod::kPtScotch, PartitionMethod::kLabelProp}) {
    const PartitionMemory p = predict_partition_memory(m, counts, ranks);
    needs += fmt::format("\n  --method {:8s} on {} rank(s): {}{}", to_string(m), p.ranks, describe_partition_memory(p),
                         fits(p) ? " (fits)" : "");
  }
  int enough = ranks;
  while (enough < (1 << 20) &&
         predict_partition_memory(PartitionMethod::kLabelProp, counts, enough).peak_per_rank > budget_per_rank) {
    enough *= 2;
  }
  const std::string more_ranks = enough == ranks ? std::string("--method lp, ")
                                 : enough < (1 << 20)
                                     ? fmt::format("--method lp on {} ranks with this much memory each, ", enough)
                                     : std::string();
  HALOGEN_FAIL(
      "partitioning '{}' ({} nodes, {} stored entries, {} features{}) with {} on {} rank(s) will not fit: each rank "
      "has {} ({}). Predicted peaks:{}\nUse {}a machine with more memory, or --memory-limit none to try anyway.",
      dataset, counts.nodes, counts.stored_entries, counts.feature_dim,
      counts.target_columns > 0 ? fmt::format(", {} target columns", counts.target_columns) : std::string(),
      requested ? "--method " + to_string(*requested) : std::string("--method auto"), ranks,
      format_bytes(budget_per_rank), budget_source, needs, more_ranks);
}

}  // namespace halogen::cli
