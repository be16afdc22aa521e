// Perplexity of a token sequence through the engine (any model the engine loads): strided windows, every
// position's logits from Session::prefill(all_logits).
#include <algorithm>
#include <cmath>

#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/train.hpp"

namespace flashkit::train {

PerplexityResult perplexity(Model& model, std::span<const int32_t> ids, int64_t ctx, int64_t stride, int32_t bos,
                            const std::function<void(int64_t scored, int64_t total)>& progress) {
  const int64_t n = int64_t(ids.size());
  const int64_t prefix = bos >= 0 ? 1 : 0;
  if (ctx < 2 + prefix) fail(Status::invalid_argument, "--ctx must be at least " + std::to_string(2 + prefix) + ", got " + std::to_string(ctx));
  // stride < ctx: each window's first scored position had a token of context in the previous window.
  if (stride < 1 || stride > ctx - 1)
    fail(Status::invalid_argument, "--stride must be in [1, ctx - 1] = [1, " + std::to_string(ctx - 1) + "], got " + std::to_string(stride));
  if (n < 2) fail(Status::invalid_argument, "perplexity: the text has " + std::to_string(n) + " tokens; at least 2 are needed");
  auto session = model.new_session();
  if (ctx > session->max_context())
    fail(Status::invalid_argument, "--ctx " + std::to_string(ctx) + " exceeds the model's context of " +
                                       std::to_string(session->max_context()));
  const int64_t V = model.info().vocab_size;
  const int64_t span = ctx - prefix;  // text tokens per window
  PerplexityResult r;
  double total = 0;
  int64_t scored_until = 1 - prefix;  // next text position to score (without BOS, position 0 has no context)
  std::vector<int32_t> window;
  for (int64_t begin = 0; scored_until < n; begin += stride) {
    if (progress) progress(int64_t(r.nll.size()), n - 1 + prefix);
    const int64_t end = std::min(n, begin + span);
    window.clear();
    if (prefix) window.push_back(bos);
    window.insert(window.end(), ids.begin() + begin, ids.begin() + end);
    session->reset();
    session->prefill(window, true);
    const std::vector<float>& lg = session->all_logits();
    for (int64_t pos = std::max(scored_until, begin + 1 - prefix); pos < end; ++pos) {
      const int64_t row = pos - 1 - begin + prefix;  // logits row predicting text position pos
      const float* z = lg.data() + row * V;
      double mx = -INFINITY;
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(z[j]));
      double s = 0;
      for (int64_t j = 0; j < V; ++j) s += std::exp(double(z[j]) - mx);
      const double nll = mx + std::log(s) - double(z[ids[size_t(pos)]]);
      r.nll.push_back(float(nll));
      total += nll;
    }
    scored_until = std::max(scored_until, end);
    if (end == n) break;
  }
  r.tokens = int64_t(r.nll.size());
  r.mean_nll = total / double(std::max<int64_t>(1, r.tokens));
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace flashkit::train
