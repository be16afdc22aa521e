// Hopper (sm_90a) fp8 forward, head_dim 128, with the exp2 of 3 of every 8 key octets of unmasked tiles on the FMA
// pipe (EMU = 3; docs/worklog/attention-fp8-cuda.md v3).
#include "kernels/cuda/fp8/flash_fwd_fp8_sm90.cuh"

namespace flashkit::cuda {
template Fp8LaunchResult launch_flash_fwd_fp8_sm90<128, 3>(const Fp8FwdParams&, const uint8_t*, bool, cudaStream_t);
}  // namespace flashkit::cuda
