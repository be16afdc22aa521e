// Shared by the libFuzzer targets: drive a reader over one input, accept success or flashkit::Error, and let any
// other exception escape so libFuzzer reports it (the readers promise flashkit::Error and nothing else).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/weights.hpp"

namespace fk_fuzz {

// Reads every tensor back as f32 so a view that points outside the input is caught by ASan.
inline void touch_all(const flashkit::model::WeightStore& s) {
  std::vector<float> buf;
  for (const auto& n : s.names()) {
    const auto& w = s.get(n);
    if (w.numel() > (1 << 22)) continue;  // inputs are small; a huge numel here would already be a reader bug
    buf.resize(size_t(w.numel()));
    flashkit::model::to_f32(w, buf.data());
    volatile float sink = 0;
    for (float x : buf) sink = sink + x;
    (void)sink;
  }
}

}  // namespace fk_fuzz
