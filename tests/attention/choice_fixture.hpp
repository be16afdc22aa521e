// What the kernel-choice tests (test_cuda_choice.cpp, test_ws_dense_choice.cpp) share: the devices they choose for
// and the shapes and masks they ask about. Host-only: the choice functions are pure.
#pragma once
#include <cstdint>

#include "ops/attention_choice.hpp"

namespace choice_fixture {

inline flashkit::DeviceInfo h200() {
  flashkit::DeviceInfo d;
  d.sms = 132, d.smem_per_block_optin = 232448, d.smem_per_sm = 233472, d.cc_major = 9, d.cc_minor = 0;
  d.sm90a = true;
  return d;
}
inline flashkit::DeviceInfo a100() {
  flashkit::DeviceInfo d;
  d.sms = 108, d.smem_per_block_optin = 166912, d.smem_per_sm = 167936, d.cc_major = 8, d.cc_minor = 0;
  return d;
}
inline flashkit::kernels::AttentionShape shape(int64_t b, int64_t h, int64_t hkv, int64_t d, int64_t sq, int64_t sk) {
  flashkit::kernels::AttentionShape s;
  s.batch = b, s.heads = h, s.kv_heads = hkv, s.head_dim = d;
  s.seqlen_q = s.max_seqlen_q = sq;
  s.seqlen_k = s.max_seqlen_k = sk;
  return s;
}
inline flashkit::kernels::AttentionMask causal_mask() {
  flashkit::kernels::AttentionMask m;
  m.causal = true;
  m.window_right = 0;
  return m;
}

}  // namespace choice_fixture
