// Progress of a long command on stderr: "what: 3/8 (37%) label, 12 s", at most one line every few seconds, so a run
// that ends quickly prints nothing; quiet prints nothing at all.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace flashkit::cli {

class Progress {
 public:
  Progress(std::string what, int64_t total, bool quiet, double every_s = 3.0);
  // Before step `done` + 1 of `total` starts: prints a line when every_s seconds have passed since the last one.
  void step(int64_t done, const std::string& label);

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  int64_t total_;
  bool quiet_;
  double every_s_;
  Clock::time_point start_, last_;
};

}  // namespace flashkit::cli
