// The launcher tests' child: writes "rank world local rendezvous" to <dir>/rank<RANK>.txt and exits with the
// status given for its rank (argv: dir, then one status per rank), or sleeps when the status is "sleep".
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "dist/launch.hpp"

int main(int argc, char** argv) {
  const auto e = flashkit::dist::rank_env();
  if (argc < 2) return 2;
  std::ofstream(std::string(argv[1]) + "/rank" + std::to_string(e.rank) + ".txt")
      << e.rank << " " << e.world_size << " " << e.local_rank << " " << e.rendezvous << "\n";
  if (2 + e.rank < argc) {
    const std::string what = argv[2 + e.rank];
    if (what == "sleep") std::this_thread::sleep_for(std::chrono::seconds(30));
    return std::atoi(what.c_str());
  }
  return 0;
}
