#include "spec/adaptive.hpp"

#include <algorithm>
#include <cmath>

namespace flashkit::spec {

namespace {
constexpr double kDecay = 0.9;  // weight of the past per step: ~10 steps of memory
}

StepModel::StepModel(int k_initial, int k_max, bool adaptive)
    : k_(std::clamp(k_initial, 1, std::max(1, k_max))), k_max_(std::max(1, k_max)), adaptive_(adaptive) {
  // A weak prior: acceptance 0.6 (two pseudo-steps).
  acc_ = 1.2;
  stops_ = 0.8;
}

double StepModel::acceptance() const { return std::clamp(acc_ / std::max(acc_ + stops_, 1e-9), 0.0, 0.999); }

double StepModel::expected_tokens(int k) const {
  const double a = acceptance();
  return (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}

int StepModel::distinct_sizes() const {
  int n = 0;
  for (double c : vt_n_) n += c > 0;
  return n;
}

double StepModel::verify_time(double rows) const {
  // Weighted least squares of the per-T mean times against T.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t t = 0; t < vt_n_.size(); ++t) {
    if (vt_n_[t] <= 0) continue;
    const double w = vt_n_[t], x = double(t), y = vt_sum_[t] / vt_n_[t];
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  if (sw <= 0) return 0;
  const double mx = sx / sw, my = sy / sw, var = sxx / sw - mx * mx;
  double slope = var > 1e-9 ? (sxy / sw - mx * my) / var : 0.05 * my;
  slope = std::max(slope, 0.0);
  return std::max(my + slope * (rows - mx), 1e-9);
}

double StepModel::plain_time() const { return plain_n_ > 0 ? plain_s_ / plain_n_ : verify_time(1); }

void StepModel::update(int k, int accepted, double propose_s, double verify_s, int64_t rows) {
  if (k <= 0) {
    plain_s_ = plain_s_ * kDecay + verify_s;
    plain_n_ = plain_n_ * kDecay + 1;
    ++plain_since_probe_;
    if (!adaptive_) return;
    choose();
    if (k_ == 0 && plain_since_probe_ >= kProbeEvery) k_ = spec_k_;  // probe: refresh the acceptance and t_verify
    return;
  }
  plain_since_probe_ = 0;
  if (size_t(rows) >= vt_n_.size()) vt_sum_.resize(size_t(rows) + 1, 0), vt_n_.resize(size_t(rows) + 1, 0);
  for (size_t t = 0; t < vt_n_.size(); ++t) vt_sum_[t] *= kDecay, vt_n_[t] *= kDecay;
  vt_sum_[size_t(rows)] += verify_s;
  vt_n_[size_t(rows)] += 1;
  acc_ = acc_ * kDecay + accepted;
  stops_ = stops_ * kDecay + (accepted < k ? 1 : 0);
  draft_s_ = draft_s_ * kDecay + propose_s;
  draft_n_ = draft_n_ * kDecay + k;
  if (!adaptive_) return;
  choose();
  if (plain_n_ == 0) k_ = 0;  // calibration: one plain step, so that K = 0 is judged on a measured time
}

void StepModel::choose() {
  const double td = draft_n_ > 0 ? draft_s_ / draft_n_ : 0;
  double best = -1;
  int best_k = std::max(k_, 1);
  for (int k = 1; k <= k_max_; ++k) {
    const double cost = k * td + verify_time(k + 1);
    const double rate = expected_tokens(k) / std::max(cost, 1e-12);
    if (rate > best * (1 + 1e-9)) best = rate, best_k = k;
  }
  spec_k_ = best_k;
  // K = 0 when a plain step delivers more tokens per second than the best K (t_plain measured or, before that, the
  // verification fit at T = 1).
  const double tp = plain_time();
  k_ = tp > 0 && 1.0 / tp > best ? 0 : best_k;
}

}  // namespace flashkit::spec
