#include "profiler.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "flashkit/error.hpp"

#if defined(FLASHKIT_ANALYSIS_NVTX) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define FK_NVTX 1
#endif

namespace flashkit::analysis {

double Profiler::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
}

double Profiler::pct_of_roof(const ProfileEvent& e) const {
  if (e.dur_us <= 0) return 0;
  const double s = e.dur_us * 1e-6;
  if (e.flops <= 0) return e.bytes > 0 ? 100.0 * (e.bytes / s) / roof_.bw_bytes : 0;
  const double ai = e.bytes > 0 ? e.flops / e.bytes : 1e30;
  return 100.0 * (e.flops / s) / roof_.attainable(ai);
}

nlohmann::json Profiler::chrome_trace() const {
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "flashkit profile"}}}});
  for (const auto& e : events_) {
    nlohmann::json args = e.args.is_object() ? e.args : nlohmann::json::object();
    const double s = e.dur_us * 1e-6;
    args["flops"] = e.flops;
    args["bytes"] = e.bytes;
    args["intensity"] = e.bytes > 0 ? e.flops / e.bytes : 0;
    args["gflops_per_s"] = s > 0 ? e.flops / s / 1e9 : 0;
    args["gb_per_s"] = s > 0 ? e.bytes / s / 1e9 : 0;
    args["bound"] = bound_name(roof_.bound(e.bytes > 0 ? e.flops / e.bytes : 1e30));
    args["pct_of_roof"] = pct_of_roof(e);
    ev.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.start_us}, {"dur", e.dur_us},
                  {"pid", 1}, {"tid", 1}, {"args", args}});
  }
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"},
          {"otherData", {{"peak_gflops", roof_.peak_flops / 1e9}, {"bw_gbs", roof_.bw_bytes / 1e9}}}};
}

void Profiler::write_chrome_trace(const std::string& path) const {
  std::ofstream f(path);
  if (!f) fail(Status::invalid_argument, "cannot write trace file " + path);
  f << chrome_trace().dump(1) << "\n";
  f.close();
  if (!f) fail(Status::invalid_argument, "writing trace file " + path + " failed (disk full?)");
}

namespace {
struct Agg {
  int calls = 0;
  double us = 0, flops = 0, bytes = 0;
};
}  // namespace

nlohmann::json Profiler::summary_json() const {
  std::map<std::string, Agg> m;
  std::vector<std::string> order;
  double total = 0;
  for (const auto& e : events_) {
    if (!m.count(e.name)) order.push_back(e.name);
    auto& a = m[e.name];
    a.calls++, a.us += e.dur_us, a.flops += e.flops, a.bytes += e.bytes;
    total += e.dur_us;
  }
  std::stable_sort(order.begin(), order.end(), [&](auto& a, auto& b) { return m[a].us > m[b].us; });
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& n : order) {
    const Agg& a = m[n];
    ProfileEvent pe{n, "", 0, a.us, a.flops, a.bytes, {}};
    const double s = a.us * 1e-6;
    rows.push_back({{"name", n}, {"calls", a.calls}, {"ms", a.us / 1e3}, {"pct_time", total > 0 ? 100 * a.us / total : 0},
                    {"flops", a.flops}, {"bytes", a.bytes}, {"gflops_per_s", s > 0 ? a.flops / s / 1e9 : 0},
                    {"gb_per_s", s > 0 ? a.bytes / s / 1e9 : 0},
                    {"bound", bound_name(roof_.bound(a.bytes > 0 ? a.flops / a.bytes : 1e30))},
                    {"pct_of_roof", pct_of_roof(pe)}});
  }
  return {{"total_ms", total / 1e3}, {"ops", rows}};
}

std::string Profiler::summary_table() const {
  const auto j = summary_json();
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-28s %6s %10s %6s %10s %9s %8s %8s\n", "op", "calls", "ms", "%time", "GFLOP/s",
                "GB/s", "bound", "%roof");
  o << buf;
  for (const auto& r : j["ops"]) {
    std::snprintf(buf, sizeof buf, "%-28s %6d %10.3f %6.1f %10.2f %9.2f %8s %8.1f\n",
                  r["name"].get<std::string>().c_str(), r["calls"].get<int>(), r["ms"].get<double>(),
                  r["pct_time"].get<double>(), r["gflops_per_s"].get<double>(), r["gb_per_s"].get<double>(),
                  r["bound"].get<std::string>().c_str(), r["pct_of_roof"].get<double>());
    o << buf;
  }
  std::snprintf(buf, sizeof buf, "total %.3f ms; roof: %.1f GFLOP/s, %.1f GB/s (ridge %.2f FLOP/B)\n",
                j["total_ms"].get<double>(), roof_.peak_flops / 1e9, roof_.bw_bytes / 1e9, roof_.ridge());
  o << buf;
  return o.str();
}

ScopedRange::ScopedRange(Profiler& p, std::string name, double flops, double bytes, std::string category) : p_(p) {
  e_.name = std::move(name);
  e_.category = std::move(category);
  e_.flops = flops;
  e_.bytes = bytes;
#ifdef FK_NVTX
  nvtxRangePushA(e_.name.c_str());
#endif
  e_.start_us = p_.now_us();
}

ScopedRange::~ScopedRange() {
  e_.dur_us = p_.now_us() - e_.start_us;
#ifdef FK_NVTX
  nvtxRangePop();
#endif
  p_.record(std::move(e_));
}

}  // namespace flashkit::analysis
