// The `halogen` program: one executable, one subcommand per step of the data flow.
//
// Errors reach a person as one line each: "halogen CMD: error: WHAT", from one rank only. A
// step that failed on every rank (a CollectiveError) is printed by rank 0 without naming it;
// one that failed on some ranks by the first of them, naming it ("error on rank 2: ..."); an
// error outside a collective by the rank that hit it, naming it when MPI is up and the job
// has several (before MPI starts no rank is known, and each process prints its own line).
// Usage errors (exit 2) say where the options or commands are listed, from the launcher's
// rank 0 only; the source location of an error is printed with debug logging only.
#include <mpi.h>

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

// The subcommands: the usage text, the "did you mean" candidates and the dispatch all read
// this one table.
struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv, const std::vector<std::string>& args);
  const char* usage;  // its line in `halogen --help`, after the name
  const char* description;
};

// The handlers that need no MPI arguments, in the table's shape.
template <int (*handler)(const std::vector<std::string>&)>
int without_mpi(int, char**, const std::vector<std::string>& args) {
  return handler(args);
}

const Subcommand kSubcommands[] = {
    {"generate", halogen::cli::cmd_generate, "sbm|rmat", "generate a synthetic dataset"},
    {"convert", halogen::cli::cmd_convert, "",
     "convert an OGB / edge list / Matrix Market / METIS graph or a NumPy .npz"},
    {"info", without_mpi<halogen::cli::cmd_info>, "", "describe a dataset"},
    {"partition", halogen::cli::cmd_partition, "",
     "cut a dataset into one shard per rank (METIS, PT-Scotch, label propagation)"},
    {"train", halogen::cli::cmd_train, "", "train a GNN (run under mpirun -np P); --save-model DIR keeps it"},
    {"predict", halogen::cli::cmd_predict, "",
     "a saved model's predictions, probabilities and embeddings as .npy (any -np)"},
    {"evaluate", halogen::cli::cmd_evaluate, "", "a saved model's loss and accuracies on a dataset's splits"},
    {"export-model", without_mpi<halogen::cli::cmd_export_model>, "", "a model directory from a training checkpoint"},
    {"launch", without_mpi<halogen::cli::cmd_launch>, "",
     "run train on a cluster: mpirun or srun with a cluster config (also: halogen-run)"},
    {"slurm", without_mpi<halogen::cli::cmd_slurm>, "",
     "write an sbatch script: partition + train job steps, arrays for sweeps"},
    {"sweep", without_mpi<halogen::cli::cmd_sweep>, "", "run a grid of trainings; CSV and plots"},
    {"plan", without_mpi<halogen::cli::cmd_plan>, "",
     "predict bytes and epoch time per bit width and mode on a cluster"},
};

const Subcommand* find_subcommand(const std::string& name) {
  for (const Subcommand& c : kSubcommands)
    if (name == c.name) return &c;
  return nullptr;
}

void print_usage() {
  std::printf(
      "halogen %s: distributed full-graph GNN training with low-bit halo exchange\n\n"
      "usage: halogen <command> [options]   (halogen <command> --help for its options)\n\n"
      "commands:\n",
      HALOGEN_VERSION);
  for (const Subcommand& c : kSubcommands) {
    const std::string head = *c.usage ? std::string(c.name) + " " + c.usage : std::string(c.name);
    std::printf("  %-18s  %s\n", head.c_str(), c.description);
  }
}

bool mpi_running() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

// This process's rank in MPI_COMM_WORLD; before MPI is up (a usage error), what the launcher
// (mpirun, srun) told it, else 0.
int world_rank() {
  int rank = 0;
  if (mpi_running()) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
  }
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(var)) return std::atoi(r);
  return rank;
}

// The job's size in MPI_COMM_WORLD; 1 before MPI is up, when no error carries a rank to name.
int world_size() {
  int size = 1;
  if (mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// A usage error (exit 2): the same on every rank (the same arguments), so rank 0 says it.
int usage_error(const std::string& program, const std::string& what, const std::string& listed_by) {
  if (world_rank() == 0) std::fprintf(stderr, "%s: %s (%s)\n", program.c_str(), what.c_str(), listed_by.c_str());
  return 2;
}

// Runs `body`, turning what it throws into one line from one rank and an exit status.
template <typename Body>
int report_failures(const std::string& program, Body body) {
  try {
    return body();
  } catch (const halogen::CollectiveError& e) {
    // Every rank knows: the rank it came from says it, every rank exits cleanly.
    if (e.rank() < 0 || e.rank() == world_rank())
      halogen::report_error(program, e, !e.on_every_rank() && world_size() > 1);
    if (mpi_running()) MPI_Finalize();
    return 1;
  } catch (const boost::program_options::error& e) {
    return usage_error(program, e.what(), program + " --help lists the options");
  } catch (const std::exception& e) {
    // This rank alone: name it, and take the whole job down, since other ranks may be
    // waiting for this one in a collective.
    const int size = world_size();
    halogen::report_error(program, e, size > 1);
    if (mpi_running()) {
      if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
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
  const Subcommand* const cmd = find_subcommand(command);
  if (cmd == nullptr) {
    std::vector<std::string> names;
    for (const Subcommand& c : kSubcommands) names.push_back(c.name);
    names.push_back("--version");
    names.push_back("--help");
    return usage_error("halogen", "unknown command '" + command + "'" + halogen::cli::did_you_mean(command, names),
                       "halogen --help lists the commands");
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  return report_failures("halogen " + command, [&] { return cmd->run(argc, argv, args); });
}
