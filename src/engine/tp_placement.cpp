// Where the --tp ranks of generate / chat / serve run (apps/flashkit/tp_launch.hpp, docs/distributed.md, "Ranks in
// processes"): a pure function of the settings, unit-tested in tests/dist/test_tp_nccl_choice.cpp.
#include <cstdlib>
#include <string>

#include "engine/tp.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine {
namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }
bool is_cuda(const std::string& device) { return device == "cuda" || device.rfind("cuda:", 0) == 0; }
int device_base(const std::string& device) { return device.size() > 5 ? std::atoi(device.c_str() + 5) : 0; }

}  // namespace

bool tp_uses_processes(int tp, const std::string& device, int backend, bool launched, bool nccl, int gpus) {
  engine::check_tp(tp);
  const std::string n = "--tp " + std::to_string(tp);
  const bool cuda = is_cuda(device);
  const int base = device_base(device);
  const bool fits = base + tp <= gpus;
  if (!launched && backend != 2) return backend == 0 && cuda && tp > 1 && nccl && fits;
  if (backend == 1)
    bad(n + ": FLASHKIT_TP_BACKEND=threads, but this process was launched as one rank of several (WORLD_SIZE set)");
  const std::string why = launched ? " (this process was launched as one rank: WORLD_SIZE set)"
                                   : " (FLASHKIT_TP_BACKEND=nccl asks for ranks in processes)";
  if (!cuda) bad(n + ": ranks in processes need --device cuda (one GPU per rank), got --device " + device + why);
  if (!nccl)
    fail(Status::unsupported, n + ": NCCL communicator not built: this flashkit was built without NCCL" + why +
                                  "; FLASHKIT_TP_BACKEND=threads runs the ranks as threads of one process");
  if (!fits)
    bad(n + ": device " + device + " with " + std::to_string(tp) + " ranks needs CUDA devices " +
        std::to_string(base) + ".." + std::to_string(base + tp - 1) + ", this machine has " + std::to_string(gpus) +
        why);
  return true;
}

}  // namespace flashkit::engine
