// Hardware table (datasheet figures) and the roofline model: attainable = min(peak, intensity x bandwidth).
#pragma once
#include <string>
#include <vector>

namespace flashkit::analysis {

// Dense (non-sparse) peak rates in TFLOP/s; 0 means the device has no such unit/format.
struct DeviceSpec {
  std::string name;        // short key used on the command line ("h200")
  std::string full_name;   // "NVIDIA H200 SXM 141GB"
  double fp32_tflops = 0;  // CUDA-core (non-tensor) f32
  double tf32_tflops = 0;  // tensor core, dense
  double bf16_tflops = 0;  // tensor core, dense, f32 accumulate
  double fp16_tflops = 0;  // tensor core, dense
  double fp8_tflops = 0;   // tensor core, dense
  double mem_bw_gbs = 0;   // main memory (HBM / GDDR / DRAM) bandwidth, GB/s (1e9)
  double mem_gb = 0;       // memory capacity, GB
  double l2_mb = 0;        // last-level on-chip cache, MB
  double smem_per_sm_kb = 0;  // max shared memory per SM (CPU: L2 per core)
  int sms = 0;             // SMs (CPU: cores)
  std::string source;      // where the figures come from
  double link_gbs = 0;     // GPU-to-GPU link (NVLink), GB/s per direction (0: none in the table: PCIe only)
};

// The datasheet table. Does not include the local CPU (see local_cpu_spec in roofline.hpp).
const std::vector<DeviceSpec>& device_table();
// Finds a device by short name (case-insensitive; "cpu" gives the local CPU, measured briefly).
// Throws flashkit::Error(invalid_argument) listing the valid names.
DeviceSpec find_device(const std::string& name);
std::string device_names();  // "t4, l4, ..., cpu"
// The table entry for a CUDA device name ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", ...); false if none matches.
bool match_device(const std::string& cuda_name, DeviceSpec* out);

// Peak for a compute dtype name: "f32", "tf32", "bf16", "f16", "fp8". Falls back to the next wider
// format the device has (e.g. bf16 on a T4 -> f16; on a CPU -> f32), and says so in *used if given.
double peak_tflops(const DeviceSpec& d, const std::string& dtype, std::string* used = nullptr);

enum class Bound { memory, compute };
inline const char* bound_name(Bound b) { return b == Bound::memory ? "memory" : "compute"; }

struct Roof {
  double peak_flops = 0;  // FLOP/s
  double bw_bytes = 0;    // bytes/s
  double ridge() const { return peak_flops / bw_bytes; }  // FLOP/byte where the roofs meet
  double attainable(double intensity) const;               // FLOP/s
  Bound bound(double intensity) const { return intensity < ridge() ? Bound::memory : Bound::compute; }
  // Time floors, seconds: roofline (max of the two) and the additive "teaching" form.
  double floor_max(double flops, double bytes) const;
  double floor_sum(double flops, double bytes) const;
};
Roof roof_of(const DeviceSpec& d, const std::string& dtype);

}  // namespace flashkit::analysis
