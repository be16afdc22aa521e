// Attention IO model: main-memory (HBM) reads and writes of standard attention vs FlashAttention, for one
// head, as functions of sequence length N, head dimension d and on-chip memory M (elements), after
// Dao et al. 2022 (FlashAttention, Algorithms 0-4 and Theorem 2), plus the per-element counts used in
// teaching, and the theoretical speedup (time = FLOPs/peak + bytes/bandwidth) on each device.
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

#include "hardware.hpp"

namespace flashkit::analysis {

struct AttnIo {
  double std_fwd = 0, flash_fwd = 0, std_bwd = 0, flash_bwd = 0;  // elements moved, one head
  double fwd_flops_std = 0, fwd_flops_flash = 0, bwd_flops_std = 0, bwd_flops_flash = 0;
  int64_t block_c = 0, block_r = 0;  // Bc = ceil(M / 4d), Br = min(Bc, d)
};

// Standard forward: Q,K read, S written (N^2), S read, P written, P and V read, O written: 4Nd + 4N^2.
// Flash forward (Algorithm 1): K, V once; Q, O, l, m once per KV block of Bc = ceil(M/4d) columns:
//   2Nd + ceil(N/Bc) (3Nd + 4N)   (one KV block: N(5d + 4)).
// Standard backward: 8Nd + 7N^2.  Flash backward (Algorithm 4): 4Nd + ceil(N/Bc) (5Nd + 2N).
AttnIo attention_io(double N, double d, double M_elems);

// The teaching counts, in floats: standard N(4d + 4N), flash N(5d + 4).
inline double teaching_standard_floats(double N, double d) { return N * (4 * d + 4 * N); }
inline double teaching_flash_floats(double N, double d) { return N * (5 * d + 4); }
// time = FLOPs/peak + bytes/bandwidth with FLOPs = 4 N^2 d (both), bytes = floats x elem_bytes.
double teaching_time(double flops, double floats, double elem_bytes, double peak_flops, double bw_bytes);

// Per-device table for (N, d, elem_bytes): M = shared memory per SM (bytes / elem_bytes), bytes and time
// of both, and the speedup, forward and backward, on the `dtype` roof.
// onchip_bytes > 0 overrides M for every device.
nlohmann::json attention_io_report(int64_t N, int64_t d, double elem_bytes, const std::string& dtype,
                                   double onchip_bytes = 0);

}  // namespace flashkit::analysis
