// Counter-based random numbers for training: a stream is a pure function of (seed, stream id), so weight
// initialisation and the data order depend on nothing but the seed and the step (a resumed run draws exactly what
// an uninterrupted one would, with no generator state to save).
#pragma once
#include <cmath>
#include <cstdint>

namespace flashkit::train {

// SplitMix64's finalizer: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t hash_combine(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b)); }

class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : state_(hash_combine(seed, stream)) {}
  uint64_t next() { return mix64(state_++); }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  // Box-Muller (one value per call; portable, unlike std::normal_distribution).
  double normal() {
    double u1 = uniform();
    const double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace flashkit::train
