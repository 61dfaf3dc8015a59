// The `halogen` program: one executable, one subcommand per step of the data flow.
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/config.hpp"

namespace {

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

}  // namespace

int main(int argc, char** argv) {
  // `halogen-run ARGS` (a link to halogen) is `halogen launch ARGS`.
  if (std::filesystem::path(argv[0]).filename() == "halogen-run") {
    try {
      return halogen::cli::cmd_launch(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "halogen-run: error: %s\n", e.what());
      return 1;
    }
  }
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "generate") return halogen::cli::cmd_generate(argc, argv, args);
    if (command == "convert") return halogen::cli::cmd_convert(argc, argv, args);
    if (command == "info") return halogen::cli::cmd_info(args);
    if (command == "partition") return halogen::cli::cmd_partition(argc, argv, args);
    if (command == "train") return halogen::cli::cmd_train(argc, argv, args);
    if (command == "predict") return halogen::cli::cmd_predict(argc, argv, args);
    if (command == "evaluate") return halogen::cli::cmd_evaluate(argc, argv, args);
    if (command == "export-model") return halogen::cli::cmd_export_model(args);
    if (command == "launch") return halogen::cli::cmd_launch(args);
    if (command == "slurm") return halogen::cli::cmd_slurm(args);
    if (command == "sweep") return halogen::cli::cmd_sweep(args);
    if (command == "plan") return halogen::cli::cmd_plan(args);
    if (command == "--version") {
      std::printf("halogen %s\n", HALOGEN_VERSION);
      return 0;
    }
    std::fprintf(stderr, "halogen: unknown command '%s'\n\n", command.c_str());
    print_usage();
    return 2;
  } catch (const halogen::CollectiveError& e) {
    // Every rank knows: exit cleanly with an error code.
    std::fprintf(stderr, "halogen %s: error: %s\n", command.c_str(), e.what());
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
    return 1;
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "halogen %s: %s (see halogen %s --help)\n", command.c_str(), e.what(), command.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "halogen %s: error: %s\n", command.c_str(), e.what());
    // Other ranks may be waiting in a collective: take the whole job down.
    int init = 0, fin = 0, size = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) {
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
      MPI_Finalize();
    }
    return 1;
  }
}
