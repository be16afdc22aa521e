#include "commands.hpp"
namespace flashkit::cli {
void add_analysis_commands(CLI::App&) {}
}  // namespace flashkit::cli
