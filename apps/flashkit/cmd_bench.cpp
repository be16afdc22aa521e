#include "commands.hpp"
namespace flashkit::cli {
void add_bench_command(CLI::App& app) { app.add_subcommand("bench", "Benchmark kernels side by side"); }
}  // namespace flashkit::cli
