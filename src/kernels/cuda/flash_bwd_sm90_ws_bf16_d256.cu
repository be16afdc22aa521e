// The warp-specialized Hopper backward (sm_90a) for bf16, head_dim 256 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_bwd_sm90_ws_d256.cuh"

namespace flashkit::cuda {
template bool launch_flash_bwd_sm90_ws_d256<__nv_bfloat16>(const BwdParams&, cudaStream_t);
}  // namespace flashkit::cuda
