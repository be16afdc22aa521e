// Filler sentences and random values for the needle tasks (haystack.hpp). The word lists are written here.
#include "eval/haystack.hpp"

#include <algorithm>
#include <array>

#include "flashkit/error.hpp"

namespace flashkit::eval {

namespace {

constexpr std::array kSubjects = {"The old farmer", "A quiet river", "The morning train", "My neighbour",
                                  "The small boat",
                                  "A grey cloud", "The village baker", "Our teacher", "The tall tree", "A young fox",
                                  "The night guard", "The wooden bridge", "A busy market", "The north wind",
                                  "The painter", "A lonely road"};
constexpr std::array kVerbs = {"walks past", "looks at", "waits near", "carries", "finds", "remembers", "follows",
                               "watches", "builds", "paints", "crosses", "opens", "leaves", "passes", "greets",
                               "measures"};
constexpr std::array kObjects = {"the stone wall", "a red door", "the empty field", "the long table",
                                 "a basket of apples",
                                 "the harbour", "the green hill", "a pile of letters", "the broken clock",
                                 "the garden gate", "a warm loaf", "the narrow lane", "the school yard",
                                 "a bundle of wood", "the church tower", "the frozen pond"};
constexpr std::array kTimes = {"every morning", "in the evening", "after the rain", "before dawn", "at noon",
                               "on Sundays", "in winter", "during the fair", "late at night", "once a year"};
constexpr std::array kKeyWords = {
    "lantern", "compass", "violin", "anchor", "saddle", "teapot", "marble", "ribbon", "kettle", "helmet", "ladder",
    "feather", "mirror", "pebble", "candle", "barrel", "trumpet", "blanket", "thimble", "pocket", "wagon", "cactus",
    "walnut", "oyster", "falcon", "beetle", "turnip", "pepper", "cherry", "melon", "tiger", "zebra", "rabbit",
    "parrot", "donkey", "lizard", "salmon", "badger", "spider", "dragon", "castle", "island", "meadow", "canyon",
    "glacier", "volcano", "harbor", "prairie", "jungle", "desert", "pillow", "carpet", "button", "bucket",
    "hammer", "needle", "shovel", "whistle", "quilt", "jacket", "sandal", "scarf", "spoon", "basket"};

}  // namespace

uint64_t Rng::next() {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  Rng r(seed);
  uint64_t h = r.next();
  for (uint64_t v : {a, b, c, d}) {
    Rng s(h ^ (v * 0xD6E8FEB86659FD93ull));
    h = s.next();
  }
  return h;
}

std::vector<std::string> filler_sentences(uint64_t seed, int64_t n) {
  Rng rng(mix_seed(seed, 0xF111E5));
  std::vector<std::string> out;
  out.reserve(size_t(std::max<int64_t>(0, n)));
  for (int64_t i = 0; i < n; ++i) {
    std::string s = kSubjects[rng.below(kSubjects.size())];
    s += ' ';
    s += kVerbs[rng.below(kVerbs.size())];
    s += ' ';
    s += kObjects[rng.below(kObjects.size())];
    s += ' ';
    s += kTimes[rng.below(kTimes.size())];
    s += ". ";
    out.push_back(std::move(s));
  }
  return out;
}

std::string random_key_word(Rng& rng) { return kKeyWords[rng.below(kKeyWords.size())]; }

std::vector<std::string> distinct_key_words(Rng& rng, int64_t n) {
  if (n < 0 || n > int64_t(kKeyWords.size()))
    fail(Status::invalid_argument, "at most " + std::to_string(kKeyWords.size()) + " distinct keys, asked for " +
                                       std::to_string(n));
  std::vector<std::string> all(kKeyWords.begin(), kKeyWords.end());
  for (size_t i = all.size() - 1; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
  all.resize(size_t(n));
  return all;
}

std::string random_number(Rng& rng, int digits) {
  std::string s(1, char('1' + rng.below(9)));  // no leading zero: the number reads back the same
  for (int i = 1; i < digits; ++i) s += char('0' + rng.below(10));
  return s;
}

std::string random_variable(Rng& rng) {
  std::string s;
  for (int i = 0; i < 5; ++i) s += char('A' + rng.below(26));
  return s;
}

const std::vector<std::string>& cwe_words() {
  // Pronounceable two-syllable pseudo-words: 15 x 5 syllables squared, distinct by construction.
  static const std::vector<std::string> words = [] {
    const std::string cons = "bdfgklmnprstvwz", vows = "aeiou";
    std::vector<std::string> syl;
    for (char c : cons)
      for (char v : vows) syl.push_back(std::string{c, v});
    std::vector<std::string> w;
    for (const auto& a : syl)
      for (const auto& b : syl) w.push_back(a + b);
    return w;
  }();
  return words;
}

}  // namespace flashkit::eval
