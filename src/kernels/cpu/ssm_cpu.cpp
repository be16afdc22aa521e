// Run-time choice of the CPU SSM kernels' instruction set (ssm_cpu.inc, one translation unit per set): the widest
// this CPU has within the Tuning's cap, as for the flash attention kernels.
#include "flashkit/runtime.hpp"
#include "kernels/ssm_args.hpp"

namespace flashkit::kernels {
namespace {

enum class Build { scalar, avx2, avx512 };

Build build_for(CpuIsaCap cap) {
  const std::string isa = cpu_isa(cap);
#ifdef FLASHKIT_HAVE_AVX512
  if (isa == "avx512") return Build::avx512;
#endif
  return isa == "avx512" || isa == "avx2" ? Build::avx2 : Build::scalar;  // no AVX-512 build: its AVX2 one
}

}  // namespace

void selective_scan_cpu(const ScanArgs& a, CpuIsaCap cap) {
  switch (build_for(cap)) {
#ifdef FLASHKIT_HAVE_AVX512
    case Build::avx512: return avx512::selective_scan(a);
#endif
    case Build::avx2: return avx2::selective_scan(a);
    default: return scalar::selective_scan(a);
  }
}

void causal_conv1d_cpu(const ConvArgs& a, CpuIsaCap cap) {
  switch (build_for(cap)) {
#ifdef FLASHKIT_HAVE_AVX512
    case Build::avx512: return avx512::causal_conv1d(a);
#endif
    case Build::avx2: return avx2::causal_conv1d(a);
    default: return scalar::causal_conv1d(a);
  }
}

}  // namespace flashkit::kernels
