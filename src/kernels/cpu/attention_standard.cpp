// Standard attention on the CPU: the IO-unaware baseline. Like PyTorch's math path it materializes the
// full [batch, heads, seqlen_q, seqlen_k] score matrix in main memory (BLAS GEMM), runs softmax over it
// in place, and multiplies the probabilities by V with a second GEMM. The backward materializes P, dP
// and dS the same way. Its workspace is Θ(batch·heads·N²), which is exactly what the cost model reports.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "flashkit/runtime.hpp"
#include "kernels/cpu/f32_operand.hpp"
#include "kernels/reference/attention_row.hpp"
#include "kernels/registry.hpp"

namespace flashkit::kernels {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Offsets of each (sequence, head) score matrix inside one workspace buffer.
struct ScoreLayout {
  std::vector<int64_t> offset;  // per sequence; head h adds h * nq * nk
  int64_t total = 0;
  ScoreLayout(const AttentionShape& s) : offset(size_t(s.batch)) {
    for (int64_t b = 0; b < s.batch; ++b) {
      SeqRange r = seq_range(s, b);
      offset[size_t(b)] = total;
      total += r.nq * r.nk * s.heads;
    }
  }
};

// Applies softcap and the mask to one row of raw scores in place (masked entries become -inf).
inline void finish_scores(float* row, int64_t nk, int64_t lo, int64_t hi, float cap) {
  for (int64_t j = 0; j < lo; ++j) row[j] = kNegInf;
  if (cap > 0)
    for (int64_t j = lo; j < hi; ++j) row[j] = cap * std::tanh(row[j] / cap);
  for (int64_t j = hi; j < nk; ++j) row[j] = kNegInf;
}

void set_blas_threads() { openblas_set_num_threads(num_threads()); }

// Sum of x[0, n) in 8 independent partial sums (a serial float sum cannot be vectorized and would cost as much as
// the softmax it guards); only its finiteness matters (attention_row_suspect).
inline float sum_of(const float* x, int64_t n) {
  float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int u = 0; u < 8; ++u) p[u] += x[j + u];
  for (; j < n; ++j) p[0] += x[j];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

}  // namespace

void attention_forward_cpu_standard(const AttentionFwdArgs& a) {
  const AttentionShape& s = a.shape;
  const int64_t d = s.head_dim, G = s.group();
  set_blas_threads();
  F32Operand q(a.q, a.dtype, a.shape.varlen() ? 1 : s.batch, s.seqlen_q, s.heads, d);
  F32Operand k(a.k, a.dtype, a.shape.varlen() ? 1 : s.batch, s.seqlen_k, s.kv_heads, d);
  F32Operand v(a.v, a.dtype, a.shape.varlen() ? 1 : s.batch, s.seqlen_k, s.kv_heads, d);
  F32Operand o(a.o, a.dtype, a.shape.varlen() ? 1 : s.batch, s.seqlen_q, s.heads, d, /*load=*/false);
  ScoreLayout layout(s);
  std::vector<float> S(size_t(layout.total));
  // Per lse entry: the sum of the row's visible raw scores (non-finite when a score is; see attention_row.hpp).
  std::vector<float> score_sum(size_t((a.shape.varlen() ? 1 : s.batch) * s.heads * s.seqlen_q), 0.f);

  // 1) S = scale * Q K^T for every (sequence, head): written to main memory.
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
    if (r.nq == 0 || r.nk == 0) continue;
    for (int64_t h = 0; h < s.heads; ++h)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(r.nq), int(r.nk), int(d), a.scale,
                  q.row(r.bslot, r.q0, h), int(q.view.stride_s), k.row(r.bslot, r.k0, h / G), int(k.view.stride_s), 0.f,
                  S.data() + layout.offset[size_t(b)] + h * r.nq * r.nk, int(r.nk));
  }
  // 2) Softmax over each row, in place (read S, write P), and the log-sum-exp.
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
#pragma omp parallel for collapse(2) num_threads(num_threads())
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < r.nq; ++i) {
        float* row = S.data() + layout.offset[size_t(b)] + (h * r.nq + i) * r.nk;
        int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
        score_sum[size_t(a.lse_index(r, h, i))] = sum_of(row + lo, hi - lo);
        finish_scores(row, r.nk, lo, hi, a.softcap);
        float m = kNegInf;
        for (int64_t j = 0; j < r.nk; ++j) m = std::max(m, row[j]);
        if (m == kNegInf) {  // no visible key
          std::fill(row, row + r.nk, 0.f);
          a.lse[a.lse_index(r, h, i)] = kNegInf;
          continue;
        }
        float l = 0;
        for (int64_t j = 0; j < r.nk; ++j) l += (row[j] = std::exp(row[j] - m));
        const float inv = 1.f / l;
        for (int64_t j = 0; j < r.nk; ++j) row[j] *= inv;
        a.lse[a.lse_index(r, h, i)] = m + std::log(l);
      }
  }
  // 3) O = P V.
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
    if (r.nq == 0) continue;
    for (int64_t h = 0; h < s.heads; ++h) {
      if (r.nk == 0) {
        for (int64_t i = 0; i < r.nq; ++i) std::fill(o.row(r.bslot, r.q0 + i, h), o.row(r.bslot, r.q0 + i, h) + d, 0.f);
        continue;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(r.nq), int(d), int(r.nk), 1.f,
                  S.data() + layout.offset[size_t(b)] + h * r.nq * r.nk, int(r.nk), v.row(r.bslot, r.k0, h / G),
                  int(v.view.stride_s), 0.f, o.row(r.bslot, r.q0, h), int(o.view.stride_s));
    }
  }
  o.store_to(a.o, a.dtype, a.shape.varlen() ? 1 : s.batch, s.seqlen_q, s.heads, d);
  // 4) Rows whose f32 arithmetic met a non-finite value get the contract's answer (attention_row.hpp).
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
#pragma omp parallel for collapse(2) num_threads(num_threads())
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < r.nq; ++i) {
        // A row without visible keys only needs its zeros back (P V multiplied its zero probabilities by whatever
        // the masked v rows hold: 0 x NaN is NaN).
        const bool visible = a.mask.hi(i, r.nq, r.nk) > a.mask.lo(i, r.nq, r.nk);
        const int64_t li = a.lse_index(r, h, i);
        if (attention_row_suspect(visible ? score_sum[size_t(li)] : 0.f, visible ? a.lse[li] : 0.f,
                                  o.row(r.bslot, r.q0 + i, h), d))
          attention_fix_row(a, r, h, i);
      }
  }
}

void attention_backward_cpu_standard(const AttentionBwdArgs& g) {
  const AttentionFwdArgs& a = g.fwd;
  const AttentionShape& s = a.shape;
  const int64_t d = s.head_dim, G = s.group(), B = a.shape.varlen() ? 1 : s.batch;
  set_blas_threads();
  F32Operand q(a.q, a.dtype, B, s.seqlen_q, s.heads, d), k(a.k, a.dtype, B, s.seqlen_k, s.kv_heads, d),
      v(a.v, a.dtype, B, s.seqlen_k, s.kv_heads, d), o(a.o, a.dtype, B, s.seqlen_q, s.heads, d),
      dout(g.dout, a.dtype, B, s.seqlen_q, s.heads, d);
  F32Operand dq(g.dq, a.dtype, B, s.seqlen_q, s.heads, d, false);
  // dK/dV sum over the query heads of a GQA group: accumulate in f32 whatever the output dtype.
  std::vector<float> dk_acc(size_t(B * s.seqlen_k * s.kv_heads * d)), dv_acc(dk_acc.size());
  AttnOperand dk_view{dk_acc.data(), s.seqlen_k * s.kv_heads * d, s.kv_heads * d, d};
  AttnOperand dv_view{dv_acc.data(), s.seqlen_k * s.kv_heads * d, s.kv_heads * d, d};
  ScoreLayout layout(s);
  std::vector<float> P(size_t(layout.total)), dS(size_t(layout.total));

  // 1) S = scale Q K^T and dP = dO V^T, both materialized.
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
    if (r.nq == 0 || r.nk == 0) continue;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t off = layout.offset[size_t(b)] + h * r.nq * r.nk;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(r.nq), int(r.nk), int(d), a.scale, q.row(r.bslot, r.q0, h),
                  int(q.view.stride_s), k.row(r.bslot, r.k0, h / G), int(k.view.stride_s), 0.f, P.data() + off, int(r.nk));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(r.nq), int(r.nk), int(d), 1.f, dout.row(r.bslot, r.q0, h),
                  int(dout.view.stride_s), v.row(r.bslot, r.k0, h / G), int(v.view.stride_s), 0.f, dS.data() + off, int(r.nk));
    }
  }
  // 2) P = exp(S - lse); dS = P * (dP - D) * dsoftcap, with D_i = dO_i . O_i.
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
#pragma omp parallel for collapse(2) num_threads(num_threads())
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < r.nq; ++i) {
        const int64_t off = layout.offset[size_t(b)] + (h * r.nq + i) * r.nk;
        float* p = P.data() + off;
        float* ds = dS.data() + off;
        const float lse = a.lse[a.lse_index(r, h, i)];
        const int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
        const float* orow = o.row(r.bslot, r.q0 + i, h);
        const float* dorow = dout.row(r.bslot, r.q0 + i, h);
        float D = 0;
        for (int64_t c = 0; c < d; ++c) D += orow[c] * dorow[c];
        // A row with visible keys and a non-finite lse gets NaN probabilities (attention.hpp, "Non-finite input").
        const float lse_row = std::isfinite(lse) ? lse : std::numeric_limits<float>::quiet_NaN();
        for (int64_t j = 0; j < r.nk; ++j) {
          if (j < lo || j >= hi) {
            p[j] = 0.f;
            ds[j] = 0.f;
            continue;
          }
          float sc = p[j], dsdr = 1.f;
          if (a.softcap > 0) {
            const float t = std::tanh(sc / a.softcap);
            sc = a.softcap * t;
            dsdr = 1.f - t * t;
          }
          p[j] = std::exp(sc - lse_row);
          ds[j] = p[j] * (ds[j] - D) * dsdr;
        }
      }
  }
  // 3) dV = P^T dO, dQ = scale dS K, dK = scale dS^T Q.
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t hk = h / G;
      const float beta = (h % G == 0) ? 0.f : 1.f;
      if (r.nq == 0) continue;
      if (r.nk == 0) {
        for (int64_t i = 0; i < r.nq; ++i) std::fill(dq.row(r.bslot, r.q0 + i, h), dq.row(r.bslot, r.q0 + i, h) + d, 0.f);
        continue;
      }
      const int64_t off = layout.offset[size_t(b)] + h * r.nq * r.nk;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(r.nk), int(d), int(r.nq), 1.f, P.data() + off, int(r.nk),
                  dout.row(r.bslot, r.q0, h), int(dout.view.stride_s), beta, row_ptr<float>(dv_view, r.bslot, r.k0, hk),
                  int(dv_view.stride_s));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(r.nq), int(d), int(r.nk), a.scale, dS.data() + off,
                  int(r.nk), k.row(r.bslot, r.k0, hk), int(k.view.stride_s), 0.f, dq.row(r.bslot, r.q0, h),
                  int(dq.view.stride_s));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(r.nk), int(d), int(r.nq), a.scale, dS.data() + off,
                  int(r.nk), q.row(r.bslot, r.q0, h), int(q.view.stride_s), beta, row_ptr<float>(dk_view, r.bslot, r.k0, hk),
                  int(dk_view.stride_s));
    }
    // Sequences with no queries still own (zero) key gradients.
    if (r.nq == 0 || r.nk == 0)
      for (int64_t hk = 0; hk < s.kv_heads; ++hk)
        for (int64_t j = 0; j < r.nk; ++j) {
          std::fill(row_ptr<float>(dk_view, r.bslot, r.k0 + j, hk), row_ptr<float>(dk_view, r.bslot, r.k0 + j, hk) + d, 0.f);
          std::fill(row_ptr<float>(dv_view, r.bslot, r.k0 + j, hk), row_ptr<float>(dv_view, r.bslot, r.k0 + j, hk) + d, 0.f);
        }
  }
  dq.store_to(g.dq, a.dtype, B, s.seqlen_q, s.heads, d);
  // dk/dv: from the f32 accumulators to the caller's dtype and strides.
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < s.seqlen_k; ++j)
      for (int64_t hk = 0; hk < s.kv_heads; ++hk) {
        row_from_f32(row_ptr<float>(dk_view, b, j, hk), a.dtype,
                     static_cast<char*>(g.dk.data) + (b * g.dk.stride_b + j * g.dk.stride_s + hk * g.dk.stride_h) * dtype_size(a.dtype), d);
        row_from_f32(row_ptr<float>(dv_view, b, j, hk), a.dtype,
                     static_cast<char*>(g.dv.data) + (b * g.dv.stride_b + j * g.dv.stride_s + hk * g.dv.stride_h) * dtype_size(a.dtype), d);
      }
}

namespace {
// (sum of nq*nk, sum of nq, sum of nk) over the sequences: the sizes every standard-path term scales with.
std::tuple<double, double, double> score_counts(const AttentionShape& s) {
  double nn = 0, nq = 0, nk = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const SeqRange r = seq_range(s, b);
    nn += double(r.nq) * double(r.nk);
    nq += double(r.nq);
    nk += double(r.nk);
  }
  return {nn, nq, nk};
}
}  // namespace

OpCost attention_forward_cpu_standard_cost(const AttentionFwdArgs& a) {
  const AttentionShape& s = a.shape;
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim), H = double(s.heads);
  const auto [nn, nq, nk] = score_counts(s);
  OpCost c;
  c.flops = 4.0 * nn * d * H;
  // Per head: GEMM1 reads Q, K and writes S; softmax reads S, writes P; GEMM2 reads P, V and writes O.
  c.bytes_read = H * (e * d * (nq + 2 * nk) + 4.0 * 2 * nn);
  c.bytes_written = H * (4.0 * 2 * nn + e * d * nq + 4.0 * nq);
  c.workspace_bytes = 4.0 * nn * H + (a.dtype == DType::f32 ? 0.0 : 4.0 * d * (2 * nq * H + 2 * nk * s.kv_heads));
  c.model = "standard: S=QK^T written, read+P written by softmax, P read by PV (f32 scores), per head";
  c.kernel = "cpu.standard.openblas";
  return c;
}

OpCost attention_backward_cpu_standard_cost(const AttentionBwdArgs& g) {
  const AttentionFwdArgs& a = g.fwd;
  const AttentionShape& s = a.shape;
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim), H = double(s.heads);
  const auto [nn, nq, nk] = score_counts(s);
  OpCost c;
  c.flops = 10.0 * nn * d * H;  // S, dP, dV, dQ, dK GEMMs
  // Reads: Q,K,dO,V (GEMMs), S,dP (elementwise), P,dO / dS,K / dS,Q (GEMMs), O,dO (D). Writes: S, dP, P, dS, dQ, dK, dV.
  c.bytes_read = H * (e * d * (4 * nq + 4 * nk) + 4.0 * nn * 5);
  c.bytes_written = H * (4.0 * nn * 4 + e * d * nq) + e * d * 2 * nk * s.kv_heads;
  c.workspace_bytes = 8.0 * nn * H + 8.0 * d * nk * s.kv_heads +
                      (a.dtype == DType::f32 ? 0.0 : 4.0 * d * (4 * nq * H + 2 * nk * s.kv_heads));
  c.model = "standard bwd: S, P, dP, dS materialized as f32 N x N per head";
  c.kernel = "cpu.standard.openblas";
  return c;
}

}  // namespace flashkit::kernels
