// Hopper (sm_90a) forward instantiation for f16, head_dim 128 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_fwd_sm90.cuh"

namespace flashkit::cuda {
template bool launch_flash_fwd_sm90<__half, 128>(const FwdParams&, cudaStream_t, TileShape*);
}  // namespace flashkit::cuda
