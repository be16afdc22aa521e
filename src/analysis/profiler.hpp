// A small profiler: scoped ranges record name, start/end, FLOPs and bytes; the trace is written as Chrome
// trace-event JSON (chrome://tracing, ui.perfetto.dev) with the numbers in each event's args, and a summary
// table sorted by time gives each op's achieved rate and percent of its binding roof. In CUDA builds the
// ranges are also NVTX ranges, so Nsight Systems shows them.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware.hpp"

namespace flashkit::analysis {

struct ProfileEvent {
  std::string name, category;
  double start_us = 0, dur_us = 0;
  double flops = 0, bytes = 0;
  nlohmann::json args;  // extra key/values shown in the trace viewer
};

class Profiler {
 public:
  explicit Profiler(Roof roof) : roof_(roof), t0_(std::chrono::steady_clock::now()) {}
  double now_us() const;
  void record(ProfileEvent e) { events_.push_back(std::move(e)); }
  const std::vector<ProfileEvent>& events() const { return events_; }
  void clear() { events_.clear(); }
  const Roof& roof() const { return roof_; }

  // percent of the roof binding at this event's intensity (attainable FLOP/s, or bandwidth when flops == 0)
  double pct_of_roof(const ProfileEvent& e) const;
  nlohmann::json chrome_trace() const;
  void write_chrome_trace(const std::string& path) const;
  // Summed per name, sorted by total time: name, calls, total ms, %time, GFLOP/s, GB/s, bound, %roof.
  std::string summary_table() const;
  nlohmann::json summary_json() const;

 private:
  Roof roof_;
  std::chrono::steady_clock::time_point t0_;
  std::vector<ProfileEvent> events_;
};

// RAII range: ScopedRange r(prof, "gelu.tanh", flops, bytes);
class ScopedRange {
 public:
  ScopedRange(Profiler& p, std::string name, double flops, double bytes, std::string category = "op");
  ~ScopedRange();
  ProfileEvent& event() { return e_; }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  Profiler& p_;
  ProfileEvent e_;
};

}  // namespace flashkit::analysis
