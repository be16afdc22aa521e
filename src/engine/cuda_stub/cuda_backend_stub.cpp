// CPU-only builds: the CUDA engine backend is absent; asking for it is a clear, recoverable error.
#include "engine/backend.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  fail(Status::unsupported,
       "device cuda: this build has no CUDA backend (reconfigure with -DFLASHKIT_CUDA=ON on a machine with the CUDA "
       "toolkit), use --device cpu");
}

}  // namespace flashkit::engine
