// Forward and decode instantiations for f16, head_dim 256 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_fwd.cuh"
#include "kernels/cuda/decode/flash_decode.cuh"

namespace flashkit::cuda {
template void launch_flash_fwd<__half, 256>(const FwdParams&, cudaStream_t);
template void launch_flash_decode<__half, 256>(const FwdParams&, cudaStream_t);
template ClusterResidency decode_cluster_residency<__half, 256>();
}  // namespace flashkit::cuda
