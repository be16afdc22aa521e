// Hopper (sm_90a) forward instantiations for f16, head_dim 64: the cp.async kernel and the
// warp-specialized TMA kernel (one file per dtype and head dim: parallel builds).
#include "kernels/cuda/flash_fwd_sm90.cuh"
#include "kernels/cuda/flash_fwd_sm90_ws.cuh"

namespace flashkit::cuda {
template bool launch_flash_fwd_sm90<__half, 64>(const FwdParams&, int, cudaStream_t);
template bool launch_flash_fwd_sm90_ws<__half, 64>(const FwdParams&, int, bool, cudaStream_t);
}  // namespace flashkit::cuda
