# CUDA sources of the flashkit library (one file per kernel instantiation so builds parallelize).
set(FLASHKIT_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime.cu
)
