// The C ABI: converts fk_* structs to the C++ API, and every exception to a status + message.
#include <cstring>
#include <new>
#include <string>

#include "flashkit/flashkit.h"
#include "flashkit/flashkit.hpp"
#include "capi/guarded.hpp"

namespace {

thread_local std::string g_last_error;

using flashkit::capi_detail::guarded;

flashkit::TensorView to_view(const fk_tensor* t, const char* name) {
  if (t == nullptr) flashkit::fail(flashkit::Status::invalid_argument, std::string(name) + ": tensor descriptor is NULL");
  if (t->ndim < 0 || t->ndim > 4)
    flashkit::fail(flashkit::Status::invalid_argument, std::string(name) + ": ndim must be in [0, 4], got " + std::to_string(t->ndim));
  if (t->dtype < FK_F32 || t->dtype > FK_E4M3)
    flashkit::fail(flashkit::Status::invalid_argument, std::string(name) + ": unknown dtype code " + std::to_string(t->dtype));
  if (t->device != FK_CPU && t->device != FK_CUDA)
    flashkit::fail(flashkit::Status::invalid_argument, std::string(name) + ": unknown device code " + std::to_string(t->device));
  flashkit::TensorView v;
  v.data = t->data;
  v.dtype = static_cast<flashkit::DType>(t->dtype);
  v.device = static_cast<flashkit::Device>(t->device);
  v.device_index = t->device_index;
  v.ndim = t->ndim;
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = i < t->ndim ? t->shape[i] : 0;
    v.strides[i] = i < t->ndim ? t->strides[i] : 0;
  }
  return v;
}

flashkit::AttentionOptions to_options(const fk_attention_options* o) {
  flashkit::AttentionOptions r;
  if (o == nullptr) return r;
  if (o->impl < FK_IMPL_AUTO || o->impl > FK_IMPL_FLASH)
    flashkit::fail(flashkit::Status::invalid_argument, "impl: unknown implementation code " + std::to_string(o->impl));
  r.scale = o->scale;
  r.causal = o->causal != 0;
  r.window_left = o->window_left;
  r.window_right = o->window_right;
  r.softcap = o->softcap;
  r.cu_seqlens_q = o->cu_seqlens_q;
  r.cu_seqlens_k = o->cu_seqlens_k;
  r.num_seqs = o->num_seqs;
  r.impl = static_cast<flashkit::AttentionImpl>(o->impl);
  r.check_finite = o->check_finite != 0;
  return r;
}

void fill_cost(fk_cost* out, const flashkit::OpCost& c) {
  if (!out) return;
  out->flops = c.flops;
  out->bytes_read = c.bytes_read;
  out->bytes_written = c.bytes_written;
  out->workspace_bytes = c.workspace_bytes;
  std::strncpy(out->model, c.model.c_str(), sizeof(out->model) - 1);
  out->model[sizeof(out->model) - 1] = 0;
  std::strncpy(out->kernel, c.kernel.c_str(), sizeof(out->kernel) - 1);
  out->kernel[sizeof(out->kernel) - 1] = 0;
}

}  // namespace

extern "C" {

const char* fk_version(void) { return flashkit::version(); }
const char* fk_last_error(void) { return g_last_error.c_str(); }
const char* fk_status_name(fk_status s) { return flashkit::status_name(static_cast<flashkit::Status>(s)); }
const char* fk_cpu_isa(void) {
  static const std::string isa = flashkit::cpu_isa();
  return isa.c_str();
}
void fk_tuning_from_env(void) {
  guarded([] { flashkit::set_default_tuning(flashkit::tuning_from_env()); });
}
int32_t fk_num_threads(void) { return flashkit::num_threads(); }
fk_status fk_set_num_threads(int32_t n) {
  return guarded([&] { flashkit::set_num_threads(n); });
}
int32_t fk_max_threads(void) { return flashkit::max_threads(); }
int32_t fk_cuda_device_count(void) { return flashkit::cuda_device_count(); }
fk_status fk_cuda_set_stream(void* stream) {
  return guarded([&] { flashkit::set_cuda_stream(stream); });
}
void* fk_cuda_get_stream(void) { return flashkit::cuda_stream(); }

fk_status fk_attention_options_init(fk_attention_options* opts) {
  return guarded([&] {
    if (!opts) flashkit::fail(flashkit::Status::invalid_argument, "opts: pointer is NULL");
    std::memset(opts, 0, sizeof(*opts));
    opts->window_left = -1;
    opts->window_right = -1;
    opts->impl = FK_IMPL_AUTO;
    opts->check_finite = 1;
  });
}

fk_status fk_tensor_init(fk_tensor* t, void* data, int32_t dtype, int32_t device, int32_t ndim, const int64_t* shape) {
  return guarded([&] {
    if (!t) flashkit::fail(flashkit::Status::invalid_argument, "t: pointer is NULL");
    if (ndim < 0 || ndim > 4) flashkit::fail(flashkit::Status::invalid_argument, "ndim: must be in [0, 4], got " + std::to_string(ndim));
    if (ndim > 0 && !shape) flashkit::fail(flashkit::Status::invalid_argument, "shape: pointer is NULL");
    std::memset(t, 0, sizeof(*t));
    t->data = data;
    t->dtype = dtype;
    t->device = device;
    t->ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      t->shape[d] = shape[d];
      t->strides[d] = stride;
      stride *= shape[d];
    }
  });
}

fk_status fk_attention_forward(const fk_tensor* q, const fk_tensor* k, const fk_tensor* v, const fk_tensor* o,
                               const fk_tensor* lse, const fk_attention_options* opts, fk_cost* cost) {
  return guarded([&] {
    flashkit::OpCost c;
    flashkit::attention_forward(to_view(q, "q"), to_view(k, "k"), to_view(v, "v"), to_view(o, "o"), to_view(lse, "lse"),
                                to_options(opts), &c);
    fill_cost(cost, c);
  });
}

fk_status fk_attention_forward_fp8(const fk_tensor* q, const fk_tensor* k, const fk_tensor* v, const fk_tensor* o,
                                   const fk_tensor* lse, const fk_fp8_scales* scales, const fk_attention_options* opts,
                                   fk_cost* cost) {
  return guarded([&] {
    if (scales == nullptr) flashkit::fail(flashkit::Status::invalid_argument, "scales: fk_fp8_scales pointer is NULL");
    flashkit::OpCost c;
    flashkit::attention_forward_fp8(to_view(q, "q"), to_view(k, "k"), to_view(v, "v"), to_view(o, "o"),
                                    to_view(lse, "lse"), {scales->q_descale, scales->k_descale, scales->v_descale},
                                    to_options(opts), &c);
    fill_cost(cost, c);
  });
}

fk_status fk_quantize_e4m3(const fk_tensor* src, const fk_tensor* dst, float* descale) {
  return guarded([&] { flashkit::quantize_e4m3(to_view(src, "src"), to_view(dst, "dst"), descale); });
}

fk_status fk_attention_backward(const fk_tensor* dout, const fk_tensor* q, const fk_tensor* k, const fk_tensor* v,
                                const fk_tensor* o, const fk_tensor* lse, const fk_tensor* dq, const fk_tensor* dk,
                                const fk_tensor* dv, const fk_attention_options* opts, fk_cost* cost) {
  return guarded([&] {
    flashkit::OpCost c;
    flashkit::attention_backward(to_view(dout, "dout"), to_view(q, "q"), to_view(k, "k"), to_view(v, "v"),
                                 to_view(o, "o"), to_view(lse, "lse"), to_view(dq, "dq"), to_view(dk, "dk"),
                                 to_view(dv, "dv"), to_options(opts), &c);
    fill_cost(cost, c);
  });
}

}  // extern "C"

// The one thread-local last-error message, shared with the C API's other translation units (engine_c.cpp).
namespace flashkit::capi_detail {
void set_last_error(const std::string& msg) { g_last_error = msg; }
}  // namespace flashkit::capi_detail
