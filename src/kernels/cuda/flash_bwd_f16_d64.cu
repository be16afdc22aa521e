// Backward instantiation for f16, head_dim 64 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_bwd.cuh"

namespace flashkit::cuda {
template void launch_flash_bwd<__half, 64>(const BwdParams&, cudaStream_t);
}  // namespace flashkit::cuda
