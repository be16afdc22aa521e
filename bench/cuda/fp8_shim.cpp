// A ctypes shim for bench/cuda/bench_attention_fp8.py: the fp8 and bf16 forwards, quantize_e4m3 and the V^T prep kernel on
// torch-allocated device memory (the C API has no fp8 op yet). Built by tools/gpu/fp8.sh against the build's
// libflashkit_core.so; a benchmark helper, not part of the library.
#include <cstdint>
#include <string>

#include "flashkit/attention_fp8.hpp"
#include "flashkit/error.hpp"
#include "kernels/cuda/fp8/fp8_api.hpp"
#include "kernels/cuda/fp8/fp8_layout.hpp"

namespace {
thread_local std::string g_error;
thread_local std::string g_kernel;  // fkb_fp8_forward_rescale's last kernel

template <typename F>
int guarded(F f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return 1;
  }
}

flashkit::TensorView view(void* p, flashkit::DType dt, int64_t b, int64_t s, int64_t h, int64_t d) {
  return flashkit::TensorView::contiguous(p, dt, {b, s, h, d}, flashkit::Device::cuda);
}
}  // namespace

extern "C" {

const char* fkb_error() { return g_error.c_str(); }

// q/k/v e4m3 [B, S, H, D] contiguous, o bf16, lse f32 [B, H, Sq].
int fkb_fp8_forward(void* q, void* k, void* v, void* o, void* lse, int64_t B, int64_t Sq, int64_t Sk, int64_t H,
                    int64_t Hkv, int64_t D, float q_descale, float k_descale, float v_descale, int causal) {
  return guarded([&] {
    using flashkit::DType;
    flashkit::AttentionOptions opts;
    opts.causal = causal != 0;
    flashkit::attention_forward_fp8(view(q, DType::e4m3, B, Sq, H, D), view(k, DType::e4m3, B, Sk, Hkv, D),
                                    view(v, DType::e4m3, B, Sk, Hkv, D), view(o, DType::bf16, B, Sq, H, D),
                                    flashkit::TensorView::contiguous(lse, DType::f32, {B, H, Sq}, flashkit::Device::cuda),
                                    {q_descale, k_descale, v_descale}, opts);
  });
}

// The same with the O-rescale mode and the key tile chosen (Tuning::fp8_rescale: 0, 1, 2; Tuning::fp8_key_tile: 128,
// 192; -1 / 0 the automatic choices), so one process can time them side by side; fkb_fp8_kernel() names the
// kernel the last such call ran.
int fkb_fp8_forward_cfg(void* q, void* k, void* v, void* o, void* lse, int64_t B, int64_t Sq, int64_t Sk, int64_t H,
                        int64_t Hkv, int64_t D, float q_descale, float k_descale, float v_descale, int causal, int rescale,
                        int key_tile) {
  return guarded([&] {
    using flashkit::DType;
    flashkit::AttentionOptions opts;
    opts.causal = causal != 0;
    flashkit::Tuning t = flashkit::default_tuning();
    t.fp8_rescale = rescale;
    t.fp8_key_tile = key_tile;
    opts.tuning = t;
    flashkit::OpCost cost;
    flashkit::attention_forward_fp8(view(q, DType::e4m3, B, Sq, H, D), view(k, DType::e4m3, B, Sk, Hkv, D),
                                    view(v, DType::e4m3, B, Sk, Hkv, D), view(o, DType::bf16, B, Sq, H, D),
                                    flashkit::TensorView::contiguous(lse, DType::f32, {B, H, Sq}, flashkit::Device::cuda),
                                    {q_descale, k_descale, v_descale}, opts, &cost);
    g_kernel = cost.kernel;
  });
}
int fkb_fp8_forward_rescale(void* q, void* k, void* v, void* o, void* lse, int64_t B, int64_t Sq, int64_t Sk, int64_t H,
                            int64_t Hkv, int64_t D, float q_descale, float k_descale, float v_descale, int causal,
                            int rescale) {
  return fkb_fp8_forward_cfg(q, k, v, o, lse, B, Sq, Sk, H, Hkv, D, q_descale, k_descale, v_descale, causal, rescale, 0);
}
const char* fkb_fp8_kernel() { return g_kernel.c_str(); }


// flashkit's bf16 forward on the same layouts (so the benchmark needs only libflashkit_core.so).
int fkb_bf16_forward(void* q, void* k, void* v, void* o, void* lse, int64_t B, int64_t Sq, int64_t Sk, int64_t H,
                     int64_t Hkv, int64_t D, int causal) {
  return guarded([&] {
    using flashkit::DType;
    flashkit::AttentionOptions opts;
    opts.causal = causal != 0;
    flashkit::attention_forward(view(q, DType::bf16, B, Sq, H, D), view(k, DType::bf16, B, Sk, Hkv, D),
                                view(v, DType::bf16, B, Sk, Hkv, D), view(o, DType::bf16, B, Sq, H, D),
                                flashkit::TensorView::contiguous(lse, DType::f32, {B, H, Sq}, flashkit::Device::cuda),
                                opts);
  });
}

// src bf16 of n elements -> dst e4m3; *descale out.
int fkb_quantize_bf16(void* src, int64_t n, void* dst, float* descale) {
  return guarded([&] {
    using flashkit::DType;
    flashkit::quantize_e4m3(flashkit::TensorView::contiguous(src, DType::bf16, {n}, flashkit::Device::cuda),
                            flashkit::TensorView::contiguous(dst, DType::e4m3, {n}, flashkit::Device::cuda), descale);
  });
}

// Bytes of the V^T workspace, and the prep kernel alone (timed separately by the benchmark).
int64_t fkb_vt_bytes(int64_t B, int64_t Sk, int64_t Hkv, int64_t D) {
  return B * Hkv * D * flashkit::cuda::fp8_vt_keys(Sk, flashkit::cuda::kFp8KeyTile);
}
int fkb_vt_prep(void* v, int64_t B, int64_t Sk, int64_t Hkv, int64_t D, void* vt) {
  return guarded([&] {
    flashkit::kernels::AttnOperand op{v, Sk * Hkv * D, Hkv * D, D};
    flashkit::kernels::AttentionShape sh;
    sh.batch = B, sh.seqlen_q = Sk, sh.seqlen_k = Sk, sh.heads = Hkv, sh.kv_heads = Hkv, sh.head_dim = D;
    sh.max_seqlen_q = Sk, sh.max_seqlen_k = Sk;
    flashkit::cuda::launch_fp8_vt_prep(op, sh, flashkit::cuda::kFp8KeyTile, static_cast<uint8_t*>(vt), nullptr);
  });
}
}
