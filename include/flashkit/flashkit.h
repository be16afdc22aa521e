/* flashkit C API: a plain C ABI over the C++ library. Every call returns an fk_status; on failure
 * fk_last_error() returns a message (thread-local) naming the argument at fault and what was expected. */
#ifndef FLASHKIT_H
#define FLASHKIT_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FK_API __declspec(dllexport)
#else
#define FK_API __attribute__((visibility("default")))
#endif

typedef enum {
  FK_OK = 0,
  FK_INVALID_ARGUMENT = 1,
  FK_UNSUPPORTED = 2,
  FK_OUT_OF_MEMORY = 3,
  FK_DEVICE_ERROR = 4,
  FK_INTERNAL = 5
} fk_status;

typedef enum { FK_F32 = 0, FK_BF16 = 1, FK_F16 = 2, FK_F64 = 3, FK_I32 = 4 } fk_dtype;
typedef enum { FK_CPU = 0, FK_CUDA = 1 } fk_device;
typedef enum { FK_IMPL_AUTO = 0, FK_IMPL_REFERENCE = 1, FK_IMPL_STANDARD = 2, FK_IMPL_FLASH = 3 } fk_impl;

typedef struct {
  void* data;
  int32_t dtype;        /* fk_dtype */
  int32_t device;       /* fk_device */
  int32_t device_index;
  int32_t ndim;
  int64_t shape[4];
  int64_t strides[4];   /* in elements */
} fk_tensor;

typedef struct {
  float scale;           /* 0: 1/sqrt(head_dim) */
  int32_t causal;
  int64_t window_left;   /* -1: unbounded */
  int64_t window_right;  /* -1: unbounded */
  float softcap;         /* 0: off */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int64_t num_seqs;
  int32_t impl;          /* fk_impl */
  int32_t check_finite;
} fk_attention_options;

typedef struct {
  double flops;
  double bytes_read;
  double bytes_written;
  double workspace_bytes;
  char model[256];
  char kernel[64];
} fk_cost;

FK_API const char* fk_version(void);
FK_API const char* fk_last_error(void);
FK_API const char* fk_status_name(fk_status s);
FK_API const char* fk_cpu_isa(void);
FK_API int32_t fk_num_threads(void);
FK_API fk_status fk_set_num_threads(int32_t n);
FK_API int32_t fk_cuda_device_count(void);
/* The CUDA stream (a cudaStream_t) this thread's flashkit launches use; NULL is the legacy default
 * stream. FK_UNSUPPORTED in a build without CUDA. */
FK_API fk_status fk_cuda_set_stream(void* stream);
FK_API void* fk_cuda_get_stream(void);

/* Fills defaults: scale 0, not causal, unbounded window, no softcap, impl auto, check_finite 1. */
FK_API fk_status fk_attention_options_init(fk_attention_options* opts);

/* Contiguous tensor description helper. */
FK_API fk_status fk_tensor_init(fk_tensor* t, void* data, int32_t dtype, int32_t device, int32_t ndim,
                                const int64_t* shape);

FK_API fk_status fk_attention_forward(const fk_tensor* q, const fk_tensor* k, const fk_tensor* v,
                                      const fk_tensor* o, const fk_tensor* lse, const fk_attention_options* opts,
                                      fk_cost* cost /* may be NULL */);

FK_API fk_status fk_attention_backward(const fk_tensor* dout, const fk_tensor* q, const fk_tensor* k,
                                       const fk_tensor* v, const fk_tensor* o, const fk_tensor* lse,
                                       const fk_tensor* dq, const fk_tensor* dk, const fk_tensor* dv,
                                       const fk_attention_options* opts, fk_cost* cost /* may be NULL */);

#ifdef __cplusplus
}
#endif
#endif /* FLASHKIT_H */
