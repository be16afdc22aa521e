# CUDA sources of the flashkit library (one file per kernel instantiation so builds parallelize).
# The decode family (decode/): plan.cpp is pure and built in every configuration (src/CMakeLists.txt); the
# library's kernel is instantiated with the forward (flash_fwd_*.cu), its combine and the engine's fused-prologue
# kernel are here.
set(FLASHKIT_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/launch_table.cpp
  ${CMAKE_CURRENT_LIST_DIR}/flash_aux.cu
  ${CMAKE_CURRENT_LIST_DIR}/standard.cu
  ${CMAKE_CURRENT_LIST_DIR}/decode/combine.cu
  ${CMAKE_CURRENT_LIST_DIR}/decode/fused_prologue.cu
  ${CMAKE_CURRENT_LIST_DIR}/decode/paged.cu
  ${CMAKE_CURRENT_LIST_DIR}/ssm/scan.cu
  ${CMAKE_CURRENT_LIST_DIR}/ssm/scan_v3.cu
  ${CMAKE_CURRENT_LIST_DIR}/ssm/scan_v4.cu
  ${CMAKE_CURRENT_LIST_DIR}/ssm/scan_v4_pipe.cu
  ${CMAKE_CURRENT_LIST_DIR}/ssm/scan_backward.cu
  ${CMAKE_CURRENT_LIST_DIR}/ssm/scan_backward_v2.cu
)
foreach(kind fwd bwd)
  foreach(dt bf16 f16)
    foreach(d 64 128 256)
      list(APPEND FLASHKIT_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/flash_${kind}_${dt}_d${d}.cu)
    endforeach()
  endforeach()
endforeach()
# Hopper (sm_90a) kernels: wgmma; compiled to trapping stubs for the other architectures.
foreach(dt bf16 f16)
  foreach(d 64 128)
    list(APPEND FLASHKIT_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_sm90_${dt}_d${d}.cu)
    list(APPEND FLASHKIT_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/flash_bwd_sm90_${dt}_d${d}.cu)
    list(APPEND FLASHKIT_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/flash_bwd_sm90_ws_${dt}_d${d}.cu)
  endforeach()
  # d256: the warp-specialized forward only (the cp.async forward's tiles do not fit its registers); the
  # backward's own kernels (flash_bwd_sm90_d256.cuh: P and dS through shared memory; flash_bwd_sm90_ws_d256.cuh:
  # the same math warp-specialized, v24).
  list(APPEND FLASHKIT_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/flash_fwd_sm90_ws_${dt}_d256.cu)
  list(APPEND FLASHKIT_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/flash_bwd_sm90_${dt}_d256.cu)
  list(APPEND FLASHKIT_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/flash_bwd_sm90_ws_${dt}_d256.cu)
endforeach()
# The CS149 kernels (include/flashkit/cs149.hpp), one file per kernel; RK4 rounds like its PyTorch reference.
list(APPEND FLASHKIT_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cs149/histogram.cu
  ${CMAKE_CURRENT_LIST_DIR}/cs149/swiglu.cu
  ${CMAKE_CURRENT_LIST_DIR}/cs149/rk4.cu
  ${CMAKE_CURRENT_LIST_DIR}/cs149/layernorm_head.cu
  ${CMAKE_CURRENT_LIST_DIR}/cs149/query_embed.cu
)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cs149/rk4.cu PROPERTIES COMPILE_OPTIONS "-fmad=false")
