#include "engine/sampler.hpp"

#include "flashkit/engine.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>

#include "flashkit/error.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace flashkit::engine {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(Status::invalid_argument, msg); }

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// exp(x) for x <= 0 (the shifted, scaled logits), accurate to ~1e-7 relative, 0 below -87 (and for -inf):
// Cephes-style range reduction and polynomial. The SSE2 loop below performs the same operations in the
// same order, so the scalar and vector paths give identical bits.
constexpr float kExpLo = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

inline float exp_nonpos(float x) {
  if (!(x > kExpLo)) return 0.0f;
  const float fn = (x * kLog2e + kRound) - kRound;
  const float r = (x - fn * kLn2Hi) - fn * kLn2Lo;
  const float z = r * r;
  const float p = (((((kP0 * r + kP1) * r + kP2) * r + kP3) * r + kP4) * r + kP5) * z + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(fn) + 127) << 23);
  return p * scale;
}

// out[i] = exp_nonpos((src[i] - lmax) / temp) over a whole row; returns the sum.
double exp_row(const float* src, float* out, size_t n, float lmax, float temp) {
  size_t i = 0;
  double total = 0.0;
#if defined(__SSE2__)
  const __m128 vmax = _mm_set1_ps(lmax), vt = _mm_set1_ps(temp), lo = _mm_set1_ps(kExpLo);
  const __m128 log2e = _mm_set1_ps(kLog2e), rnd = _mm_set1_ps(kRound), hi = _mm_set1_ps(kLn2Hi),
               lo2 = _mm_set1_ps(kLn2Lo), one = _mm_set1_ps(1.0f);
  const __m128i bias = _mm_set1_epi32(127);
  __m128 acc = _mm_setzero_ps();  // float partial sums of 4 lanes, flushed into double every block
  for (; i + 4 <= n; i += 4) {
    const __m128 x = _mm_div_ps(_mm_sub_ps(_mm_loadu_ps(src + i), vmax), vt);
    const __m128 keep = _mm_cmpgt_ps(x, lo);
    const __m128 xc = _mm_max_ps(x, lo);
    const __m128 fn = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(xc, log2e), rnd), rnd);
    const __m128 r = _mm_sub_ps(_mm_sub_ps(xc, _mm_mul_ps(fn, hi)), _mm_mul_ps(fn, lo2));
    const __m128 z = _mm_mul_ps(r, r);
    __m128 p = _mm_add_ps(_mm_mul_ps(_mm_set1_ps(kP0), r), _mm_set1_ps(kP1));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP2));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP3));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP4));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP5));
    p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, z), r), one);
    const __m128 scale = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(_mm_cvttps_epi32(fn), bias), 23));
    const __m128 w = _mm_and_ps(_mm_mul_ps(p, scale), keep);
    _mm_storeu_ps(out + i, w);
    acc = _mm_add_ps(acc, w);
    if ((i & 1023) == 1020) {  // keep the float partials short
      alignas(16) float t[4];
      _mm_store_ps(t, acc);
      total += static_cast<double>(t[0]) + t[1] + t[2] + t[3];
      acc = _mm_setzero_ps();
    }
  }
  alignas(16) float t[4];
  _mm_store_ps(t, acc);
  total += static_cast<double>(t[0]) + t[1] + t[2] + t[3];
#endif
  for (; i < n; ++i) {
    out[i] = exp_nonpos((src[i] - lmax) / temp);
    total += out[i];
  }
  return total;
}

// Scans logits: throws on NaN / +inf / no finite value; returns the index of the first maximum.
size_t checked_argmax(std::span<const float> logits) {
  if (logits.empty()) bad("sampler: logits are empty");
  const float* v = logits.data();
  const size_t n = logits.size();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const LogitsScan sc = scan_logits(v, n);
  const float mx = sc.max;
  const bool invalid = sc.invalid;
  if (invalid) {
    for (size_t j = 0; j < n; ++j) {
      if (std::isnan(v[j])) bad("sampler: logits contain NaN (token " + std::to_string(j) + ")");
      if (v[j] == kInf) bad("sampler: logits contain +inf (token " + std::to_string(j) + ")");
    }
  }
  if (mx == -kInf) bad("sampler: every logit is -inf; nothing can be sampled");
  size_t best = 0;
  while (v[best] != mx) ++best;
  return best;
}

}  // namespace

LogitsScan scan_logits(const float* v, size_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float mx = -kInf;
  bool invalid = false;
  size_t i = 0;
#if defined(__SSE2__)
  __m128 vmx = _mm_set1_ps(-kInf), vbad = _mm_setzero_ps();
  const __m128 vinf = _mm_set1_ps(kInf);
  for (; i + 4 <= n; i += 4) {
    const __m128 x = _mm_loadu_ps(v + i);
    vbad = _mm_or_ps(vbad, _mm_or_ps(_mm_cmpunord_ps(x, x), _mm_cmpeq_ps(x, vinf)));
    vmx = _mm_max_ps(vmx, x);
  }
  alignas(16) float t[4];
  _mm_store_ps(t, vmx);
  mx = std::max(std::max(t[0], t[1]), std::max(t[2], t[3]));
  invalid = _mm_movemask_ps(vbad) != 0;
#endif
  for (; i < n; ++i) {
    invalid |= std::isnan(v[i]) || v[i] == kInf;
    if (v[i] > mx) mx = v[i];
  }
  return {mx, invalid};
}

void validate(const SamplerParams& p) {
  if (std::isnan(p.temperature) || p.temperature < 0.0f || std::isinf(p.temperature))
    bad("sampler: temperature must be a finite value >= 0 (0 = greedy), got " + num(p.temperature));
  if (p.top_k < 0) bad("sampler: top_k must be >= 0 (0 = off), got " + std::to_string(p.top_k));
  if (std::isnan(p.top_p) || !(p.top_p > 0.0f && p.top_p <= 1.0f))
    bad("sampler: top_p must be in (0, 1] (1 = off), got " + num(p.top_p));
  if (std::isnan(p.min_p) || !(p.min_p >= 0.0f && p.min_p < 1.0f))
    bad("sampler: min_p must be in [0, 1) (0 = off), got " + num(p.min_p));
  if (std::isnan(p.repetition_penalty) || !(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty))
    bad("sampler: repetition_penalty must be a finite value > 0 (1 = off), got " + num(p.repetition_penalty));
}

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float penalty) {
  if (penalty == 1.0f || history.empty()) return;
  // Each distinct id once: transformers gathers the scores of the ids, transforms them and scatters them
  // back, so a repeated id is penalised once. A byte per vocabulary entry marks the ids already done; the
  // marks live in a per-thread buffer that is allocated once and cleared only where it was set, so a decode
  // step costs O(history), not a vocabulary-sized allocation.
  thread_local std::vector<uint8_t> done;
  if (done.size() < logits.size()) done.resize(logits.size(), 0);
  size_t marked = 0;
  for (int32_t id : history) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) {
      for (size_t m = 0; m < marked; ++m) done[static_cast<size_t>(history[m])] = 0;
      bad("sampler: history token id " + std::to_string(id) + " is outside the vocabulary [0, " +
          std::to_string(logits.size()) + ")");
    }
    ++marked;
    const size_t i = static_cast<size_t>(id);
    if (done[i]) continue;
    done[i] = 1;
    logits[i] = logits[i] < 0.0f ? logits[i] * penalty : logits[i] / penalty;
  }
  for (int32_t id : history) done[static_cast<size_t>(id)] = 0;
}

Sampler::Sampler(SamplerParams p) : params_(p) {
  validate(params_);
  reseed(params_.seed);
}

void Sampler::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : state_) s = splitmix64(x);
}

double Sampler::next_uniform() {
  // xoshiro256**
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return static_cast<double>(result >> 11) * 0x1.0p-53;
}

std::span<const float> Sampler::penalised(std::span<const float> logits, std::span<const int32_t> history) {
  if (params_.repetition_penalty == 1.0f || history.empty()) return logits;
  scores_.assign(logits.begin(), logits.end());
  apply_repetition_penalty(scores_, history, params_.repetition_penalty);
  return scores_;
}

int32_t Sampler::argmax(std::span<const float> logits, std::span<const int32_t> history) {
  const std::span<const float> src = penalised(logits, history);
  if (src.data() != logits.data()) checked_argmax(logits);  // validates the raw logits (NaN, +inf)
  return static_cast<int32_t>(checked_argmax(src));
}

// Bucket of a weight w in (0, 1]: positive floats order like their bit patterns, so the distance of w's
// bits below 1.0f's, in steps of 2^18 ulps (1/32 of an octave), is a monotone (descending) bucket index.
inline uint32_t weight_bucket(float w) { return (0x3F800000u - std::bit_cast<uint32_t>(w)) >> 18; }
constexpr uint32_t kWeightBuckets = (0x3F800000u >> 18) + 1;

double Sampler::filter(std::span<const float> logits, std::span<const int32_t> history) {
  const std::span<const float> src = penalised(logits, history);
  if (src.data() != logits.data()) checked_argmax(logits);
  const size_t imax = checked_argmax(src);
  const float lmax = src[imax];
  const float temp = params_.temperature;
  const size_t n = src.size();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  dense_mode_ = false;

  // top-k: keep every token whose logit is >= the k-th largest (transformers keeps ties with the k-th).
  // The k-th largest comes from a size-k min-heap in one pass (blocks of 4 below the heap's minimum are
  // skipped with one compare); survivors are then gathered in id order.
  float kth = kNegInf;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    const size_t k = static_cast<size_t>(params_.top_k);
    const auto greater = std::greater<float>();
    heap_.clear();
    auto offer = [&](float v) {
      if (v == kNegInf) return;
      if (heap_.size() < k) {
        heap_.push_back(v);
        if (heap_.size() == k) std::make_heap(heap_.begin(), heap_.end(), greater);
      } else if (v > heap_.front()) {
        std::pop_heap(heap_.begin(), heap_.end(), greater);
        heap_.back() = v;
        std::push_heap(heap_.begin(), heap_.end(), greater);
      }
    };
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 4 <= n; i += 4) {
      if (heap_.size() == k &&
          _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(src.data() + i), _mm_set1_ps(heap_.front()))) == 0)
        continue;
      for (size_t j = i; j < i + 4; ++j) offer(src[j]);
    }
#endif
    for (; i < n; ++i) offer(src[i]);
    if (heap_.size() == k) kth = heap_.front();  // fewer than k finite tokens: keep them all
  }

  // Weights exp((x - xmax) / T), the softmax numerators of the temperature-scaled logits: the top token
  // has weight 1 and every ratio prob / max prob is the token's weight.
  double total = 0.0;
  cand_.clear();
  weight_.clear();
  if (kth == kNegInf) {
    // No top-k cut: the whole row at once (vectorised), kept dense (no candidate list) unless top-p follows.
    dense_.resize(n);
    total = exp_row(src.data(), dense_.data(), n, lmax, temp);
    dense_mode_ = true;
  } else {
    for (size_t i = 0; i < n; ++i)
      if (src[i] >= kth) {
        cand_.push_back(static_cast<int32_t>(i));
        const float w = exp_nonpos((src[i] - lmax) / temp);
        weight_.push_back(w);
        total += w;
      }
  }

  // top-p: keep each token, by descending probability, while the mass strictly above it is below top_p
  // (equivalently transformers' "drop where the ascending cumulative prob <= 1 - top_p"; the top token is
  // always kept). O(V) without a full sort: tokens are bucketed by weight; only the bucket where the
  // descending cumulative mass crosses top_p needs sorting: tokens in higher buckets are all kept, tokens in
  // lower ones all dropped.
  if (params_.top_p < 1.0f) {
    const size_t m = dense_mode_ ? n : cand_.size();
    const float* w = dense_mode_ ? dense_.data() : weight_.data();
    auto token = [&](size_t j) { return dense_mode_ ? static_cast<int32_t>(j) : cand_[j]; };
    mass_.assign(kWeightBuckets, 0.0);
    for (size_t j = 0; j < m; ++j)
      if (w[j] > 0.0f) mass_[weight_bucket(w[j])] += w[j];
    const double target = static_cast<double>(params_.top_p) * total;
    double before = 0.0;  // mass of the buckets above the crossing one
    uint32_t cross = 0;
    while (cross + 1 < kWeightBuckets && before + mass_[cross] < target) before += mass_[cross++];
    keep_cand_.clear();
    keep_weight_.clear();
    tail_.clear();
    for (size_t j = 0; j < m; ++j) {
      if (!(w[j] > 0.0f)) continue;
      const uint32_t b = weight_bucket(w[j]);
      if (b < cross) {
        keep_cand_.push_back(token(j));
        keep_weight_.push_back(w[j]);
      } else if (b == cross) {
        tail_.push_back({token(j), w[j]});
      }
    }
    // Descending by weight, ascending id on ties.
    std::sort(tail_.begin(), tail_.end(), [](const TokenProb& x, const TokenProb& y) {
      return x.prob > y.prob || (x.prob == y.prob && x.token < y.token);
    });
    for (const TokenProb& t : tail_) {
      if (!keep_cand_.empty() && !(before < target)) break;
      keep_cand_.push_back(t.token);
      keep_weight_.push_back(t.prob);
      before += t.prob;
    }
    cand_.swap(keep_cand_);
    weight_.swap(keep_weight_);
    dense_mode_ = false;
    total = 0.0;
    for (float x : weight_) total += x;
  }

  // min-p: drop tokens whose probability is below min_p * (max probability), i.e. whose weight < min_p.
  if (params_.min_p > 0.0f) {
    const float mp = params_.min_p;
    total = 0.0;
    if (dense_mode_) {
      for (float& x : dense_) {
        if (x < mp) x = 0.0f;
        total += x;
      }
    } else {
      size_t o = 0;
      for (size_t j = 0; j < cand_.size(); ++j) {
        if (weight_[j] < mp) continue;
        cand_[o] = cand_[j];
        weight_[o] = weight_[j];
        total += weight_[j];
        ++o;
      }
      cand_.resize(o);
      weight_.resize(o);
    }
  }
  return total;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  if (params_.greedy()) return argmax(logits, history);
  const double total = filter(logits, history);
  const double u = next_uniform() * total;
  const float* w = dense_mode_ ? dense_.data() : weight_.data();
  const size_t m = dense_mode_ ? dense_.size() : weight_.size();
  auto token = [&](size_t j) { return dense_mode_ ? static_cast<int32_t>(j) : cand_[j]; };
  // Walk blocks of 1024 by their sums first, then the block that holds u.
  constexpr size_t kBlock = 1024;
  double cum = 0.0;
  size_t j = 0;
  while (j + kBlock < m) {
    double bs = 0.0;
    for (size_t t = j; t < j + kBlock; ++t) bs += w[t];
    if (u < cum + bs) break;
    cum += bs;
    j += kBlock;
  }
  int32_t last = -1;
  for (; j < m; ++j) {
    if (!(w[j] > 0.0f)) continue;
    cum += w[j];
    last = token(j);
    if (u < cum) return last;
  }
  if (last >= 0) return last;  // rounding: u landed at the very top of the range
  for (size_t t = m; t-- > 0;)
    if (w[t] > 0.0f) return token(t);
  return 0;  // unreachable: the top token has weight 1
}

std::vector<TokenProb> Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history) {
  if (params_.greedy()) return {TokenProb{argmax(logits, history), 1.0f}};
  const double total = filter(logits, history);
  std::vector<TokenProb> out;
  if (dense_mode_) {
    out.reserve(1024);
    for (size_t i = 0; i < dense_.size(); ++i)
      if (dense_[i] > 0.0f) out.push_back({static_cast<int32_t>(i), static_cast<float>(dense_[i] / total)});
  }
  out.reserve(cand_.size());
  for (size_t j = 0; !dense_mode_ && j < cand_.size(); ++j)
    if (weight_[j] > 0.0f) out.push_back({cand_[j], static_cast<float>(weight_[j] / total)});
  std::stable_sort(out.begin(), out.end(), [](const TokenProb& a, const TokenProb& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.token < b.token);
  });
  return out;
}

SamplerParams sampler_params(const GenerateOptions& opts) {
  SamplerParams sp;
  sp.temperature = opts.temperature;
  sp.top_k = opts.top_k;
  sp.top_p = opts.top_p;
  sp.min_p = opts.min_p;
  sp.repetition_penalty = opts.repetition_penalty;
  sp.seed = opts.seed;
  return sp;
}

}  // namespace flashkit::engine
