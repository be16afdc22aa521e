// The default tensor-parallel all-reduce of a Backend (backend.hpp, "tensor parallelism"): finish what the backend
// has queued, then let the communicator sum the rows in place. Backends with a stream-ordered path (NCCL on the
// backend's own stream, a reduce fused with the residual add) override it.
#include "dist/comm.hpp"
#include "engine/backend.hpp"

namespace flashkit::engine {

void Backend::all_reduce_sum(const Tensor& x, int64_t T, dist::Communicator& comm) {
  synchronize();
  if (x.ld == x.cols) {  // the session's o buffer: T contiguous rows, one collective
    comm.all_reduce_sum(x.data, size_t(T * x.cols), x.dtype);
    return;
  }
  for (int64_t t = 0; t < T; ++t) comm.all_reduce_sum(x.row_slice(t, 1).data, size_t(x.cols), x.dtype);
}

}  // namespace flashkit::engine
