// The fp8 forward's f64 oracle: attention of the dequantized e4m3 inputs, with P rounded to e4m3 before P V against
// the row max or the running max of key tiles, eager or lazy (the contract of include/flashkit/attention_fp8.hpp and
// the CUDA kernel's RESCALE = 2), or not rounded.
// Plain loops, parallel over heads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/attention_fp8_args.hpp"

namespace flashkit::kernels {

namespace {

std::vector<double> dequantize_rows(const AttnOperand& t, int64_t b, int64_t r0, int64_t n, int64_t h, int64_t d,
                                    double descale) {
  std::vector<double> out(size_t(n * d));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = row_ptr<const uint8_t>(t, b, r0 + i, h);
    for (int64_t c = 0; c < d; ++c) out[size_t(i * d + c)] = double(e4m3_to_f32(row[c])) * descale;
  }
  return out;
}

}  // namespace

void attention_forward_fp8_reference(const AttentionFp8Args& args, Fp8PRounding rounding) {
  const AttentionFwdArgs& a = args.fwd;
  const AttentionShape& s = a.shape;
  const int64_t d = s.head_dim, G = s.group();
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const double kLog2e = 1.0 / std::log(2.0);
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(num_threads())
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const SeqRange r = seq_range(s, b);
      const std::vector<double> q = dequantize_rows(a.q, r.bslot, r.q0, r.nq, h, d, args.q_descale);
      const std::vector<double> k = dequantize_rows(a.k, r.bslot, r.k0, r.nk, h / G, d, args.k_descale);
      const std::vector<double> v = dequantize_rows(a.v, r.bslot, r.k0, r.nk, h / G, d, args.v_descale);
      std::vector<double> sc(static_cast<size_t>(r.nk)), o(static_cast<size_t>(d));
      for (int64_t i = 0; i < r.nq; ++i) {
        const int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
        double m = kNegInf;
        for (int64_t j = lo; j < hi; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += q[size_t(i * d + c)] * k[size_t(j * d + c)];
          sc[size_t(j)] = a.scale * dot;
          m = std::max(m, sc[size_t(j)]);
        }
        std::fill(o.begin(), o.end(), 0.0);
        double lse = kNegInf;
        if (hi > lo) {
          double l = 0;
          double mt = kNegInf;  // tile_max: the running max up to the end of key j's tile
          int64_t tile_end = lo;
          for (int64_t j = lo; j < hi; ++j) {
            const double p = std::exp(sc[size_t(j)] - m);
            l += p;
            double pv = p;
            if (rounding == Fp8PRounding::row_max) pv = double(e4m3_to_f32(f32_to_e4m3(float(p))));
            if (rounding == Fp8PRounding::tile_max || rounding == Fp8PRounding::tile_max_lazy) {
              if (j >= tile_end) {  // a new tile: its max moves the running max (eagerly, or lazily past lazy_tau)
                tile_end = std::min(hi, (j / args.p_tile + 1) * args.p_tile);
                double tmax = kNegInf;
                for (int64_t jj = j; jj < tile_end; ++jj) tmax = std::max(tmax, sc[size_t(jj)]);
                if (rounding == Fp8PRounding::tile_max) mt = std::max(mt, tmax);
                else if (mt == kNegInf || (tmax - mt) * kLog2e > args.lazy_tau) mt = tmax;  // the kernel: log2 units
              }
              // e4m3(exp(s - mt)) scaled back to the row max, as the kernel's rescaling of O does.
              pv = double(e4m3_to_f32(f32_to_e4m3(float(std::exp(sc[size_t(j)] - mt))))) * std::exp(mt - m);
            }
            for (int64_t c = 0; c < d; ++c) o[size_t(c)] += pv * v[size_t(j * d + c)];
          }
          for (int64_t c = 0; c < d; ++c) o[size_t(c)] /= l;
          lse = m + std::log(l);
        }
        uint16_t* orow = row_ptr<uint16_t>(a.o, r.bslot, r.q0 + i, h);
        for (int64_t c = 0; c < d; ++c) orow[c] = f32_to_bf16(float(o[size_t(c)]));
        a.lse[a.lse_index(r, h, i)] = float(lse);
      }
    }
}

}  // namespace flashkit::kernels
