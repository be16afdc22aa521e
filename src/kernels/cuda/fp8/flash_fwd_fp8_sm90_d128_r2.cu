// Hopper (sm_90a) fp8 forward, head_dim 128, lazy rescale: a row's running max moves only when a tile's max exceeds
// it by more than kFp8LazyRescaleTau (RESCALE = 2; docs/worklog/attention-fp8-cuda.md v4).
#include "kernels/cuda/fp8/flash_fwd_fp8_sm90.cuh"

namespace flashkit::cuda {
template Fp8LaunchResult launch_flash_fwd_fp8_sm90<128, 2, 128>(const Fp8FwdParams&, const uint8_t*, bool, cudaStream_t);
}  // namespace flashkit::cuda
