// Backward instantiation for bf16, head_dim 256 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_bwd.cuh"

namespace flashkit::cuda {
template void launch_flash_bwd<__nv_bfloat16, 256>(const BwdParams&, cudaStream_t);
}  // namespace flashkit::cuda
