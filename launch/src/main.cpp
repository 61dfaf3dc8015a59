// The `halogen` program: one executable, one subcommand per step of the data flow.
//
// Errors reach a person as one line each: "halogen CMD: error: WHAT", from one rank only. A
// step that failed on every rank (a CollectiveError) is printed by rank 0 without naming it;
// one that failed on some ranks by the first of them, naming it ("error on rank 2: ..."); an
// error outside a collective by the rank that hit it, naming it when the job has several.
// Usage errors (exit 2) say where the options or commands are listed; the source location
// of an error is printed with debug logging only.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/config.hpp"
#include "suggest.hpp"

namespace {

const std::vector<std::string> kCommands = {"generate", "convert",      "info",   "partition", "train", "predict",
                                            "evaluate", "export-model", "launch", "slurm",     "sweep", "plan"};

void print_usage() {
  std::printf(
      "halogen %s: distributed full-graph GNN training with low-bit halo exchange\n\n"
      "usage: halogen <command> [options]   (halogen <command> --help for its options)\n\n"
      "commands:\n"
      "  generate sbm|rmat   generate a synthetic dataset\n"
      "  convert             convert an OGB / edge list / Matrix Market / METIS graph or a NumPy .npz\n"
      "  info                describe a dataset\n"
      "  partition           cut a dataset into one shard per rank (METIS, PT-Scotch, label propagation)\n"
      "  train               train a GNN (run under mpirun -np P); --save-model DIR keeps it\n"
      "  predict             a saved model's predictions, probabilities and embeddings as .npy (any -np)\n"
      "  evaluate            a saved model's loss and accuracies on a dataset's splits\n"
      "  export-model        a model directory from a training checkpoint\n"
      "  launch              run train on a cluster: mpirun or srun with a cluster config (also: halogen-run)\n"
      "  slurm               write an sbatch script: partition + train job steps, arrays for sweeps\n"
      "  sweep               run a grid of trainings; CSV and plots\n"
      "  plan                predict bytes and epoch time per bit width and mode on a cluster\n",
      HALOGEN_VERSION);
}

int run_command(const std::string& command, int argc, char** argv, const std::vector<std::string>& args) {
  using namespace halogen::cli;
  if (command == "generate") return cmd_generate(argc, argv, args);
  if (command == "convert") return cmd_convert(argc, argv, args);
  if (command == "info") return cmd_info(args);
  if (command == "partition") return cmd_partition(argc, argv, args);
  if (command == "train") return cmd_train(argc, argv, args);
  if (command == "predict") return cmd_predict(argc, argv, args);
  if (command == "evaluate") return cmd_evaluate(argc, argv, args);
  if (command == "export-model") return cmd_export_model(args);
  if (command == "launch") return cmd_launch(args);
  if (command == "slurm") return cmd_slurm(args);
  if (command == "sweep") return cmd_sweep(args);
  if (command == "plan") return cmd_plan(args);
  std::abort();  // main checks the name against kCommands first
}

bool mpi_running() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

// This process's rank and the job's size in MPI_COMM_WORLD; before MPI is up, what the
// launcher (mpirun, srun) told it, else 0 of 1.
struct Place {
  int rank = 0, size = 1;
};
Place place() {
  Place p;
  if (mpi_running()) {
    MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p.size);
    return p;
  }
  const char* const vars[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                 {"PMIX_RANK", nullptr},
                                 {"PMI_RANK", "PMI_SIZE"},
                                 {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& v : vars) {
    if (const char* r = std::getenv(v[0])) {
      p.rank = std::atoi(r);
      const char* s = v[1] ? std::getenv(v[1]) : nullptr;
      p.size = s ? std::max(1, std::atoi(s)) : std::max(p.rank + 1, 2);
      return p;
    }
  }
  return p;
}

// A usage error (exit 2): the same on every rank (the same arguments), so rank 0 says it.
int usage_error(const std::string& program, const std::string& what, const std::string& listed_by) {
  if (place().rank == 0) std::fprintf(stderr, "%s: %s (%s)\n", program.c_str(), what.c_str(), listed_by.c_str());
  return 2;
}

// Runs `body`, turning what it throws into one line from one rank and an exit status.
template <typename Body>
int report_failures(const std::string& program, Body body) {
  try {
    return body();
  } catch (const halogen::CollectiveError& e) {
    // Every rank knows: the rank it came from says it, every rank exits cleanly.
    const Place p = place();
    if (e.rank() < 0 || e.rank() == p.rank) halogen::report_error(program, e, !e.on_every_rank() && p.size > 1);
    if (mpi_running()) MPI_Finalize();
    return 1;
  } catch (const boost::program_options::error& e) {
    return usage_error(program, e.what(), program + " --help lists the options");
  } catch (const std::exception& e) {
    // This rank alone: name it, and take the whole job down, since other ranks may be
    // waiting for this one in a collective.
    const Place p = place();
    halogen::report_error(program, e, p.size > 1);
    if (mpi_running()) {
      if (p.size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
      MPI_Finalize();
    }
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // `halogen-run ARGS` (a link to halogen) is `halogen launch ARGS`.
  if (std::filesystem::path(argv[0]).filename() == "halogen-run") {
    return report_failures("halogen-run",
                           [&] { return halogen::cli::cmd_launch(std::vector<std::string>(argv + 1, argv + argc)); });
  }
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version") {
    std::printf("halogen %s\n", HALOGEN_VERSION);
    return 0;
  }
  if (std::find(kCommands.begin(), kCommands.end(), command) == kCommands.end()) {
    std::string what = "unknown command '" + command + "'";
    std::vector<std::string> names = kCommands;
    names.push_back("--version");
    names.push_back("--help");
    if (const auto close = halogen::cli::suggest(command, names); !close.empty())
      what += "; did you mean " + halogen::cli::quoted_alternatives(close) + "?";
    return usage_error("halogen", what, "halogen --help lists the commands");
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  return report_failures("halogen " + command, [&] { return run_command(command, argc, argv, args); });
}
