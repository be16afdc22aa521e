// The warp-specialized Hopper backward (sm_90a) for f16, head_dim 64 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_bwd_sm90_ws.cuh"

namespace flashkit::cuda {
template bool launch_flash_bwd_sm90_ws<__half, 64>(const BwdParams&, cudaStream_t);
}  // namespace flashkit::cuda
