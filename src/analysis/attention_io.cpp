#include "attention_io.hpp"

#include <algorithm>
#include <cmath>

#include "flashkit/error.hpp"

namespace flashkit::analysis {

AttnIo attention_io(double N, double d, double M) {
  if (N <= 0 || d <= 0 || M <= 0) fail(Status::invalid_argument, "attention_io: N, d and M must be positive");
  AttnIo r;
  r.block_c = std::max<int64_t>(1, int64_t(std::ceil(M / (4 * d))));
  r.block_r = std::min<int64_t>(r.block_c, int64_t(d));
  const double tc = std::ceil(N / double(r.block_c));
  r.std_fwd = 4 * N * d + 4 * N * N;
  r.flash_fwd = 2 * N * d + tc * (3 * N * d + 4 * N);
  r.std_bwd = 8 * N * d + 7 * N * N;
  r.flash_bwd = 4 * N * d + tc * (5 * N * d + 2 * N);
  r.fwd_flops_std = r.fwd_flops_flash = 4 * N * N * d;
  r.bwd_flops_std = 8 * N * N * d;    // dV, dP, dQ, dK
  r.bwd_flops_flash = 10 * N * N * d; // + recomputing S
  return r;
}

double teaching_time(double flops, double floats, double e, double peak, double bw) {
  return flops / peak + floats * e / bw;
}

nlohmann::json attention_io_report(int64_t N, int64_t d, double e, const std::string& dtype, double onchip_bytes) {
  if (N <= 0 || d <= 0) fail(Status::invalid_argument, "attention: N and d must be positive");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& dev : device_table()) {
    std::string used;
    const double peak = peak_tflops(dev, dtype, &used) * 1e12, bw = dev.mem_bw_gbs * 1e9;
    const double M = (onchip_bytes > 0 ? onchip_bytes : dev.smem_per_sm_kb * 1024) / e;
    const AttnIo io = attention_io(double(N), double(d), M);
    const double ts = teaching_time(io.fwd_flops_std, io.std_fwd, e, peak, bw);
    const double tf = teaching_time(io.fwd_flops_flash, io.flash_fwd, e, peak, bw);
    const double tsb = teaching_time(io.bwd_flops_std, io.std_bwd, e, peak, bw);
    const double tfb = teaching_time(io.bwd_flops_flash, io.flash_bwd, e, peak, bw);
    const double tts = teaching_time(4.0 * N * N * d, teaching_standard_floats(N, d), e, peak, bw);
    const double ttf = teaching_time(4.0 * N * N * d, teaching_flash_floats(N, d), e, peak, bw);
    rows.push_back({{"device", dev.name}, {"peak_tflops", peak / 1e12}, {"peak_dtype", used},
                    {"bw_gbs", dev.mem_bw_gbs}, {"M_elems", M}, {"Bc", io.block_c}, {"Br", io.block_r},
                    {"std_fwd_bytes", io.std_fwd * e}, {"flash_fwd_bytes", io.flash_fwd * e},
                    {"std_bwd_bytes", io.std_bwd * e}, {"flash_bwd_bytes", io.flash_bwd * e},
                    {"fwd_flops", io.fwd_flops_std}, {"std_fwd_s", ts}, {"flash_fwd_s", tf},
                    {"fwd_speedup", ts / tf}, {"std_bwd_s", tsb}, {"flash_bwd_s", tfb}, {"bwd_speedup", tsb / tfb},
                    {"teaching_std_s", tts}, {"teaching_flash_s", ttf}, {"teaching_speedup", tts / ttf}});
  }
  return {{"N", N}, {"d", d}, {"elem_bytes", e}, {"dtype", dtype},
          {"teaching_std_floats", teaching_standard_floats(double(N), double(d))},
          {"teaching_flash_floats", teaching_flash_floats(double(N), double(d))},
          {"model", "one head; Dao et al. 2022 Alg. 0/1 (fwd) and 3/4 (bwd); M = shared memory per SM; "
                    "time = FLOPs/peak + bytes/bandwidth"},
          {"devices", rows}};
}

}  // namespace flashkit::analysis
