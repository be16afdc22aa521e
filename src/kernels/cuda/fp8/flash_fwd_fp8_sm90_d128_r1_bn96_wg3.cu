// Hopper (sm_90a) fp8 forward, head_dim 128, the exact O-rescale skip (RESCALE = 1), three consumer warpgroups
// (BM 192: three softmaxes in flight against one tensor pipe) with 96-key tiles, the widest whose S, P and O fit the
// 160 registers three consumers get (128 keys need ~176; docs/worklog/attention-fp8-cuda.md v6).
#include "kernels/cuda/fp8/flash_fwd_fp8_sm90.cuh"

namespace flashkit::cuda {
template Fp8LaunchResult launch_flash_fwd_fp8_sm90<128, 1, 96, 3>(const Fp8FwdParams&, const uint8_t*, bool, cudaStream_t);
}  // namespace flashkit::cuda
