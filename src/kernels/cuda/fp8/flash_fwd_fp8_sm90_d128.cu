// Hopper (sm_90a) fp8 forward, head_dim 128, O rescaled after every key tile (RESCALE = 0; one file per head dim and
// RESCALE: parallel builds).
#include "kernels/cuda/fp8/flash_fwd_fp8_sm90.cuh"

namespace flashkit::cuda {
template Fp8LaunchResult launch_flash_fwd_fp8_sm90<128, 0, 128>(const Fp8FwdParams&, const uint8_t*, bool, cudaStream_t);
}  // namespace flashkit::cuda
