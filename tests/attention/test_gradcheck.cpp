// Finite-difference gradient checks. The reference backward (f64) must match central differences of
// L = sum(O * W) computed with the reference forward (f64), and the CPU flash and standard backward (f32)
// must match the reference backward, on tiny shapes covering every mask and option.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attention_fixture.hpp"

using namespace flashkit;
using fk_test::HostTensor;
using fk_test::rel_error;

namespace {

struct GradCase {
  std::string name;
  int64_t B = 1, Sq = 1, Sk = 1, H = 1, Hkv = 1, D = 8;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  float softcap = 0;
  float scale = 0;
  std::vector<std::pair<int, int>> varlen;  // (nq, nk) per sequence; empty: fixed-length batch
};

std::ostream& operator<<(std::ostream& o, const GradCase& c) { return o << c.name; }

// One problem in a given dtype; `like` copies the inputs of another problem (rounded to this dtype).
struct Problem {
  GradCase c;
  DType dt;
  int64_t B, Sq, Sk;
  std::vector<int32_t> cu_q, cu_k;
  HostTensor q, k, v, w;  // w: the loss weights, which are also dout
  AttentionOptions opts;

  Problem(const GradCase& cs, DType dtype) : c(cs), dt(dtype), B(cs.B), Sq(cs.Sq), Sk(cs.Sk) {
    if (!c.varlen.empty()) {
      fk_test::varlen_offsets(c.varlen, &cu_q, &cu_k);
      B = 1;
      Sq = cu_q.back();
      Sk = cu_k.back();
    }
    q = HostTensor(dt, {B, Sq, c.H, c.D});
    k = HostTensor(dt, {B, Sk, c.Hkv, c.D});
    v = HostTensor(dt, {B, Sk, c.Hkv, c.D});
    w = HostTensor(dt, {B, Sq, c.H, c.D});
    opts.causal = c.causal;
    opts.window_left = c.wl;
    opts.window_right = c.wr;
    opts.softcap = c.softcap;
    opts.scale = c.scale;
    opts.impl = AttentionImpl::reference;
    // cu arrays are set after the vectors stop moving (Problem is built in place, never copied).
  }
  void bind_cu() {
    if (c.varlen.empty()) return;
    opts.cu_seqlens_q = cu_q.data();
    opts.cu_seqlens_k = cu_k.data();
    opts.num_seqs = int64_t(c.varlen.size());
  }
  void fill_random(uint32_t seed) {
    std::mt19937 rng(seed);
    q.fill_random(rng, -1.5, 1.5);
    k.fill_random(rng, -1.5, 1.5);
    v.fill_random(rng);
    w.fill_random(rng);
  }
  void copy_inputs_from(const Problem& o) {
    for (int64_t i = 0; i < q.numel(); ++i) q.set(i, o.q.get(i));
    for (int64_t i = 0; i < k.numel(); ++i) k.set(i, o.k.get(i));
    for (int64_t i = 0; i < v.numel(); ++i) v.set(i, o.v.get(i));
    for (int64_t i = 0; i < w.numel(); ++i) w.set(i, o.w.get(i));
  }

  void forward(AttentionImpl impl, HostTensor* o, HostTensor* lse) const {
    *o = HostTensor(dt, {B, Sq, c.H, c.D});
    *lse = HostTensor(DType::f32, {B, c.H, Sq});
    o->poison();
    lse->poison();
    AttentionOptions op = opts;
    op.impl = impl;
    attention_forward(q.view, k.view, v.view, o->view, lse->view, op);
  }
  void backward(AttentionImpl impl, const HostTensor& o, const HostTensor& lse, HostTensor* dq, HostTensor* dk,
                HostTensor* dv) const {
    *dq = HostTensor(dt, {B, Sq, c.H, c.D});
    *dk = HostTensor(dt, {B, Sk, c.Hkv, c.D});
    *dv = HostTensor(dt, {B, Sk, c.Hkv, c.D});
    dq->poison();
    dk->poison();
    dv->poison();
    AttentionOptions op = opts;
    op.impl = impl;
    attention_backward(w.view, q.view, k.view, v.view, o.view, lse.view, dq->view, dk->view, dv->view, op);
  }
  // L = sum(O * W) with the reference forward.
  double loss() const {
    HostTensor o, lse;
    forward(AttentionImpl::reference, &o, &lse);
    double s = 0;
    for (int64_t i = 0; i < o.numel(); ++i) s += o.get(i) * w.get(i);
    return s;
  }
};

// Central differences of the loss with respect to every element of *x (an input of p).
HostTensor numeric_grad(Problem& p, HostTensor* x, double h) {
  HostTensor g(DType::f64, {x->view.shape[0], x->view.shape[1], x->view.shape[2], x->view.shape[3]});
  for (int64_t i = 0; i < x->numel(); ++i) {
    const double x0 = x->get(i);
    x->set(i, x0 + h);
    const double lp = p.loss();
    x->set(i, x0 - h);
    const double lm = p.loss();
    x->set(i, x0);
    g.set(i, (lp - lm) / (2 * h));
  }
  return g;
}

double norm(const HostTensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get(i) * t.get(i);
  return std::sqrt(s);
}

// The problems are tiny: one thread avoids an OpenMP fork/join per finite-difference evaluation, which
// dominates the run time on a loaded machine.
class GradCheck : public ::testing::TestWithParam<GradCase> {
 protected:
  void SetUp() override {
    threads_ = num_threads();
    set_num_threads(1);
  }
  void TearDown() override { set_num_threads(threads_); }
  int threads_ = 1;
};

TEST_P(GradCheck, ReferenceBackwardMatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  Problem p(c, DType::f64);
  p.bind_cu();
  p.fill_random(uint32_t(std::hash<std::string>{}(c.name)));

  HostTensor o, lse, dq, dk, dv;
  p.forward(AttentionImpl::reference, &o, &lse);
  p.backward(AttentionImpl::reference, o, lse, &dq, &dk, &dv);

  const double h = 1e-6;
  const HostTensor nq = numeric_grad(p, &p.q, h);
  const HostTensor nk = numeric_grad(p, &p.k, h);
  const HostTensor nv = numeric_grad(p, &p.v, h);
  // The check means something only if the gradients are not all zero.
  EXPECT_GT(norm(nq), 1e-3);
  EXPECT_GT(norm(nk), 1e-3);
  EXPECT_GT(norm(nv), 1e-3);
  EXPECT_LT(rel_error(dq, nq), 1e-6) << "dq vs central differences";
  EXPECT_LT(rel_error(dk, nk), 1e-6) << "dk vs central differences";
  EXPECT_LT(rel_error(dv, nv), 1e-6) << "dv vs central differences";
}

TEST_P(GradCheck, CpuBackwardMatchesReference) {
  const GradCase& c = GetParam();
  Problem p32(c, DType::f32);
  p32.bind_cu();
  p32.fill_random(uint32_t(std::hash<std::string>{}(c.name)) + 1);
  // The oracle runs in f64 on exactly the same (f32-representable) inputs.
  Problem p64(c, DType::f64);
  p64.bind_cu();
  p64.copy_inputs_from(p32);

  HostTensor o_ref, lse_ref, dq_ref, dk_ref, dv_ref;
  p64.forward(AttentionImpl::reference, &o_ref, &lse_ref);
  p64.backward(AttentionImpl::reference, o_ref, lse_ref, &dq_ref, &dk_ref, &dv_ref);
  EXPECT_GT(norm(dq_ref), 1e-3);

  for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::standard}) {
    SCOPED_TRACE(std::string(impl_name(impl)));
    HostTensor o, lse, dq, dk, dv;
    p32.forward(impl, &o, &lse);
    EXPECT_LT(rel_error(o, o_ref), 1e-5) << "o";
    EXPECT_LT(rel_error(lse, lse_ref), 1e-5) << "lse";
    p32.backward(impl, o, lse, &dq, &dk, &dv);
    EXPECT_LT(rel_error(dq, dq_ref), 1e-4) << "dq";
    EXPECT_LT(rel_error(dk, dk_ref), 1e-4) << "dk";
    EXPECT_LT(rel_error(dv, dv_ref), 1e-4) << "dv";
  }
}

std::vector<GradCase> cases() {
  std::vector<GradCase> v;
  // name, B, Sq, Sk, H, Hkv, D, then the options.
  auto add = [&v](const char* name, int64_t B, int64_t Sq, int64_t Sk, int64_t H, int64_t Hkv, int64_t D,
                  bool causal = false, int64_t wl = -1, int64_t wr = -1, float softcap = 0, float scale = 0) {
    GradCase c;
    c.name = name;
    c.B = B, c.Sq = Sq, c.Sk = Sk, c.H = H, c.Hkv = Hkv, c.D = D;
    c.causal = causal, c.wl = wl, c.wr = wr, c.softcap = softcap, c.scale = scale;
    v.push_back(c);
    return &v.back();
  };
  add("plain", 1, 3, 5, 2, 1, 8);
  add("plain_b2_mha", 2, 4, 4, 2, 2, 16);
  add("causal", 1, 3, 5, 2, 1, 8, true);
  add("causal_square", 1, 4, 4, 2, 1, 8, true);
  add("window_1_0", 1, 3, 5, 2, 1, 8, false, 1, 0);
  add("window_1_2", 1, 5, 5, 2, 1, 8, false, 1, 2);
  add("causal_window_2", 1, 4, 6, 2, 1, 8, true, 2, -1);
  add("softcap_2", 1, 3, 5, 2, 1, 8, false, -1, -1, 2.0f);
  // scale 1: raw scores of several units, so the cap is well into tanh's non-linear range
  add("softcap_2_saturating", 1, 3, 5, 2, 1, 8, false, -1, -1, 2.0f, 1.0f);
  add("explicit_scale", 1, 3, 5, 2, 1, 8, false, -1, -1, 0, 0.7f);
  add("sq_gt_sk", 2, 6, 2, 2, 1, 8);
  // bottom-right alignment with Sq > Sk: the first rows see no key (o = 0, lse = -inf, zero gradients)
  add("sq_gt_sk_causal", 1, 5, 3, 2, 2, 8, true);
  add("decode", 1, 1, 7, 4, 2, 8, true);
  // varlen batches with an empty sequence, a sequence with no keys and one with no queries
  const std::vector<std::pair<int, int>> seqs = {{2, 3}, {0, 2}, {3, 4}, {1, 0}, {2, 2}};
  add("varlen_empty", 1, 0, 0, 2, 1, 8)->varlen = seqs;
  add("varlen_empty_causal", 1, 0, 0, 2, 1, 8, true)->varlen = seqs;
  add("varlen_empty_window_softcap", 1, 0, 0, 2, 1, 8, false, 1, 0, 2.0f)->varlen = seqs;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Tiny, GradCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<GradCase>& i) { return i.param.name; });

}  // namespace
