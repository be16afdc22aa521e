// Backward instantiation for bf16, head_dim 128 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_bwd.cuh"

namespace flashkit::cuda {
template void launch_flash_bwd<__nv_bfloat16, 128>(const BwdParams&, cudaStream_t);
}  // namespace flashkit::cuda
