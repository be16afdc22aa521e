// The transformers fixtures in tests/data/models/<name>/ (made by tools/gpu/make_model_fixtures.py):
// expected.json (prompt_ids, greedy_ids, vocab_size) and raw little-endian f32 logits, prefill [prompt, V] and
// the first decode steps [steps, V]. Shared by the CPU fidelity tests and the CUDA engine tests.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace flashkit::testing {

inline const std::string kTestData = FLASHKIT_TEST_DATA;

struct Fixture {
  std::vector<int32_t> prompt, greedy;
  int64_t vocab = 0;
  std::vector<float> prefill, decode;  // [prompt, V], [steps, V]
};

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(bool(f)) << path;
  f.seekg(0, std::ios::end);
  const auto n = size_t(f.tellg()) / 4;
  f.seekg(0);
  std::vector<float> v(n);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4));
  return v;
}

inline Fixture read_fixture(const std::string& dir) {
  Fixture fx;
  std::ifstream f(dir + "/expected.json");
  const auto j = nlohmann::json::parse(f);
  fx.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  fx.greedy = j.at("greedy_ids").get<std::vector<int32_t>>();
  fx.vocab = j.at("vocab_size").get<int64_t>();
  fx.prefill = read_f32(dir + "/expected_prefill_logits.f32");
  fx.decode = read_f32(dir + "/expected_decode_logits.f32");
  return fx;
}

// ||a - ref|| / ||ref|| over one row; infinite when `a` holds a non-finite value.
inline double rel_err(const float* a, const float* ref, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return std::sqrt(d / r);
}

// First index of the maximum (greedy's tie rule).
inline int32_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return int32_t(b);
}

}  // namespace flashkit::testing
