// Forward and decode instantiations for bf16, head_dim 128 (one file per instantiation: parallel builds).
#include "kernels/cuda/flash_fwd.cuh"
#include "kernels/cuda/decode/flash_decode.cuh"

namespace flashkit::cuda {
template void launch_flash_fwd<__nv_bfloat16, 128>(const FwdParams&, cudaStream_t);
template void launch_flash_decode<__nv_bfloat16, 128>(const FwdParams&, cudaStream_t);
template ClusterResidency decode_cluster_residency<__nv_bfloat16, 128>();
template ClusterResidency decode_cluster_residency<__nv_bfloat16, 128, DecodeCfg<128>::kNarrowWarps>();
}  // namespace flashkit::cuda
