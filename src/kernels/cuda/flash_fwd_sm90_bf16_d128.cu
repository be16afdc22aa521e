// Hopper (sm_90a) forward instantiation for bf16, head_dim 128 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_fwd_sm90.cuh"

namespace flashkit::cuda {
template bool launch_flash_fwd_sm90<__nv_bfloat16, 128>(const FwdParams&, cudaStream_t, TileShape*);
}  // namespace flashkit::cuda
