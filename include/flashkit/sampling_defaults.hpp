// The sampling defaults of `flashkit generate` / `chat`, in one place for every front end (the CLI, the C API's
// fk_sampling_defaults_init, Python's Model.generate on text). GenerateOptions' own defaults stay greedy: a library
// call samples only when asked to, a user-facing front end samples as llama.cpp-style tools do.
#pragma once
#include <cstdint>

namespace flashkit {

struct SamplingDefaults {
  int64_t max_new_tokens = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;  // runs are reproducible
};

inline constexpr SamplingDefaults kSamplingDefaults{};

}  // namespace flashkit
