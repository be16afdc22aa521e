// Contract B for non-finite input with check_finite off (include/flashkit/attention.hpp, "Non-finite input"):
// the reference follows the rule computed from the inputs alone (nonfinite_rule.hpp: per row NaN, no visible key,
// every score -inf, or finite lse with o non-finite exactly in the columns of a visible non-finite v), and every CPU
// implementation (standard, flash -- each ISA through the isa_* ctest entries, which run the *AttentionIsa* suites)
// gives the reference's answer element for element: NaN and infinities where it has them, finite values within the
// dtype's tolerance elsewhere. On the CPU a key a row does not see never affects it.
//   backward: a row with visible keys and an lse of NaN or +-inf -> dq row NaN, dk/dv of the keys it sees NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "nonfinite_rule.hpp"

using namespace flashkit;
using fk_test::HostTensor;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const AttentionImpl kImpls[] = {AttentionImpl::reference, AttentionImpl::standard, AttentionImpl::flash};

struct Case {
  int64_t B = 1, Sq = 37, Sk = 45, H = 4, Hkv = 2, D = 24;  // varlen: Sq, Sk are the token totals
  DType dt = DType::f32;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  float softcap = 0.f;
  std::vector<std::pair<int, int>> varlen;  // (nq, nk) per sequence, packed in one slot
};

struct Outputs {
  HostTensor o, lse, dq, dk, dv;
};

struct NonFinite {
  Case c;
  HostTensor q, k, v, dout;
  std::vector<int32_t> cu_q, cu_k;
  explicit NonFinite(const Case& c_) : c(c_) {
    if (!c.varlen.empty()) {
      fk_test::varlen_offsets(c.varlen, &cu_q, &cu_k);
      c.Sq = cu_q.back();
      c.Sk = cu_k.back();
    }
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
    o.window_left = c.wl;
    o.window_right = c.wr;
    o.softcap = c.softcap;
    o.check_finite = false;
    if (!c.varlen.empty()) {
      o.cu_seqlens_q = cu_q.data();
      o.cu_seqlens_k = cu_k.data();
      o.num_seqs = int64_t(c.varlen.size());
    }
    return o;
  }
  // The sequences as spans of the packed tokens (one when not varlen).
  std::vector<fk_test::SeqSpan> spans() const {
    if (c.varlen.empty()) return {{0, 0, c.Sq, c.Sk}};
    std::vector<fk_test::SeqSpan> v;
    for (size_t b = 0; b < c.varlen.size(); ++b)
      v.push_back({cu_q[b], cu_k[b], cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]});
    return v;
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

// Every row of a forward's output against contract B computed from the inputs (nonfinite_rule.hpp); returns the
// number of rows of each class, so a test can check that it reached the classes it meant to.
std::vector<int64_t> check_rule(const NonFinite& p, const Outputs& out, const std::string& what) {
  const fk_test::MaskSpec mask{p.c.causal, p.c.wl, p.c.wr};
  const double scale = 1.0 / std::sqrt(double(p.c.D));
  std::vector<int64_t> count(4, 0);
  int64_t bad = 0;
  std::vector<double> o(static_cast<size_t>(p.c.D));
  for (const fk_test::SeqSpan& sq : p.spans())
    for (int64_t h = 0; h < p.c.H; ++h)
      for (int64_t i = 0; i < sq.nq; ++i) {
        const fk_test::RowRule r =
            fk_test::row_rule(p.q, p.k, p.v, p.c.H, p.c.Hkv, p.c.D, sq, h, i, mask, scale, p.c.softcap);
        ++count[size_t(r.cls)];
        for (int64_t d = 0; d < p.c.D; ++d) o[size_t(d)] = out.o.get(p.qi(0, sq.q0 + i, h, d));
        const std::string e = fk_test::check_row(r, o.data(), out.lse.get(h * p.c.Sq + sq.q0 + i), p.c.D, false);
        if (!e.empty() && bad++ < 5) ADD_FAILURE() << what << ": head " << h << " token " << sq.q0 + i << ": " << e;
      }
  EXPECT_EQ(bad, 0) << what;
  return count;
}

// The reference follows the rule and every implementation's forward equals the reference's.
Outputs check_forward(const NonFinite& p, const std::string& label, std::vector<int64_t>* classes = nullptr) {
  const Outputs ref = p.forward(AttentionImpl::reference);
  const std::vector<int64_t> count = check_rule(p, ref, label + " reference");
  if (classes) *classes = count;
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
// and not, a sliding window, a softcap, varlen, and the 16-bit dtypes.
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
  Case window;
  window.wl = 9;
  window.wr = 2;
  v.push_back(window);
  Case varlen;  // the third sequence has no keys: its rows see nothing
  varlen.causal = true;
  varlen.varlen = {{13, 19}, {5, 21}, {3, 0}, {16, 7}};
  v.push_back(varlen);
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
         (c.wl >= 0 ? " window" : "") + (c.varlen.empty() ? "" : " varlen") + (c.softcap > 0 ? " softcap" : "");
}

// Fills row s of head h of q (or key row j of kv head h of k) with x * (+1, -1, +1, ...) when alternate, else x.
void fill_row(HostTensor& t, int64_t base, int64_t D, double x, bool alternate) {
  for (int64_t d = 0; d < D; ++d) t.set(base + d, alternate && d % 2 ? -x : x);
}

}  // namespace

TEST(AttentionIsaNonFinite, NanOrInfInOneQueryRow) {
  for (const Case& c : cases())
    for (double bad : {kNaN, kInf, -kInf}) {
      NonFinite p(c);
      const int64_t s = p.c.Sq - 2, h = 1;
      p.q.set(p.qi(0, s, h, 5), bad);
      const Outputs ref = check_forward(p, label(c) + " q=" + std::to_string(bad));
      if (std::isnan(bad) && std::isfinite(lse_at(p, ref.lse, 0, h - 1, s))) {  // a row that sees keys
        EXPECT_TRUE(row_all_nan(p, ref.o, 0, s, h));
        EXPECT_TRUE(std::isnan(lse_at(p, ref.lse, 0, h, s)));
      }
      EXPECT_TRUE(row_all_finite(p, ref.o, 0, s, h - 1));  // other heads and rows are untouched
      EXPECT_TRUE(row_all_finite(p, ref.o, 0, s - 1, h));
    }
}

TEST(AttentionIsaNonFinite, WholeQueryRowNan) {  // every score NaN: flash used to call this row empty (o = 0)
  for (const Case& c : cases()) {
    if (!c.varlen.empty()) continue;  // the last token of a varlen batch may belong to a sequence without keys
    NonFinite p(c);
    const int64_t s = c.Sq - 1;  // sees keys under every mask here
    for (int64_t d = 0; d < c.D; ++d) p.q.set(p.qi(0, s, 2, d), kNaN);
    const Outputs ref = check_forward(p, label(c) + " q row NaN");
    EXPECT_TRUE(row_all_nan(p, ref.o, 0, s, 2));
    EXPECT_TRUE(std::isnan(lse_at(p, ref.lse, 0, 2, s)));
  }
}

// NaN/+-inf in one element of a key's k or v: only rows that see the key change (the rule says how; check_rule
// checks every row). A k element of -inf against a q element of either sign gives -inf or +inf scores: both
// classes occur over the rows that see it.
TEST(AttentionIsaNonFinite, NonFiniteKeyOrValueOnlyReachesRowsThatSeeIt) {
  for (const Case& c : cases())
    for (bool in_v : {false, true})
      for (double bad : {kNaN, kInf, -kInf}) {
        NonFinite p(c);
        const int64_t j = p.c.Sk - 3, hk = 1;  // a late key: under the causal mask the early rows do not see it
        (in_v ? p.v : p.k).set(p.ki(0, j, hk, 7), bad);
        std::vector<int64_t> classes;
        check_forward(p, label(c) + (in_v ? " v=" : " k=") + std::to_string(bad), &classes);
        if (!in_v && c.Sq > 3 && c.softcap == 0 && c.varlen.empty())
          EXPECT_GT(classes[size_t(fk_test::RowClass::nan)], 0) << label(c);
      }
}

// Finite inputs whose scores leave the f32 range: +inf makes the row NaN; -inf for every key gives the answer of a
// row with no visible key; -inf for some keys weighs them 0. Under a cap every such score is +-cap (finite).
TEST(AttentionIsaNonFinite, ScoresBeyondTheF32Range) {
  for (const Case& c : cases()) {
    if (c.dt == DType::f16) continue;  // f16 inputs cannot get there
    for (int kind = 0; kind < 3; ++kind) {  // 0: one +inf score, 1: every score -inf, 2: one -inf score
      NonFinite p(c);
      const int64_t s = p.c.Sq - 1, h = 0;  // row s of head 0; q . k ~ 9e38 * D: beyond f32, finite in f64
      fill_row(p.q, p.qi(0, s, h, 0), c.D, 3e19, kind == 1 ? false : true);
      if (kind == 1)
        for (int64_t j = 0; j < p.c.Sk; ++j) fill_row(p.k, p.ki(0, j, 0, 0), c.D, -3e19 * (1 + 0.01 * double(j)), false);  // no tied scores elsewhere
      else
        fill_row(p.k, p.ki(0, p.c.Sk - 1, 0, 0), c.D, kind == 0 ? 3e19 : -3e19, true);
      std::vector<int64_t> classes;
      const std::string w = label(c) + (kind == 0 ? " +inf score" : kind == 1 ? " every score -inf" : " one -inf score");
      const Outputs ref = check_forward(p, w, &classes);
      const double lse = lse_at(p, ref.lse, 0, h, s);
      if (!c.varlen.empty()) continue;  // the last token's sequence has keys here, but keep the check simple
      if (c.softcap > 0) {
        EXPECT_TRUE(std::isfinite(lse)) << w;
        EXPECT_TRUE(row_all_finite(p, ref.o, 0, s, h)) << w;
      } else if (kind == 0) {
        EXPECT_TRUE(std::isnan(lse)) << w;
        EXPECT_TRUE(row_all_nan(p, ref.o, 0, s, h)) << w;
      } else if (kind == 1) {
        EXPECT_EQ(lse, -kInf) << w;
        for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(ref.o.get(p.qi(0, s, h, d)), 0.0) << w;
        EXPECT_GT(classes[size_t(fk_test::RowClass::all_neg_inf)], 0) << w;
      } else {
        EXPECT_TRUE(std::isfinite(lse)) << w;
        EXPECT_TRUE(row_all_finite(p, ref.o, 0, s, h)) << w;
      }
    }
  }
}

TEST(AttentionIsaNonFinite, PartialSumsBeyondTheF32RangeStillGiveTheSoftmax) {
  for (const Case& c : cases()) {
    // With a cap, flash scales q by scale / cap before the dot product, so nothing overflows and the f32 sum is
    // just ill-conditioned (its rounding error is ~1e30): a precision limit, not this rule's concern.
    if (c.dt != DType::f32 || c.softcap > 0 || !c.varlen.empty()) continue;
    NonFinite p(c);
    // q . k_1 = 0 exactly (the score the contract defines, in f64), but its f32 products (9e38) and partial sums
    // overflow; the other scores are ~1e19. The CPU kernels recompute such a row and agree with the reference.
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
  p.v.set(p.ki(0, 2, 0, 3), kNaN);  // seen by rows 7 and 8; a product with p = 0 in rows 0..6 must not leak
  const Outputs ref = check_forward(p, "causal Sq > Sk");
  for (int64_t s = 0; s < 5; ++s) {
    EXPECT_EQ(ref.o.get(p.qi(0, s, 0, 0)), 0.0);
    EXPECT_EQ(lse_at(p, ref.lse, 0, 0, s), -kInf);
  }
  EXPECT_TRUE(row_all_nan(p, ref.o, 0, 8, 0));
  EXPECT_TRUE(std::isnan(ref.o.get(p.qi(0, 7, 0, 3))));
  EXPECT_TRUE(std::isfinite(lse_at(p, ref.lse, 0, 0, 7)));
  EXPECT_TRUE(row_all_finite(p, ref.o, 0, 6, 0));
}

TEST(AttentionIsaNonFinite, BackwardWithNonFiniteLse) {
  for (const Case& c : cases())
    for (double bad : {kNaN, kInf, -kInf}) {
      if (c.wl >= 0 || !c.varlen.empty()) continue;  // the row below must see every key
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
