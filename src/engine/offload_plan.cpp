#include "engine/offload_plan.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "flashkit/error.hpp"

namespace flashkit::engine {

namespace {
std::string gb(int64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g GB", double(b) / 1e9);
  return s;
}
}  // namespace

OffloadPlan plan_offload_layers(const OffloadSizes& s, int64_t n) {
  const int64_t L = int64_t(s.layer_bytes.size());
  if (n < 0 || n > L)
    fail(Status::invalid_argument, "--offload-layers: expected 0.." + std::to_string(L) + " (the model's layers), got " +
                                       std::to_string(n));
  if (s.slots < 1) fail(Status::invalid_argument, "offload: slots must be >= 1, got " + std::to_string(s.slots));
  OffloadPlan p;
  p.offloaded_layers = n;
  p.first_offloaded = L - n;
  p.slots = int(std::min<int64_t>(s.slots, n));
  int64_t resident_layers = 0;
  for (int64_t l = 0; l < L; ++l) {
    if (l < p.first_offloaded) {
      resident_layers += s.layer_bytes[size_t(l)];
    } else {
      p.slot_bytes = std::max(p.slot_bytes, s.layer_bytes[size_t(l)]);
      p.host_pinned_bytes += s.layer_bytes[size_t(l)];
    }
  }
  p.device_bytes = s.resident_bytes + resident_layers + int64_t(p.slots) * p.slot_bytes + s.kv_bytes + s.workspace_bytes;
  return p;
}

OffloadPlan plan_offload_budget(const OffloadSizes& s, int64_t budget) {
  if (budget <= 0) fail(Status::invalid_argument, "--gpu-memory: expected a positive byte count, got " + std::to_string(budget));
  const int64_t L = int64_t(s.layer_bytes.size());
  // Device bytes do not always fall with n (the slots appear at n = 1), so every n is tried, the fewest first.
  for (int64_t n = 0; n <= L; ++n) {
    const OffloadPlan p = plan_offload_layers(s, n);
    if (p.device_bytes <= budget) return p;
  }
  const OffloadPlan all = plan_offload_layers(s, L);
  fail(Status::out_of_memory,
       "--gpu-memory " + std::to_string(budget) + " bytes (" + gb(budget) + ") is too small: even with all " +
           std::to_string(L) + " layers offloaded the device needs " + gb(all.device_bytes) + " (resident weights " +
           gb(s.resident_bytes) + ", " + std::to_string(all.slots) + " layer slots of " + gb(all.slot_bytes) +
           ", KV cache " + gb(s.kv_bytes) + ", workspace " + gb(s.workspace_bytes) + "); use a smaller --ctx or more memory");
}

int64_t parse_byte_count(const std::string& s) {
  // Digits first: no sign, no space, no "inf" / "nan", no hexadecimal.
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return -1;
  if (s.size() > 1 && (s[1] == 'x' || s[1] == 'X')) return -1;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return -1;
  const std::string unit = end;
  double mul = 1;
  if (unit == "K" || unit == "KiB" || unit == "k") mul = double(int64_t(1) << 10);
  else if (unit == "M" || unit == "MiB") mul = double(int64_t(1) << 20);
  else if (unit == "G" || unit == "GiB") mul = double(int64_t(1) << 30);
  else if (unit == "T" || unit == "TiB") mul = double(int64_t(1) << 40);
  else if (!unit.empty()) return -1;
  if (!std::isfinite(v) || !(v >= 0) || v * mul > 9e18) return -1;
  return int64_t(v * mul);
}

}  // namespace flashkit::engine
