// The render budget: a render's running totals against its RenderLimits (limits.hpp). Every charge and check
// happens before the work or the allocation it pays for, so a template that would exceed a limit fails fast
// with a clear error instead of allocating gigabytes or running for hours.
#pragma once
#include <cstddef>
#include <cstdint>

#include "chat/diagnostics.hpp"
#include "chat/limits.hpp"

namespace flashkit::chat::jinja {

class Budget {
 public:
  explicit Budget(const RenderLimits& limits = {}) : limits_(limits) {}
  const RenderLimits& limits() const { return limits_; }
  uint64_t steps_used() const { return steps_; }

  // Pays `units` work units (limits.hpp: max_steps).
  void charge(uint64_t units, Pos p) {
    if (units > limits_.max_steps - steps_) steps_exceeded(p);
    steps_ += units;
  }
  // Pays for producing or copying `bytes` of string.
  void charge_bytes(size_t bytes, Pos p) { charge(bytes / 256, p); }
  // Before growing a string to `bytes` (max_output_bytes).
  void check_size(size_t bytes, Pos p) const {
    if (bytes > limits_.max_output_bytes) string_too_long(bytes, p);
  }
  // Before building a string of `bytes`; also pays for it.
  void check_string(size_t bytes, Pos p) {
    check_size(bytes, p);
    charge_bytes(bytes, p);
  }
  // Before growing a list to `items` (max_list_items).
  void check_items(size_t items, Pos p) const {
    if (items > limits_.max_list_items) list_too_long(items, p);
  }
  // Before building a list of `items`; also pays one unit per item.
  void check_list(size_t items, Pos p) {
    check_items(items, p);
    charge(items, p);
  }
  // Before descending into a value or evaluation `depth` levels deep.
  void check_value_depth(int depth, Pos p) const {
    if (depth > limits_.max_value_depth) nesting_error(p, limits_.max_value_depth);
  }

 private:
  [[noreturn]] void steps_exceeded(Pos p) const;
  [[noreturn]] void string_too_long(size_t bytes, Pos p) const;
  [[noreturn]] void list_too_long(size_t items, Pos p) const;

  RenderLimits limits_;
  uint64_t steps_ = 0;
};

// An evaluation in flight: counts the nesting of evaluations (max_eval_depth) for as long as it lives.
class DepthGuard {
 public:
  DepthGuard(int& depth, int limit, Pos p) : depth_(depth) {
    if (depth_ >= limit) nesting_error(p, limit);
    ++depth_;
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

}  // namespace flashkit::chat::jinja
