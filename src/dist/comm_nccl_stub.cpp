// Built without NCCL: the NCCL entry points say so.
#include "dist/comm.hpp"
#include "flashkit/error.hpp"

namespace flashkit::dist {

bool nccl_built() { return false; }

NcclId nccl_unique_id() {
  fail(Status::unsupported, "NCCL communicator: not built (this flashkit was built without NCCL)");
}

std::unique_ptr<Communicator> make_nccl(int, int, int, const NcclId&) {
  fail(Status::unsupported, "NCCL communicator: not built (this flashkit was built without NCCL)");
}

}  // namespace flashkit::dist
