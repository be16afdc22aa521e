// Hopper (sm_90a) fp8 forward, head_dim 128, the exact O-rescale skip (RESCALE = 1), the wide key tile of 192 keys
// (two V^T panels a tile; docs/worklog/attention-fp8-cuda.md v5).
#include "kernels/cuda/fp8/flash_fwd_fp8_sm90.cuh"

namespace flashkit::cuda {
template Fp8LaunchResult launch_flash_fwd_fp8_sm90<128, 1, 192>(const Fp8FwdParams&, const uint8_t*, bool, cudaStream_t);
}  // namespace flashkit::cuda
