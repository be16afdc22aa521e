// Programmatic dependent launch (sm_90): a grid launched with cudaLaunchAttributeProgrammaticStreamSerialization
// may start while the previous grid in the stream is still running once that grid has called pdl_trigger; it
// must call pdl_wait before touching anything the previous grid writes or reads. Both are no-ops before sm_90
// and for grids launched without the attribute.
#pragma once

namespace flashkit {
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
}  // namespace flashkit
