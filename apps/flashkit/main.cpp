// flashkit command-line entry point: subcommands register themselves (commands.hpp); every error is
// reported as one line on stderr with a non-zero exit status.
#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::cli {

void add_info_command(CLI::App& app) {
  auto* info = app.add_subcommand("info", "Print build and machine information");
  info->callback([] {
    std::cout << build_info() << "\n"
              << "cpu isa:        " << cpu_isa() << "\n"
              << "threads:        " << num_threads() << "\n"
              << "cuda devices:   " << cuda_device_count() << "\n"
              << "physical memory " << physical_memory_bytes() / (1 << 20) << " MiB\n";
  });
}

}  // namespace flashkit::cli

int main(int argc, char** argv) {
  // The one read of the FLASHKIT_* environment: every command runs with this default tuning.
  flashkit::set_default_tuning(flashkit::tuning_from_env());
  CLI::App app{"flashkit: IO-aware attention kernels and a transformer engine for CPUs and NVIDIA GPUs"};
  // At most one subcommand; "none" is reported by the callback below so that an unknown word is named
  // by CLI11's own unexpected-argument error instead of a generic "subcommand required".
  app.require_subcommand(0, 1);
  app.callback([&app] {
    if (app.get_subcommands().empty()) throw CLI::RequiredError("a subcommand (try --help)");
  });
  app.set_version_flag("--version", std::string(flashkit::version()));
  flashkit::cli::add_info_command(app);
  flashkit::cli::add_bench_command(app);
  flashkit::cli::add_spec_bench_command(app);
  flashkit::cli::add_analysis_commands(app);
  flashkit::cli::add_tokenize_commands(app);
  flashkit::cli::add_generate_commands(app);
  flashkit::cli::add_train_commands(app);
  flashkit::cli::add_serve_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const flashkit::Error& e) {
    std::cerr << "flashkit: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "flashkit: error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
