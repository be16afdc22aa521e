# CUDA sources of the flashkit library (one file per kernel instantiation so builds parallelize).
set(FLASHKIT_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_aux.cu
  ${CMAKE_CURRENT_LIST_DIR}/standard.cu
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
  endforeach()
endforeach()
