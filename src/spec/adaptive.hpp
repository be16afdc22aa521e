// How many tokens to propose per step. A fixed K, or adaptive: the running acceptance rate and the measured step
// times pick the K with the most tokens per second under a simple model:
//   tokens per step   E(K) = (1 - a^(K+1)) / (1 - a)    (each draft token accepted with probability a, independently,
//                                                      plus the token the target adds; Leviathan et al., eq. 1)
//   time per step     C(K) = K * t_draft + t_verify(K + 1)
// a is estimated from the accepted lengths (a censored geometric sample: accepted / (accepted + early stops)), with
// exponential forgetting so a change of regime (a copied passage starts or ends) moves K within a few steps; t_draft
// is the measured time per draft token, t_verify(T) a least-squares line through the measured verification times per
// step size T (before two sizes are measured the line's slope is assumed to be 5% of the step time per row).
// All are seeded so the first steps use K = the initial value. K then grows while whole proposals are accepted and
// shrinks after early rejections, by as much as the model says.
// K = 0 is a choice too: a plain decode step (the engine's cheapest: on CUDA the decode graph with the device argmax,
// cheaper than a one-row verification), at rate 1 / t_plain, t_plain the measured time of such steps (one is taken
// after the first speculative step, to calibrate). While K = 0 the acceptance cannot be observed, so every
// kProbeEvery plain steps one step speculates at the best K > 0 (1 step in 17 at worst: speculation that never pays
// costs ~3%, the bound is 5%).
#pragma once
#include <cstdint>
#include <vector>

namespace flashkit::spec {

class StepModel {
 public:
  StepModel(int k_initial, int k_max, bool adaptive);
  int next_k() const { return k_; }
  // After a step that proposed k tokens (k >= 1) and accepted `accepted` of them; seconds spent proposing and
  // verifying T rows. k = 0: a step without proposals (a plain decode step, rows = 1): its time is t_plain.
  void update(int k, int accepted, double propose_s, double verify_s, int64_t rows);
  double plain_time() const;            // t_plain: measured, else the fit at T = 1; 0 before any step
  static constexpr int kProbeEvery = 16;
  double acceptance() const;            // current estimate of a
  double verify_time(double rows) const;  // the fitted t_verify(T); 0 before any step
  int distinct_sizes() const;           // step sizes T with a measured time
  double expected_tokens(int k) const;  // E(k) at the current a

 private:
  void choose();
  int k_, k_max_;
  bool adaptive_;
  int spec_k_ = 1;                  // the best K > 0 at the last choice (what a probe uses)
  int plain_since_probe_ = 0;       // plain steps since the last speculative step
  double plain_s_ = 0, plain_n_ = 0;  // decayed time and count of plain steps
  double acc_ = 0, stops_ = 0;      // decayed sums: tokens accepted, proposals cut short
  double draft_s_ = 0, draft_n_ = 0;  // decayed time and count of draft tokens
  std::vector<double> vt_sum_, vt_n_;  // per T: decayed verification time and count
};

}  // namespace flashkit::spec
