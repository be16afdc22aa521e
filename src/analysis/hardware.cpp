#include "hardware.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "flashkit/error.hpp"
#include "roofline.hpp"

namespace flashkit::analysis {

// Dense tensor-core rates (the datasheets quote sparse 2:4 rates as well; those are halved here).
// "smem" is the maximum shared memory one SM can give a block (the on-chip size M of the IO model).
const std::vector<DeviceSpec>& device_table() {
  static const std::vector<DeviceSpec> t = {
      {"t4", "NVIDIA T4 16GB (Turing)", 8.1, 0, 0, 65, 0, 320, 16, 4, 64, 40,
       "NVIDIA T4 datasheet (8.1 TF f32, 65 TF f16 mixed); Turing tuning guide (64 KB smem/SM); no tf32/bf16/fp8"},
      {"l4", "NVIDIA L4 24GB (Ada)", 30.3, 60, 121, 121, 242.5, 300, 24, 48, 100, 58,
       "NVIDIA L4 datasheet (sparse 120/242/485 halved); Ada tuning guide (100 KB smem/SM)"},
      {"a10", "NVIDIA A10 24GB (Ampere GA102)", 31.2, 62.5, 125, 125, 0, 600, 24, 6, 100, 72,
       "NVIDIA A10 datasheet (sparse 125/250 halved); Ampere GA10x tuning guide (100 KB smem/SM)"},
      {"a100-40gb", "NVIDIA A100 SXM 40GB", 19.5, 156, 312, 312, 0, 1555, 40, 40, 164, 108,
       "NVIDIA A100 datasheet; A100 whitepaper (164 KB smem/SM, 40 MB L2); NVLink 3: 600 GB/s both ways", 300},
      {"a100-80gb", "NVIDIA A100 SXM 80GB", 19.5, 156, 312, 312, 0, 2039, 80, 40, 164, 108,
       "NVIDIA A100 datasheet (80GB SXM: 2039 GB/s); A100 whitepaper; NVLink 3: 600 GB/s both ways", 300},
      {"a6000", "NVIDIA RTX A6000 48GB (Ampere GA102)", 38.7, 77.4, 154.8, 154.8, 0, 768, 48, 6, 100, 84,
       "NVIDIA RTX A6000 datasheet (sparse 154.8/309.7 halved); GA10x tuning guide"},
      {"h100-sxm", "NVIDIA H100 SXM5 80GB", 67, 494.7, 989.4, 989.4, 1978.9, 3350, 80, 50, 228, 132,
       "NVIDIA H100 datasheet (sparse figures halved); Hopper tuning guide (228 KB smem/SM); NVLink 4: 900 GB/s "
       "both ways", 450},
      {"h100-pcie", "NVIDIA H100 PCIe 80GB", 51, 378, 756, 756, 1513, 2000, 80, 50, 228, 114,
       "NVIDIA H100 datasheet (PCIe column, sparse halved); Hopper tuning guide"},
      {"h200", "NVIDIA H200 SXM 141GB", 67, 494.7, 989.4, 989.4, 1978.9, 4800, 141, 50, 228, 132,
       "NVIDIA H200 datasheet (same GH100 compute as H100 SXM; 4.8 TB/s HBM3e); NVLink 4: 900 GB/s both ways", 450},
      {"b200", "NVIDIA B200 (HGX, 1000 W)", 80, 1100, 2250, 2250, 4500, 8000, 180, 126, 228, 148,
       "NVIDIA HGX B200 datasheet, per GPU (sparse halved); L2 and SM count as reported by CUDA "
       "deviceQuery in public logs (not on the datasheet; verify); NVLink 5: 1.8 TB/s both ways", 900},
  };
  return t;
}

namespace {
std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

std::string device_names() {
  std::string s;
  for (const auto& d : device_table()) s += d.name + ", ";
  return s + "cpu";
}

DeviceSpec find_device(const std::string& name) {
  const std::string n = lower(name);
  if (n == "cpu" || n == "local") return local_cpu_spec();
  for (const auto& d : device_table())
    if (d.name == n) return d;
  // Friendly aliases.
  if (n == "a100") return find_device("a100-80gb");
  if (n == "h100") return find_device("h100-sxm");
  fail(Status::invalid_argument, "unknown device '" + name + "'; valid devices: " + device_names());
}

bool match_device(const std::string& cuda_name, DeviceSpec* out) {
  const std::string n = lower(cuda_name);
  auto has = [&](const char* t) { return n.find(t) != std::string::npos; };
  std::string key;
  if (has("b200")) key = "b200";
  else if (has("h200")) key = "h200";
  else if (has("h100")) key = has("pcie") ? "h100-pcie" : "h100-sxm";
  else if (has("a100")) key = has("80") ? "a100-80gb" : "a100-40gb";
  else if (has("a6000")) key = "a6000";
  else if (has("a10")) key = "a10";
  else if ((has(" l4") || n == "l4") && !has("l40")) key = "l4";
  else if (has("t4")) key = "t4";
  if (key.empty()) return false;
  *out = find_device(key);
  return true;
}

double peak_tflops(const DeviceSpec& d, const std::string& dtype_in, std::string* used) {
  std::string dt = lower(dtype_in);
  if (dt == "float32" || dt == "fp32") dt = "f32";
  if (dt == "bfloat16") dt = "bf16";
  if (dt == "float16" || dt == "fp16" || dt == "half") dt = "f16";
  if (dt == "f8" || dt == "e4m3") dt = "fp8";
  auto pick = [&](const char* n, double v) {
    if (used) *used = n;
    return v;
  };
  if (dt == "fp8") {
    if (d.fp8_tflops > 0) return pick("fp8", d.fp8_tflops);
    dt = "bf16";
  }
  if (dt == "bf16") {
    if (d.bf16_tflops > 0) return pick("bf16", d.bf16_tflops);
    if (d.fp16_tflops > 0) return pick("f16", d.fp16_tflops);
    return pick("f32", d.fp32_tflops);
  }
  if (dt == "f16") {
    if (d.fp16_tflops > 0) return pick("f16", d.fp16_tflops);
    return pick("f32", d.fp32_tflops);
  }
  if (dt == "tf32") {
    if (d.tf32_tflops > 0) return pick("tf32", d.tf32_tflops);
    return pick("f32", d.fp32_tflops);
  }
  if (dt == "f32") return pick("f32", d.fp32_tflops);
  fail(Status::invalid_argument, "unknown compute dtype '" + dtype_in + "'; valid: f32, tf32, bf16, f16, fp8");
}

double Roof::attainable(double intensity) const { return std::min(peak_flops, intensity * bw_bytes); }
double Roof::floor_max(double flops, double bytes) const { return std::max(flops / peak_flops, bytes / bw_bytes); }
double Roof::floor_sum(double flops, double bytes) const { return flops / peak_flops + bytes / bw_bytes; }

Roof roof_of(const DeviceSpec& d, const std::string& dtype) {
  Roof r;
  r.peak_flops = peak_tflops(d, dtype) * 1e12;
  r.bw_bytes = d.mem_bw_gbs * 1e9;
  return r;
}

}  // namespace flashkit::analysis
