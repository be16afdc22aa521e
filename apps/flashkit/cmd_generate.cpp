// flashkit generate | chat (placeholder until the engine lands).
#include "commands.hpp"
namespace flashkit::cli {
void add_generate_commands(CLI::App&) {}
}  // namespace flashkit::cli
