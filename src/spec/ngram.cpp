#include "spec/ngram.hpp"

#include <algorithm>

namespace flashkit::spec {

std::vector<std::vector<int32_t>> ngram_candidates(std::span<const int32_t> history, int max_n, int max_tokens,
                                                   int width) {
  std::vector<std::vector<int32_t>> out;
  const int64_t L = int64_t(history.size());
  if (max_tokens < 1 || width < 1) return out;
  auto covered = [&](const int32_t* c, int64_t len) {  // equal to, or a prefix of, a candidate already found
    for (const auto& o : out)
      if (int64_t(o.size()) >= len && std::equal(c, c + len, o.begin())) return true;
    return false;
  };
  for (int64_t n = std::min<int64_t>(max_n, L - 1); n >= 1; --n) {
    const int32_t* suffix = history.data() + (L - n);
    // Occurrences ending before the suffix itself, most recent first.
    for (int64_t j = L - n - 1; j >= 0; --j) {
      if (history[size_t(j + n - 1)] != suffix[n - 1] || !std::equal(suffix, suffix + n, history.data() + j))
        continue;
      // The tokens that followed the match; where the copy runs past the end of the text it continues from its
      // own beginning (an overlapping copy, as in LZ77), so periodic text gets full-length proposals.
      const int64_t start = j + n;
      std::vector<int32_t> c;
      for (int64_t i = 0; i < max_tokens; ++i) {
        const int64_t src = start + i;
        c.push_back(src < L ? history[size_t(src)] : c[size_t(src - L)]);
      }
      const int64_t len = int64_t(c.size());
      if (covered(c.data(), len)) continue;
      // A longer candidate that extends an earlier, shorter one replaces it (the trie would hold both anyway).
      std::erase_if(out, [&](const std::vector<int32_t>& o) {
        return o.size() < c.size() && std::equal(o.begin(), o.end(), c.begin());
      });
      out.push_back(std::move(c));
      if (int64_t(out.size()) >= width) return out;
    }
  }
  return out;
}

}  // namespace flashkit::spec
