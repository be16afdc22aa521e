// flashkit command-line entry point: subcommands register themselves (commands.hpp). Every failure ends here as
// one line on stderr: usage errors and invalid input (CLI11's parse errors, flashkit::Error, malformed numbers,
// impossible sizes, out of memory) exit with status 2; anything else is an internal error, status 3. Output that
// could not be written (a full disk, a closed stdout) is an error too.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "cpu_wait.hpp"
#include "llama_aliases.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::cli {

void add_info_command(CLI::App& app) {
  auto* info = app.add_subcommand("info", "Print build and machine information");
  info->callback([] {
    std::cout << build_info() << "\n"
              << "cpu isa:        " << cpu_isa() << "\n"
              << "threads:        " << num_threads() << " (at most " << max_threads() << ")\n"
              << "cpu waits:      " << (default_tuning().omp_wait_passive ? "passive" : "active (spinning)") << "\n"
              << "cuda devices:   " << cuda_device_count() << "\n"
              << "physical memory " << physical_memory_bytes() / (1 << 20) << " MiB\n";
  });
}

}  // namespace flashkit::cli

namespace {

// A closed standard descriptor would be handed to the next open() (a model file, the -o file) and output written
// there: park /dev/null on it instead -- read-only for stdout, so that writes fail and are reported.
void guard_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int got = open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
    if (got >= 0 && got != fd) {
      dup2(got, fd);
      close(got);
    }
  }
}

int error(const std::string& msg, int status) {
  std::cerr << "flashkit: error: " << msg << "\n" << std::flush;
  return status;
}

std::string doing() {
  const char* a = flashkit::cli::Activity::current();
  return a ? std::string(" while ") + a : std::string();
}

}  // namespace

int main(int argc, char** argv) {
  guard_standard_descriptors();
  // The one read of the FLASHKIT_* environment: every command runs with this default tuning.
  const flashkit::Tuning tuning = flashkit::tuning_from_env();
  flashkit::cli::apply_cpu_wait_policy(tuning, argv);  // may re-execute the program with OMP_WAIT_POLICY=passive
  flashkit::set_default_tuning(tuning);
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
  flashkit::cli::add_bench_ssm_command(app);
  flashkit::cli::add_analysis_commands(app);
  flashkit::cli::add_tokenize_commands(app);
  flashkit::cli::add_generate_commands(app);
  flashkit::cli::add_train_commands(app);
  flashkit::cli::add_serve_commands(app);
  flashkit::cli::add_eval_commands(app);
  try {
    const std::vector<std::string> args = flashkit::cli::rewrite_llama_aliases(argc, argv);
    std::vector<const char*> arg_ptrs;
    for (const auto& s : args) arg_ptrs.push_back(s.c_str());
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
    flashkit::cli::check_written(std::cout, "standard output");
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return error(std::string(e.what()) + " (flashkit --help lists the commands and options)", 2);
  } catch (const flashkit::Error& e) {
    const std::string m = e.what();
    if (e.status() == flashkit::Status::out_of_memory && m.rfind("out of memory", 0) != 0)
      return error("out of memory: " + m, 2);
    return error(m, 2);
  } catch (const std::bad_alloc&) {
    return error("out of memory" + doing() + " (the request needs more memory than this machine can give)", 2);
  } catch (const std::length_error& e) {
    return error("out of memory" + doing() + ": a buffer of impossible size was requested (" + e.what() + ")", 2);
  } catch (const std::invalid_argument& e) {
    return error("invalid input" + doing() + ": a value could not be read as a number (" + e.what() + ")", 2);
  } catch (const std::out_of_range& e) {
    return error("invalid input" + doing() + ": a value is out of range (" + e.what() + ")", 2);
  } catch (const std::exception& e) {
    return error(std::string("internal error: ") + e.what(), 3);
  }
  // Output written with stdio (the report tables on stderr, printf rows).
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return error(std::string("writing standard output failed: ") + std::strerror(errno), 2);
  return 0;
}
