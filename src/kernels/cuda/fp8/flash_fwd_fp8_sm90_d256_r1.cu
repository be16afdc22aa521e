// Hopper (sm_90a) fp8 forward, head_dim 256, O's rescale skipped by a warp whose 16 row maxima all stayed put
// (RESCALE = 1, exact; docs/worklog/attention-fp8-cuda.md v4).
#include "kernels/cuda/fp8/flash_fwd_fp8_sm90.cuh"

namespace flashkit::cuda {
template Fp8LaunchResult launch_flash_fwd_fp8_sm90<256, 1, 128>(const Fp8FwdParams&, const uint8_t*, bool, cudaStream_t);
}  // namespace flashkit::cuda
