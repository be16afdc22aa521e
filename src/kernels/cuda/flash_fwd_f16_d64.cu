// Forward and decode instantiations for f16, head_dim 64 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_fwd.cuh"
#include "kernels/cuda/decode/flash_decode.cuh"

namespace flashkit::cuda {
template void launch_flash_fwd<__half, 64>(const FwdParams&, cudaStream_t);
template void launch_flash_decode<__half, 64>(const FwdParams&, cudaStream_t);
template ClusterResidency decode_cluster_residency<__half, 64>();
template ClusterResidency decode_cluster_residency<__half, 64, DecodeCfg<64>::kNarrowWarps>();
}  // namespace flashkit::cuda
