// N-gram prompt lookup (no second model): the continuation of the text is guessed from what followed earlier
// occurrences of its last tokens in the prompt and the output so far. Input-grounded generation (summarize, rewrite,
// extract, code edits) copies long spans, which this proposes for free.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace flashkit::spec {

// Up to `width` distinct continuations of `history`, each of 1..max_tokens tokens: for n = max_n down to 1, the
// earlier occurrences of history's last n tokens, most recent first, each proposing the tokens that followed it
// (a copy that reaches the end of the text continues from its own start: periodic text repeats its period).
// Longer matches come first (they predict better); a continuation equal to or a prefix of one already found is
// skipped. Empty when nothing matches. O(len(history) * max_n) per call.
std::vector<std::vector<int32_t>> ngram_candidates(std::span<const int32_t> history, int max_n, int max_tokens,
                                                   int width);

}  // namespace flashkit::spec
