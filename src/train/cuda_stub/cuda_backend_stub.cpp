// make_cuda_backend until the CUDA training backend exists (and in CPU builds): a clear "unsupported".
#include "flashkit/error.hpp"
#include "train/backend.hpp"

namespace flashkit::train {

std::unique_ptr<Backend> make_cuda_backend(int /*device_index*/) {
  fail(Status::unsupported,
       "device cuda: this build has no CUDA training backend yet (train with \"device\": \"cpu\"; the CUDA kernels "
       "live in src/train/cuda/)");
}

}  // namespace flashkit::train
