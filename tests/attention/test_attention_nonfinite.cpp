// The contract for non-finite input with check_finite off (include/flashkit/attention.hpp, "Non-finite input"):
// every CPU implementation (reference, standard, flash -- each ISA through the isa_* ctest entries, which run the
// *AttentionIsa* suites) gives the same answer, element for element: NaN exactly where the reference has NaN,
// finite values within the dtype's tolerance elsewhere.
//   forward: a row whose q, or a visible key's k or v, is not finite -> o = NaN, lse = NaN; masked keys never
//            matter; finite inputs whose scores overflow f32 still give the softmax; no visible key -> o = 0, -inf.
//   backward: a row with visible keys and an lse of NaN or +-inf -> dq row NaN, dk/dv of the keys it sees NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention_fixture.hpp"

using namespace flashkit;
using fk_test::HostTensor;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const AttentionImpl kImpls[] = {AttentionImpl::reference, AttentionImpl::standard, AttentionImpl::flash};

struct Case {
  int64_t B = 1, Sq = 37, Sk = 45, H = 4, Hkv = 2, D = 24;
  DType dt = DType::f32;
  bool causal = false;
  float softcap = 0.f;
};

struct Outputs {
  HostTensor o, lse, dq, dk, dv;
};

struct NonFinite {
  Case c;
  HostTensor q, k, v, dout;
  explicit NonFinite(const Case& c_) : c(c_) {
    std::mt19937 rng(77);
    q = HostTensor(c.dt, {c.B, c.Sq, c.H, c.D});
    k = HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.D});
    v = HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.D});
    dout = HostTensor(c.dt, {c.B, c.Sq, c.H, c.D});
    for (HostTensor* t : {&q, &k, &v, &dout}) t->fill_random(rng);
  }
  int64_t qi(int64_t b, int64_t s, int64_t h, int64_t d) const { return ((b * c.Sq + s) * c.H + h) * c.D + d; }
  int64_t ki(int64_t b, int64_t s, int64_t h, int64_t d) const { return ((b * c.Sk + s) * c.Hkv + h) * c.D + d; }
  AttentionOptions opts(AttentionImpl impl) const {
    AttentionOptions o;
    o.impl = impl;
    o.causal = c.causal;
    o.softcap = c.softcap;
    o.check_finite = false;
    return o;
  }
  Outputs forward(AttentionImpl impl) const {
    Outputs r;
    r.o = HostTensor(c.dt, {c.B, c.Sq, c.H, c.D});
    r.lse = HostTensor(DType::f32, {c.B, c.H, c.Sq});
    r.o.poison();
    r.lse.poison();
    attention_forward(q.view, k.view, v.view, r.o.view, r.lse.view, opts(impl));
    return r;
  }
  // Backward from the given o and lse (which the test may have edited).
  Outputs backward(AttentionImpl impl, const Outputs& fwd) const {
    Outputs r = fwd;
    r.dq = HostTensor(c.dt, {c.B, c.Sq, c.H, c.D});
    r.dk = HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.D});
    r.dv = HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.D});
    for (HostTensor* t : {&r.dq, &r.dk, &r.dv}) t->poison();
    attention_backward(dout.view, q.view, k.view, v.view, fwd.o.view, fwd.lse.view, r.dq.view, r.dk.view, r.dv.view,
                       opts(impl));
    return r;
  }
};

double tolerance(DType dt) { return dt == DType::f32 ? 2e-5 : dt == DType::bf16 ? 2e-2 : 4e-3; }

// Same NaN positions and infinities; finite elements within `tol` relative (to the tensor's norm).
void expect_same(const HostTensor& got, const HostTensor& want, double tol, const std::string& what) {
  double num = 0, den = 0;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double x = got.get(i), y = want.get(i);
    if (std::isnan(y) || std::isnan(x) || std::isinf(x) || std::isinf(y)) {
      const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (!same && mismatches++ < 5) ADD_FAILURE() << what << "[" << i << "]: got " << x << ", want " << y;
      continue;
    }
    num += (x - y) * (x - y);
    den += y * y;
  }
  EXPECT_EQ(mismatches, 0) << what;
  EXPECT_LE(den == 0 ? std::sqrt(num) : std::sqrt(num / den), tol) << what;
}

// Every implementation's forward equals the reference's (which the caller checks against the rule).
Outputs check_forward(const NonFinite& p, const std::string& label) {
  const Outputs ref = p.forward(AttentionImpl::reference);
  for (AttentionImpl impl : {AttentionImpl::standard, AttentionImpl::flash}) {
    const Outputs r = p.forward(impl);
    const std::string w = label + " " + std::string(impl_name(impl)) + " " + cpu_isa();
    expect_same(r.o, ref.o, tolerance(p.c.dt), w + " o");
    expect_same(r.lse, ref.lse, 1e-5, w + " lse");
  }
  return ref;
}

bool row_all_nan(const NonFinite& p, const HostTensor& o, int64_t b, int64_t s, int64_t h) {
  for (int64_t d = 0; d < p.c.D; ++d)
    if (!std::isnan(o.get(p.qi(b, s, h, d)))) return false;
  return true;
}
bool row_all_finite(const NonFinite& p, const HostTensor& o, int64_t b, int64_t s, int64_t h) {
  for (int64_t d = 0; d < p.c.D; ++d)
    if (!std::isfinite(o.get(p.qi(b, s, h, d)))) return false;
  return true;
}
double lse_at(const NonFinite& p, const HostTensor& lse, int64_t b, int64_t h, int64_t s) {
  return lse.get((b * p.c.H + h) * p.c.Sq + s);
}

// Shapes that reach every CPU flash path: tiled forward (many query rows), split-KV decode (few), with GQA, causal
// and not, a softcap, and the 16-bit dtypes.
std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType dt : {DType::f32, DType::bf16})
    for (bool causal : {false, true})
      for (int64_t sq : {int64_t(37), int64_t(3)}) {
        Case c;
        c.dt = dt;
        c.causal = causal;
        c.Sq = sq;
        v.push_back(c);
      }
  Case capped;
  capped.softcap = 20.f;
  capped.causal = true;
  v.push_back(capped);
  for (bool causal : {false, true}) {  // enough query tiles that flash packs K and V (tiles x group > 2)
    Case packed;
    packed.Sq = 200;
    packed.causal = causal;  // causal with Sq > Sk: the first 155 rows see no key at all
    v.push_back(packed);
  }
  return v;
}

std::string label(const Case& c) {
  return std::string(dtype_name(c.dt)) + (c.causal ? " causal" : "") + " Sq=" + std::to_string(c.Sq) +
         (c.softcap > 0 ? " softcap" : "");
}

// The first query row (of sequence length Sq, Sk keys) that sees key j under the case's mask.
int64_t first_row_seeing(const Case& c, int64_t j) { return c.causal ? std::max<int64_t>(0, j - (c.Sk - c.Sq)) : 0; }

}  // namespace

TEST(AttentionIsaNonFinite, NanOrInfInOneQueryRow) {
  for (const Case& c : cases())
    for (double bad : {kNaN, kInf, -kInf}) {
      NonFinite p(c);
      const int64_t s = c.Sq - 2, h = 1;
      p.q.set(p.qi(0, s, h, 5), bad);
      const Outputs ref = check_forward(p, label(c) + " q=" + std::to_string(bad));
      EXPECT_TRUE(row_all_nan(p, ref.o, 0, s, h));
      EXPECT_TRUE(std::isnan(lse_at(p, ref.lse, 0, h, s)));
      EXPECT_TRUE(row_all_finite(p, ref.o, 0, s, h - 1));  // other heads and rows are untouched
      EXPECT_TRUE(row_all_finite(p, ref.o, 0, s - 1, h));
    }
}

TEST(AttentionIsaNonFinite, WholeQueryRowNan) {  // every score NaN: flash used to call this row empty (o = 0)
  for (const Case& c : cases()) {
    NonFinite p(c);
    const int64_t s = c.Sq - 1;  // sees keys under every mask here
    for (int64_t d = 0; d < c.D; ++d) p.q.set(p.qi(0, s, 2, d), kNaN);
    const Outputs ref = check_forward(p, label(c) + " q row NaN");
    EXPECT_TRUE(row_all_nan(p, ref.o, 0, s, 2));
    EXPECT_TRUE(std::isnan(lse_at(p, ref.lse, 0, 2, s)));
  }
}

TEST(AttentionIsaNonFinite, NonFiniteKeyOrValueOnlyReachesRowsThatSeeIt) {
  for (const Case& c : cases())
    for (bool in_v : {false, true})
      for (double bad : {kNaN, kInf, -kInf}) {
        NonFinite p(c);
        const int64_t j = c.Sk - 3, hk = 1;  // late key: under the causal mask the early rows do not see it
        (in_v ? p.v : p.k).set(p.ki(0, j, hk, 7), bad);
        const Outputs ref = check_forward(p, label(c) + (in_v ? " v=" : " k=") + std::to_string(bad));
        const int64_t first = first_row_seeing(c, j);
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t s = 0; s < c.Sq; ++s) {
            const bool sees = h / (c.H / c.Hkv) == hk && s >= first;
            EXPECT_EQ(row_all_nan(p, ref.o, 0, s, h), sees) << "head " << h << " row " << s;
            if (!sees) EXPECT_TRUE(row_all_finite(p, ref.o, 0, s, h)) << "head " << h << " row " << s;
            EXPECT_EQ(std::isnan(lse_at(p, ref.lse, 0, h, s)), sees);
          }
      }
}

TEST(AttentionIsaNonFinite, ScoresBeyondTheF32RangeStillGiveTheSoftmax) {
  for (const Case& c : cases()) {
    if (c.dt != DType::f32) continue;  // bf16 shares f32's range; f16 inputs cannot get there
    NonFinite p(c);
    // Row s of head 0: q . k_j ~ +-1e39 * d for every key, beyond FLT_MAX in f32 (finite in f64).
    const int64_t s = c.Sq - 1;
    for (int64_t d = 0; d < c.D; ++d) p.q.set(p.qi(0, s, 0, d), 3e19 * (d % 2 ? 1 : -1));
    for (int64_t d = 0; d < c.D; ++d) p.k.set(p.ki(0, 1, 0, d), 3e19 * (d % 2 ? 1 : -1));   // s ~ +1e39 * d
    for (int64_t d = 0; d < c.D; ++d) p.k.set(p.ki(0, 2, 0, d), -3e19 * (d % 2 ? 1 : -1));  // s ~ -1e39 * d
    const Outputs ref = check_forward(p, label(c) + " overflow");
    EXPECT_TRUE(row_all_finite(p, ref.o, 0, s, 0));
    // The lse is the f32 rounding of the log-sum-exp: beyond the range without a cap (+inf), finite with one.
    EXPECT_EQ(std::isfinite(lse_at(p, ref.lse, 0, 0, s)), c.softcap > 0);
    for (int64_t d = 0; d < c.D && c.softcap == 0; ++d)  // the dominating key 1 takes all the weight
      EXPECT_NEAR(ref.o.get(p.qi(0, s, 0, d)), p.v.get(p.ki(0, 1, 0, d)), 1e-6);
  }
}

TEST(AttentionIsaNonFinite, PartialSumsBeyondTheF32RangeStillGiveTheSoftmax) {
  for (const Case& c : cases()) {
    // With a cap, flash scales q by scale / cap before the dot product, so nothing overflows and the f32 sum is
    // just ill-conditioned (its rounding error is ~1e30): a precision limit, not this rule's concern.
    if (c.dt != DType::f32 || c.softcap > 0) continue;
    NonFinite p(c);
    // q . k_1 = 0 exactly, but its f32 products (9e38) and partial sums overflow; the other scores are ~1e19.
    const int64_t s = c.Sq - 1;
    for (int64_t d = 0; d < c.D; ++d) p.q.set(p.qi(0, s, 0, d), 3e19);
    for (int64_t d = 0; d < c.D; ++d) p.k.set(p.ki(0, 1, 0, d), 3e19 * (d % 2 ? 1 : -1));
    const Outputs ref = check_forward(p, label(c) + " partial-sum overflow");
    EXPECT_TRUE(row_all_finite(p, ref.o, 0, s, 0));
    EXPECT_TRUE(std::isfinite(lse_at(p, ref.lse, 0, 0, s)));
  }
}

TEST(AttentionIsaNonFinite, FullyMaskedRowsStayZero) {
  Case c;
  c.causal = true;
  c.Sq = 9;
  c.Sk = 4;  // rows 0..4 see no key (bottom-right aligned diagonal)
  NonFinite p(c);
  p.k.set(p.ki(0, 3, 0, 0), kNaN);  // seen only by the last row
  const Outputs ref = check_forward(p, "causal Sq > Sk");
  for (int64_t s = 0; s < 5; ++s) {
    EXPECT_EQ(ref.o.get(p.qi(0, s, 0, 0)), 0.0);
    EXPECT_EQ(lse_at(p, ref.lse, 0, 0, s), -kInf);
  }
  EXPECT_TRUE(row_all_nan(p, ref.o, 0, 8, 0));
  EXPECT_TRUE(row_all_finite(p, ref.o, 0, 7, 0));
}

TEST(AttentionIsaNonFinite, BackwardWithNonFiniteLse) {
  for (const Case& c : cases())
    for (double bad : {kNaN, kInf, -kInf}) {
      NonFinite p(c);
      Outputs fwd = p.forward(AttentionImpl::reference);
      const int64_t s = c.Sq - 1, h = 3;  // the last row sees every key
      fwd.lse.set((0 * c.H + h) * c.Sq + s, bad);
      const Outputs ref = p.backward(AttentionImpl::reference, fwd);
      for (int64_t d = 0; d < c.D; ++d) EXPECT_TRUE(std::isnan(ref.dq.get(p.qi(0, s, h, d))));
      for (int64_t j = 0; j < c.Sk; ++j) {
        EXPECT_TRUE(std::isnan(ref.dk.get(p.ki(0, j, h / 2, 0))));
        EXPECT_TRUE(std::isnan(ref.dv.get(p.ki(0, j, h / 2, 0))));
        EXPECT_TRUE(std::isfinite(ref.dv.get(p.ki(0, j, 0, 0))));  // the other kv head
      }
      EXPECT_TRUE(std::isfinite(ref.dq.get(p.qi(0, s - 1, h, 0))));
      for (AttentionImpl impl : {AttentionImpl::standard, AttentionImpl::flash}) {
        const Outputs r = p.backward(impl, fwd);
        const std::string w = label(c) + " lse=" + std::to_string(bad) + " " + std::string(impl_name(impl)) + " " + cpu_isa();
        const double tol = c.dt == DType::f32 ? 1e-4 : 3e-2;
        expect_same(r.dq, ref.dq, tol, w + " dq");
        expect_same(r.dk, ref.dk, tol, w + " dk");
        expect_same(r.dv, ref.dv, tol, w + " dv");
      }
    }
}

TEST(AttentionIsaNonFinite, BackwardIgnoresTheLseOfFullyMaskedRows) {
  Case c;
  c.causal = true;
  c.Sq = 9;
  c.Sk = 4;
  NonFinite p(c);
  for (AttentionImpl impl : kImpls) {
    Outputs fwd = p.forward(impl);
    ASSERT_EQ(lse_at(p, fwd.lse, 0, 0, 0), -kInf);
    const Outputs r = p.backward(impl, fwd);
    for (const HostTensor* t : {&r.dq, &r.dk, &r.dv})
      for (int64_t i = 0; i < t->numel(); ++i) ASSERT_TRUE(std::isfinite(t->get(i))) << impl_name(impl) << " " << i;
  }
}

TEST(AttentionIsaNonFinite, CheckFiniteRejectsABadLse) {
  NonFinite p(Case{});
  Outputs fwd = p.forward(AttentionImpl::reference);
  fwd.lse.set(5, kInf);
  for (AttentionImpl impl : kImpls) {
    AttentionOptions o = p.opts(impl);
    o.check_finite = true;
    HostTensor dq(p.c.dt, {1, p.c.Sq, p.c.H, p.c.D}), dk(p.c.dt, {1, p.c.Sk, p.c.Hkv, p.c.D}), dv(dk);
    try {
      attention_backward(p.dout.view, p.q.view, p.k.view, p.v.view, fwd.o.view, fwd.lse.view, dq.view, dk.view,
                         dv.view, o);
      ADD_FAILURE() << "no error for an lse of +inf";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("lse: +inf at [0, 0, 5]"), std::string::npos) << e.what();
    }
  }
}
