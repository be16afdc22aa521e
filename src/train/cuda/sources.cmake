# CUDA training kernels (src/train/cuda, one .cu per op). Included by src/CMakeLists.txt into libflashkit and by
# tests/train/cuda/CMakeLists.txt into the standalone kernel tests and benchmark.
set(FLASHKIT_TRAIN_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/adamw.cu
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy.cu
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/embedding.cu
  ${CMAKE_CURRENT_LIST_DIR}/gated_act.cu
  ${CMAKE_CURRENT_LIST_DIR}/matmul.cu
  ${CMAKE_CURRENT_LIST_DIR}/reduce.cu
  ${CMAKE_CURRENT_LIST_DIR}/rmsnorm.cu
  ${CMAKE_CURRENT_LIST_DIR}/rope.cu
)
