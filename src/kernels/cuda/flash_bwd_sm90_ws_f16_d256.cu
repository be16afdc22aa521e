// The warp-specialized Hopper backward (sm_90a) for f16, head_dim 256 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_bwd_sm90_ws_d256.cuh"

namespace flashkit::cuda {
template bool launch_flash_bwd_sm90_ws_d256<__half>(const BwdParams&, cudaStream_t);
}  // namespace flashkit::cuda
