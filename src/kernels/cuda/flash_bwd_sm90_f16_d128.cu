// Hopper (sm_90a) backward instantiation for f16, head_dim 128 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_bwd_sm90.cuh"

namespace flashkit::cuda {
template bool launch_flash_bwd_sm90<__half, 128>(const BwdParams&, int, cudaStream_t);
}  // namespace flashkit::cuda
