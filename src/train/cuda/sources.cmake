# CUDA training kernels (src/train/cuda, one .cu per op). Used by tests/train/cuda/CMakeLists.txt for the standalone
# kernel tests and benchmark. In libflashkit they come from src/train/CMakeLists.txt (wip/train), which globs
# cuda/*.cu into flashkit_train in CUDA builds: add them to the library in one place only.
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
