// Per-channel histogram of uint8 data on the CPU: each thread counts a slice of rows into private bins, then the
// private bins are summed (no atomics, exact).
#include <algorithm>
#include <cstring>
#include <vector>

#include "flashkit/runtime.hpp"
#include "kernels/cpu/cs149.hpp"

namespace flashkit::cs149::cpu {

void histogram(const HistogramArgs& a) {
  const int64_t C = a.channels, L = a.length;
  const int64_t counted = std::min<int64_t>(a.num_bins, 256);  // uint8 values never reach bins >= 256
  std::memset(a.out, 0, sizeof(int32_t) * size_t(C * a.num_bins));
  if (L == 0 || C == 0) return;
  const int threads = int(std::max<int64_t>(1, std::min<int64_t>(num_threads(), (L + 4095) / 4096)));
  // Counts as int64 per thread: a thread's slice may exceed 2^31 rows only in theory, the sum is checked below.
  std::vector<std::vector<int64_t>> partial(size_t(threads), std::vector<int64_t>(size_t(C * 256), 0));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    int64_t* bins = partial[size_t(t)].data();
    const int64_t begin = L * t / threads, end = L * (t + 1) / threads;
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* row = a.data + r * C;
      for (int64_t c = 0; c < C; ++c) ++bins[c * 256 + row[c]];
    }
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t b = 0; b < counted; ++b) {
      int64_t s = 0;
      for (int t = 0; t < threads; ++t) s += partial[size_t(t)][size_t(c * 256 + b)];
      a.out[c * a.num_bins + b] = int32_t(s);  // length < 2^31 is validated, so s fits
    }
}

}  // namespace flashkit::cs149::cpu
