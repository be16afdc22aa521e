// The fp8 forward on the CPU: dequantize one (batch, kv head) slice to f32, then per query row two passes over its
// visible keys (scores and max; then P rounded to e4m3 against the row max, P V). O(seqlen^2 d) like the standard
// path, without its materialized matrices; the point is one contract on every backend, not CPU speed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "flashkit/e4m3.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/attention_fp8_args.hpp"
#include "kernels/registry.hpp"

namespace flashkit::kernels {

namespace {

void dequantize_rows(const AttnOperand& t, int64_t b, int64_t r0, int64_t n, int64_t h, int64_t d, float descale,
                     float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = row_ptr<const uint8_t>(t, b, r0 + i, h);
    for (int64_t c = 0; c < d; ++c) out[i * d + c] = e4m3_to_f32(row[c]) * descale;
  }
}

}  // namespace

void attention_forward_fp8_cpu(const AttentionFp8Args& args) {
  const AttentionFwdArgs& a = args.fwd;
  const AttentionShape& s = a.shape;
  const int64_t d = s.head_dim, G = s.group();
  const float score_scale = a.scale * args.q_descale * args.k_descale;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(num_threads())
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const SeqRange r = seq_range(s, b);
      const size_t nd = static_cast<size_t>(d), nkd = static_cast<size_t>(r.nk * d);
      std::vector<float> q(nd), k(nkd), v(nkd), sc(static_cast<size_t>(r.nk)), o(nd);
      dequantize_rows(a.k, r.bslot, r.k0, r.nk, h / G, d, 1.0f, k.data());  // descales folded in below
      dequantize_rows(a.v, r.bslot, r.k0, r.nk, h / G, d, 1.0f, v.data());
      for (int64_t i = 0; i < r.nq; ++i) {
        dequantize_rows(a.q, r.bslot, r.q0 + i, 1, h, d, 1.0f, q.data());
        const int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
        float m = kNegInf;
        for (int64_t j = lo; j < hi; ++j) {
          float dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += q[size_t(c)] * k[size_t(j * d + c)];
          sc[size_t(j)] = score_scale * dot;
          m = std::max(m, sc[size_t(j)]);
        }
        std::fill(o.begin(), o.end(), 0.0f);
        float lse = kNegInf;
        if (hi > lo) {
          float l = 0;
          for (int64_t j = lo; j < hi; ++j) {
            const float p = std::exp(sc[size_t(j)] - m);
            l += p;
            const float pr = e4m3_to_f32(f32_to_e4m3(p));
            for (int64_t c = 0; c < d; ++c) o[size_t(c)] += pr * v[size_t(j * d + c)];
          }
          const float f = args.v_descale / l;
          for (int64_t c = 0; c < d; ++c) o[size_t(c)] *= f;
          lse = m + std::log(l);
        }
        uint16_t* orow = row_ptr<uint16_t>(a.o, r.bslot, r.q0 + i, h);
        for (int64_t c = 0; c < d; ++c) orow[c] = f32_to_bf16(o[size_t(c)]);
        a.lse[a.lse_index(r, h, i)] = lse;
      }
    }
}

OpCost attention_forward_fp8_cost(const AttentionFp8Args& args, const char* kernel) {
  const AttentionFwdArgs& a = args.fwd;
  const AttentionShape& s = a.shape;
  OpCost c;
  c.flops = 4.0 * attention_visible_pairs(s, a.mask) * double(s.head_dim);
  const double qo = double(s.batch) * double(s.seqlen_q) * double(s.heads) * double(s.head_dim);
  const double kv = double(s.batch) * double(s.seqlen_k) * double(s.kv_heads) * double(s.head_dim);
  c.bytes_read = qo + 2 * kv;  // e4m3: one byte per element
  c.bytes_written = 2 * qo + 4.0 * double(s.batch) * double(s.heads) * double(s.seqlen_q);
  c.model = "q, k, v (1 byte each) read once; o (bf16) and lse written once";
  c.kernel = kernel;
  return c;
}

}  // namespace flashkit::kernels
