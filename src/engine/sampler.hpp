// Token sampler: turns one step's logits into a token id.
//
// Semantics follow Hugging Face transformers' logits processors in their default order:
//   1. repetition penalty on the logits of tokens already seen (positive / penalty, negative * penalty;
//      each distinct token once, however often it occurs),
//   2. greedy (temperature 0): argmax, the lowest index on ties; nothing below applies,
//   3. temperature, 4. top-k (ties with the k-th value are kept), 5. top-p (the smallest set, by
//      descending probability, whose mass reaches top_p; at least one token), 6. min-p (tokens whose
//      probability is below min_p * max probability are dropped),
//   then one draw from the renormalised survivors with the sampler's own PRNG (xoshiro256**, seeded
//   through splitmix64), so a given seed gives the same tokens on every run and platform.
// Cost per call on a 262144-entry vocabulary: one vectorised pass for greedy; top-k by a size-k heap (no
// sort); top-p by bucketing weights and sorting only the bucket where the cumulative mass crosses top_p
// (O(V)); exp via an SSE2 polynomial (~1e-7 relative error, identical on every x86-64).
// A sampler is stateful (its PRNG) and not thread-safe; use one per sequence.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace flashkit {
struct GenerateOptions;
}

namespace flashkit::engine {

struct SamplerParams {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off
  uint64_t seed = 0;
  bool greedy() const { return temperature == 0.0f; }
};

// Throws flashkit::Error(invalid_argument) naming the parameter: temperature < 0 (or not finite),
// top_p not in (0, 1], min_p not in [0, 1), top_k < 0, repetition_penalty <= 0 (or not finite), NaN anywhere.
void validate(const SamplerParams& p);

// The sampler settings of a generate() call (temperature, top-k/p, min-p, repetition penalty, seed): one mapping
// for plain and speculative generation, so both sample from the same distribution.
SamplerParams sampler_params(const GenerateOptions& opts);

// Repetition penalty in place (transformers' RepetitionPenaltyLogitsProcessor): for every distinct id in
// history, logits[id] is divided by penalty when positive, multiplied when negative. Ids outside
// [0, logits.size()) throw invalid_argument.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float penalty);

struct TokenProb {
  int32_t token;
  float prob;
};

class Sampler {
 public:
  explicit Sampler(SamplerParams p);  // validates p

  // One token. logits: one row of the vocabulary (NaN or +inf throws; -inf masks a token; at least one
  // finite). history: tokens seen so far (prompt + generated), used by the repetition penalty only.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history = {});

  // The distribution sample() draws from, after the penalty and every filter: surviving tokens with their
  // renormalised probabilities, by descending probability (ascending id on ties). Greedy gives the argmax
  // with probability 1. Does not touch the PRNG.
  std::vector<TokenProb> distribution(std::span<const float> logits, std::span<const int32_t> history = {});

  const SamplerParams& params() const { return params_; }
  void reseed(uint64_t seed);
  // The next uniform double in [0, 1) of the PRNG (53 bits); exposed for tests.
  double next_uniform();

 private:
  // Fills cand_ / weight_ with the surviving tokens and their unnormalised weights; returns the weight sum.
  double filter(std::span<const float> logits, std::span<const int32_t> history);
  int32_t argmax(std::span<const float> logits, std::span<const int32_t> history);
  std::span<const float> penalised(std::span<const float> logits, std::span<const int32_t> history);

  SamplerParams params_;
  uint64_t state_[4];
  std::vector<float> scores_;    // penalised / scaled logits
  std::vector<int32_t> cand_;    // surviving token ids
  std::vector<float> weight_;    // their weights exp(x - xmax), parallel to cand_
  std::vector<TokenProb> tail_;  // top-p scratch: the bucket that crosses top_p
  std::vector<double> mass_;     // top-p scratch: mass per weight bucket
  std::vector<int32_t> keep_cand_;
  std::vector<float> keep_weight_;
  std::vector<float> heap_;   // top-k scratch
  std::vector<float> dense_;  // weights of the whole row when no top-k cut applies
  bool dense_mode_ = false;   // survivors are every token with dense_[i] > 0 (no cand_ list)
};

// One vectorised pass over a logits row: its maximum and whether it holds a NaN or +inf (the sampler rejects such
// rows; the backends' greedy argmax shares the rule).
struct LogitsScan {
  float max = 0;
  bool invalid = false;  // a NaN or +inf somewhere
};
LogitsScan scan_logits(const float* v, size_t n);

}  // namespace flashkit::engine
