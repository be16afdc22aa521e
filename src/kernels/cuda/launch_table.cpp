// The dtype-erased launchers of flash_api.hpp: (dtype, padded head dim) -> the template instantiation of the
// per-file .cu units. Host code only; the dispatch (src/ops/attention_cuda.cpp) calls these.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "flashkit/error.hpp"
#include "kernels/cuda/flash_api.hpp"

namespace flashkit::cuda {

namespace {

// Calls f(T{}, std::integral_constant<int, D>{}) for the dtype and padded head dim.
template <typename F>
auto by_type_and_dim(DType dt, int dpad, F&& f) {
  auto with_dim = [&](auto tag) {
    if (dpad == 64) return f(tag, std::integral_constant<int, 64>{});
    if (dpad == 128) return f(tag, std::integral_constant<int, 128>{});
    return f(tag, std::integral_constant<int, 256>{});
  };
  if (dt == DType::bf16) return with_dim(__nv_bfloat16{});
  return with_dim(__half{});
}

}  // namespace

void launch_fwd_sm80(DType dt, int dpad, const FwdParams& p, cudaStream_t stream) {
  by_type_and_dim(dt, dpad, [&](auto t, auto d) { launch_flash_fwd<decltype(t), decltype(d)::value>(p, stream); });
}

bool launch_fwd_sm90(DType dt, int dpad, int config, const FwdParams& p, cudaStream_t stream) {
  if (dpad != 64 && dpad != 128) return false;
  return by_type_and_dim(dt, dpad, [&](auto t, auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (D == 256) return false;
    else return launch_flash_fwd_sm90<decltype(t), D>(p, config, stream);
  });
}

bool launch_fwd_sm90_ws(DType dt, int dpad, int bn, bool pingpong, const FwdParams& p, cudaStream_t stream) {
  return by_type_and_dim(dt, dpad, [&](auto t, auto d) {
    return launch_flash_fwd_sm90_ws<decltype(t), decltype(d)::value>(p, bn, pingpong, stream);
  });
}

void launch_decode(DType dt, int dpad, const FwdParams& p, cudaStream_t stream) {
  by_type_and_dim(dt, dpad, [&](auto t, auto d) { launch_flash_decode<decltype(t), decltype(d)::value>(p, stream); });
}

ClusterResidency decode_cluster_residency(DType dt, int dpad, bool narrow) {
  return by_type_and_dim(dt, dpad, [&](auto t, auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (D <= 128) {
      if (narrow) return decode_cluster_residency<decltype(t), D, DecodeCfg<D>::kNarrowWarps>();
    }
    return decode_cluster_residency<decltype(t), D>();
  });
}

void launch_bwd_sm80(DType dt, int dpad, const BwdParams& p, cudaStream_t stream) {
  by_type_and_dim(dt, dpad, [&](auto t, auto d) { launch_flash_bwd<decltype(t), decltype(d)::value>(p, stream); });
}

bool launch_bwd_sm90(DType dt, int dpad, int config, const BwdParams& p, cudaStream_t stream) {
  if (dpad == 256)  // its own kernel (flash_bwd_sm90_d256.cuh); config does not apply
    return dt == DType::bf16 ? launch_flash_bwd_sm90_d256<__nv_bfloat16>(p, stream)
                             : launch_flash_bwd_sm90_d256<__half>(p, stream);
  if (dpad != 64 && dpad != 128) return false;
  return by_type_and_dim(dt, dpad, [&](auto t, auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (D == 256) return false;
    else return launch_flash_bwd_sm90<decltype(t), D>(p, config, stream);
  });
}

bool launch_bwd_sm90_ws(DType dt, int dpad, const BwdParams& p, cudaStream_t stream) {
  if (dpad == 256)  // its own kernel (flash_bwd_sm90_ws_d256.cuh)
    return dt == DType::bf16 ? launch_flash_bwd_sm90_ws_d256<__nv_bfloat16>(p, stream)
                             : launch_flash_bwd_sm90_ws_d256<__half>(p, stream);
  if (dpad != 64 && dpad != 128) return false;
  return by_type_and_dim(dt, dpad, [&](auto t, auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (D == 256) return false;
    else return launch_flash_bwd_sm90_ws<decltype(t), D>(p, stream);
  });
}

}  // namespace flashkit::cuda
