// Seeded filler text for needle tasks: plain English-like sentences from small word lists written for flashkit
// (no corpus, no licence question), plus the seeded random values the tasks hide in it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashkit::eval {

// splitmix64: a small counter-based generator; the same seed gives the same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next();
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }  // n is tiny next to 2^64: the bias is negligible
 private:
  uint64_t s_;
};

// Seeds of independent streams: one per (run seed, task, length, depth, sample index).
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0);

// The first `n` sentences of the filler stream of `seed` (each ends with ". "); a prefix of a longer call's result.
std::vector<std::string> filler_sentences(uint64_t seed, int64_t n);
// A random word of the key vocabulary (nouns, distinct from the filler's), and a number of exactly `digits` digits.
std::string random_key_word(Rng& rng);
std::string random_number(Rng& rng, int digits);
// `n` distinct key words (n at most the list's size, else invalid_argument).
std::vector<std::string> distinct_key_words(Rng& rng, int64_t n);
// A variable name of five upper-case letters.
std::string random_variable(Rng& rng);
// The word list of the common-words task (distinct words) and its size.
const std::vector<std::string>& cwe_words();

}  // namespace flashkit::eval
