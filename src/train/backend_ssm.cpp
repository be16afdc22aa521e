// The default Mamba ops of a training backend: a backend without selective state-space kernels refuses them with
// a clear error (TrainModel checks supports_ssm() first, so these are a second line).
#include "flashkit/error.hpp"
#include "train/backend.hpp"

namespace flashkit::train {
namespace {
[[noreturn]] void no_ssm(const Backend& be) {
  fail(Status::unsupported, "train: the " + be.name() + " backend has no selective state-space (Mamba) ops yet");
}
}  // namespace

void Backend::conv1d_silu_fwd(const Mat&, const Mat&, const Mat&, const Mat&, int64_t) { no_ssm(*this); }
void Backend::conv1d_silu_bwd(const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&,
                              int64_t) {
  no_ssm(*this);
}
void Backend::selective_scan_fwd(const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&,
                                 const Mat&, const Mat&, int64_t) {
  no_ssm(*this);
}
void Backend::selective_scan_bwd(const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&,
                                 const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&,
                                 const Mat&, const Mat&, const Mat&, int64_t) {
  no_ssm(*this);
}

}  // namespace flashkit::train
