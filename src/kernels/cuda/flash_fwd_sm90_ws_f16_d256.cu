// Hopper (sm_90a) forward instantiation for f16, head_dim 256: the warp-specialized TMA kernel only (the cp.async
// kernel's two-CTAs-per-SM tiles do not fit a 64 x 256 f32 accumulator per warpgroup beside its operands).
#include "kernels/cuda/flash_fwd_sm90_ws.cuh"

namespace flashkit::cuda {
template bool launch_flash_fwd_sm90_ws<__half, 256>(const FwdParams&, int, bool, cudaStream_t);
}  // namespace flashkit::cuda
