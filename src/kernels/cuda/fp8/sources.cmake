# CUDA kernels of the fp8 (e4m3) attention forward (include/flashkit/attention_fp8.hpp): the V^T prep and quantizer
# kernels and one sm_90a kernel instantiation per head dim, O-rescale mode (RESCALE 0/1/2) and key tile (d128 r1: 192); trapping stubs for
# other architectures. CUDA builds only; their dispatch is ops/attention_fp8_cuda.cpp (CPU builds:
# ops/attention_fp8_cuda_stub.cpp).
set(FLASHKIT_FP8_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/prep.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_fp8_sm90_d128.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_fp8_sm90_d128_r1.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_fp8_sm90_d128_r2.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_fp8_sm90_d128_r1_bn192.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_fp8_sm90_d256.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_fp8_sm90_d256_r1.cu
)
