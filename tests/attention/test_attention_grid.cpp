// Every CPU implementation against the f64 reference, forward and backward, over the grid of the
// foundation issue: sizes, head dims, masks, GQA/MQA, windows, softcap, varlen, dtypes, ISA levels.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <ostream>
#include <string>

#include "attention_fixture.hpp"

using namespace flashkit;
using fk_test::HostTensor;
using fk_test::rel_error;

namespace {

struct Case {
  int64_t B, Sq, Sk, H, Hkv, D;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  float softcap = 0;
  DType dtype = DType::f32;
  std::vector<std::pair<int, int>> varlen;  // (nq, nk) per sequence; empty: fixed-length batch
  bool backward = true;

  std::string name() const {
    std::ostringstream o;
    o << "B" << B << "_Sq" << Sq << "_Sk" << Sk << "_H" << H << "x" << Hkv << "_D" << D << (causal ? "_causal" : "")
      << (wl >= 0 || wr >= 0 ? "_winL" + std::to_string(wl + 1) + "R" + std::to_string(wr + 1) : "")
      << (softcap > 0 ? "_cap" : "") << "_" << dtype_name(dtype) << (varlen.empty() ? "" : "_varlen");
    return o.str();
  }
};

// gtest prints a parameter with this instead of a hex dump of its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

double fwd_tol(DType dt) { return dt == DType::f32 ? 1e-5 : 2e-2; }
double bwd_tol(DType dt) { return dt == DType::f32 ? 1e-4 : 2e-2; }

struct Problem {
  Case c;
  std::vector<int32_t> cu_q, cu_k;
  int64_t B, Sq, Sk;  // tensor dims (varlen: 1, total, total)
  HostTensor q, k, v, dout;
  AttentionOptions opts;

  explicit Problem(const Case& cs, uint32_t seed) : c(cs) {
    std::mt19937 rng(seed);
    B = c.B;
    Sq = c.Sq;
    Sk = c.Sk;
    if (!c.varlen.empty()) {
      fk_test::varlen_offsets(c.varlen, &cu_q, &cu_k);
      B = 1;
      Sq = cu_q.back();
      Sk = cu_k.back();
      opts.cu_seqlens_q = cu_q.data();
      opts.cu_seqlens_k = cu_k.data();
      opts.num_seqs = int64_t(c.varlen.size());
    }
    q = HostTensor(c.dtype, {B, Sq, c.H, c.D});
    k = HostTensor(c.dtype, {B, Sk, c.Hkv, c.D});
    v = HostTensor(c.dtype, {B, Sk, c.Hkv, c.D});
    dout = HostTensor(c.dtype, {B, Sq, c.H, c.D});
    // Scores of order 1-3 after scaling so softmax is neither uniform nor one-hot.
    q.fill_random(rng, -1.5, 1.5);
    k.fill_random(rng, -1.5, 1.5);
    v.fill_random(rng);
    dout.fill_random(rng);
    opts.causal = c.causal;
    opts.window_left = c.wl;
    opts.window_right = c.wr;
    opts.softcap = c.softcap;
  }

  void forward(AttentionImpl impl, HostTensor* o, HostTensor* lse) {
    *o = HostTensor(c.dtype, {B, Sq, c.H, c.D});
    *lse = HostTensor(DType::f32, {B, c.H, Sq});
    o->poison();
    lse->poison();
    AttentionOptions op = opts;
    op.impl = impl;
    attention_forward(q.view, k.view, v.view, o->view, lse->view, op);
  }

  void backward(AttentionImpl impl, const HostTensor& o, const HostTensor& lse, HostTensor* dq, HostTensor* dk,
                HostTensor* dv) {
    *dq = HostTensor(c.dtype, {B, Sq, c.H, c.D});
    *dk = HostTensor(c.dtype, {B, Sk, c.Hkv, c.D});
    *dv = HostTensor(c.dtype, {B, Sk, c.Hkv, c.D});
    dq->poison();
    dk->poison();
    dv->poison();
    AttentionOptions op = opts;
    op.impl = impl;
    attention_backward(dout.view, q.view, k.view, v.view, o.view, lse.view, dq->view, dk->view, dv->view, op);
  }
};

class AttentionGrid : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionGrid, MatchesReference) {
  const Case& c = GetParam();
  Problem p(c, uint32_t(std::hash<std::string>{}(c.name())));
  HostTensor o_ref, lse_ref;
  p.forward(AttentionImpl::reference, &o_ref, &lse_ref);
  HostTensor dq_ref, dk_ref, dv_ref;
  if (c.backward) p.backward(AttentionImpl::reference, o_ref, lse_ref, &dq_ref, &dk_ref, &dv_ref);

  for (AttentionImpl impl : {AttentionImpl::standard, AttentionImpl::flash}) {
    SCOPED_TRACE(std::string(impl_name(impl)));
    HostTensor o, lse;
    p.forward(impl, &o, &lse);
    const double eo = rel_error(o, o_ref), el = rel_error(lse, lse_ref);
    RecordProperty(std::string(impl_name(impl)) + "_o_relerr", std::to_string(eo));
    EXPECT_LT(eo, fwd_tol(c.dtype)) << "o: ||out-ref||/||ref||";
    EXPECT_LT(el, 1e-5) << "lse (f32 in every dtype)";
    if (!c.backward) continue;
    HostTensor dq, dk, dv;
    p.backward(impl, o, lse, &dq, &dk, &dv);
    EXPECT_LT(rel_error(dq, dq_ref), bwd_tol(c.dtype)) << "dq";
    EXPECT_LT(rel_error(dk, dk_ref), bwd_tol(c.dtype)) << "dk";
    EXPECT_LT(rel_error(dv, dv_ref), bwd_tol(c.dtype)) << "dv";
  }
}

std::vector<Case> grid() {
  std::vector<Case> v;
  // seqlen sweep x causal, head_dim 64
  for (int64_t s : {1, 7, 64, 129, 1000})
    for (bool causal : {false, true}) v.push_back({2, s, s, 3, 3, 64, causal});
  // head_dim sweep (odd sizes)
  for (int64_t d : {8, 32, 80, 128, 256})
    for (bool causal : {false, true}) v.push_back({1, 77, 77, 2, 2, d, causal});
  // seqlen_q != seqlen_k both ways (bottom-right causal alignment; rows with no key when Sq > Sk)
  for (bool causal : {false, true}) {
    v.push_back({2, 5, 131, 2, 2, 64, causal});
    v.push_back({2, 131, 40, 2, 2, 64, causal});
    v.push_back({1, 1, 300, 4, 4, 128, causal});  // decode
  }
  // GQA 8:1 and MQA
  v.push_back({2, 67, 67, 8, 1, 64, true});
  v.push_back({1, 70, 90, 16, 2, 32, false});
  v.push_back({1, 65, 65, 6, 1, 80, false});
  // sliding windows
  v.push_back({1, 150, 150, 2, 2, 64, false, 16, 0});
  v.push_back({1, 150, 150, 2, 2, 64, false, 7, 9});
  v.push_back({1, 100, 170, 2, 1, 64, true, 33, -1});
  v.push_back({1, 90, 90, 2, 2, 32, false, 0, 0});
  // softcap
  v.push_back({1, 97, 97, 2, 2, 64, false, -1, -1, 5.0f});
  v.push_back({2, 50, 70, 4, 2, 128, true, -1, -1, 2.0f});
  // low precision
  for (DType dt : {DType::bf16, DType::f16}) {
    v.push_back({2, 129, 129, 2, 2, 64, false, -1, -1, 0, dt});
    v.push_back({1, 100, 100, 4, 1, 128, true, -1, -1, 0, dt});
    v.push_back({1, 33, 33, 2, 2, 256, false, 20, 3, 3.0f, dt});
  }
  // varlen batches with empty and length-1 sequences
  {
    Case c{1, 0, 0, 4, 2, 64, false};
    c.varlen = {{5, 5}, {0, 0}, {1, 1}, {70, 70}, {1, 9}, {0, 3}, {17, 40}};
    v.push_back(c);
    c.causal = true;
    v.push_back(c);
    c.dtype = DType::bf16;
    c.wl = 4;
    v.push_back(c);
  }
  // decode shapes (the split-KV path: seqlen_q <= 16, seqlen_q x group <= 64), incl. varlen decode batches
  v.push_back({2, 16, 700, 8, 2, 64, true});             // 16 x 4 = 64 rows per KV head: the boundary
  v.push_back({1, 3, 2000, 8, 1, 128, false, 100, -1});  // MQA, window
  v.push_back({3, 1, 517, 4, 4, 80, false, -1, -1, 3.0f, DType::bf16});
  {
    Case c{1, 0, 0, 8, 2, 64, true};
    c.varlen = {{1, 50}, {3, 200}, {0, 10}, {1, 1}, {2, 0}, {4, 300}};
    v.push_back(c);
    c.wl = 20;
    c.softcap = 4.0f;
    c.dtype = DType::f16;
    v.push_back(c);
  }
  // longest sizes from the issue's grid, forward and backward
  v.push_back({1, 1000, 1000, 2, 1, 128, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cpu, AttentionGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name(); });

// Every instruction-set path of the flash kernels must agree with the reference too: each level, per call (the
// Tuning's ISA cap; levels this CPU lacks run its widest one).
TEST(AttentionIsa, EveryLevelMatchesReference) {
  for (Case c : {Case{2, 70, 70, 4, 2, 64, true}, Case{1, 33, 45, 2, 2, 40, false, 5, 5, 4.0f},
                 Case{1, 3, 129, 4, 1, 64, true}}) {
    Problem p(c, 7);
    HostTensor o_ref, lse_ref;
    p.forward(AttentionImpl::reference, &o_ref, &lse_ref);
    for (CpuIsaCap cap : {CpuIsaCap::scalar, CpuIsaCap::avx2, CpuIsaCap::avx512}) {
      Tuning t;
      t.cpu_isa = cap;
      p.opts.tuning = t;
      HostTensor o, lse;
      p.forward(AttentionImpl::flash, &o, &lse);
      EXPECT_LT(rel_error(o, o_ref), 1e-5) << cpu_isa(cap);
    }
    p.opts.tuning.reset();
  }
}

}  // namespace
