// The C ABI of the CS149 ops (include/flashkit/cs149.h): arguments to the C++ structs, exceptions to statuses.
#include "flashkit/cs149.h"

#include <new>
#include <string>

#include "flashkit/cs149.hpp"
#include "flashkit/error.hpp"
#include "capi/guarded.hpp"


namespace {

using flashkit::capi_detail::guarded;
using flashkit::capi_detail::set_last_error;


flashkit::Device to_device(int32_t device, const char* op) {
  if (device != FK_CPU && device != FK_CUDA)
    flashkit::fail(flashkit::Status::invalid_argument,
                   std::string("cs149::") + op + ": device must be FK_CPU (0) or FK_CUDA (1), got " +
                       std::to_string(device));
  return static_cast<flashkit::Device>(device);
}

}  // namespace

extern "C" {

fk_status fk_cs149_histogram(const uint8_t* data, int64_t length, int64_t channels, int64_t num_bins, int32_t* out,
                             int32_t device) {
  return guarded([&] {
    flashkit::cs149::HistogramArgs a;
    a.data = data; a.length = length; a.channels = channels; a.num_bins = num_bins; a.out = out;
    a.device = to_device(device, "histogram");
    flashkit::cs149::histogram(a);
  });
}

fk_status fk_cs149_swiglu(const float* x, const float* w, const float* v, const float* b, const float* c, float beta,
                          int64_t m, int64_t k, int64_t n, float* out, int32_t device, int32_t kernel) {
  return guarded([&] {
    flashkit::cs149::SwigluArgs a;
    a.x = x; a.w = w; a.v = v; a.b = b; a.c = c; a.beta = beta; a.m = m; a.k = k; a.n = n; a.out = out;
    a.kernel = static_cast<flashkit::cs149::SwigluKernel>(kernel);
    a.device = to_device(device, "swiglu");
    flashkit::cs149::swiglu(a);
  });
}

fk_status fk_cs149_rk4(const float* u0, int64_t nz, int64_t ny, int64_t nx, float alpha, float hx, float hy, float hz,
                       int64_t n_steps, float* out, int32_t device, int32_t kernel) {
  return guarded([&] {
    flashkit::cs149::Rk4Args a;
    a.u0 = u0; a.nz = nz; a.ny = ny; a.nx = nx; a.alpha = alpha; a.hx = hx; a.hy = hy; a.hz = hz;
    a.n_steps = n_steps; a.out = out; a.kernel = static_cast<flashkit::cs149::Rk4Kernel>(kernel);
    a.device = to_device(device, "rk4");
    flashkit::cs149::rk4(a);
  });
}

fk_status fk_cs149_layernorm_head(const void* x, const void* w, const void* bias, float eps, int64_t rows,
                                  int64_t width, int32_t dtype, void* out, int32_t device) {
  return guarded([&] {
    if (dtype != FK_F32 && dtype != FK_F16)
      flashkit::fail(flashkit::Status::invalid_argument,
                     "cs149::layernorm_head: dtype must be FK_F32 (0) or FK_F16 (2), got " + std::to_string(dtype));
    flashkit::cs149::LayerNormHeadArgs a;
    a.x = x; a.w = w; a.bias = bias; a.eps = eps; a.rows = rows; a.width = width; a.out = out;
    a.dtype = static_cast<flashkit::DType>(dtype);
    a.device = to_device(device, "layernorm_head");
    flashkit::cs149::layernorm_head(a);
  });
}

fk_status fk_cs149_query_embed(const void* q, const void* w, const void* b, int64_t rows, int64_t in_dim,
                               int64_t width, int32_t dtype, void* h, int32_t device) {
  return guarded([&] {
    if (dtype != FK_F32 && dtype != FK_F16)
      flashkit::fail(flashkit::Status::invalid_argument,
                     "cs149::query_embed: dtype must be FK_F32 (0) or FK_F16 (2), got " + std::to_string(dtype));
    flashkit::cs149::QueryEmbedArgs a;
    a.q = q; a.w = w; a.b = b; a.rows = rows; a.in_dim = in_dim; a.width = width; a.h = h;
    a.dtype = static_cast<flashkit::DType>(dtype);
    a.device = to_device(device, "query_embed");
    flashkit::cs149::query_embed(a);
  });
}

}  // extern "C"
