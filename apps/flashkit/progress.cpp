#include "progress.hpp"

#include <cstdio>
#include <utility>

namespace flashkit::cli {

Progress::Progress(std::string what, int64_t total, bool quiet, double every_s)
    : what_(std::move(what)), total_(total), quiet_(quiet), every_s_(every_s), start_(Clock::now()), last_(start_) {}

void Progress::step(int64_t done, const std::string& label) {
  if (quiet_) return;
  const Clock::time_point now = Clock::now();
  if (std::chrono::duration<double>(now - last_).count() < every_s_) return;
  last_ = now;
  const double pct = total_ > 0 ? 100.0 * double(done) / double(total_) : 0.0;
  std::fprintf(stderr, "%s: %lld/%lld (%.0f%%) %s, %.0f s\n", what_.c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), pct, label.c_str(),
               std::chrono::duration<double>(now - start_).count());
  std::fflush(stderr);
}

}  // namespace flashkit::cli
