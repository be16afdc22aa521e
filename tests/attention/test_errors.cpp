// Every bad input to attention_forward / attention_backward is rejected with a flashkit::Error that carries
// the right Status and a message naming the argument at fault. Also: the non-finite checks, the CUDA-less
// build, the f64 restriction, the workspace guard of the standard implementation and set_num_threads.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "attention_fixture.hpp"
#include "env_knob.hpp"

using namespace flashkit;
using fk_test::HostTensor;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs f, which must throw flashkit::Error with `status` and a message containing every one of `parts`.
void expect_error(const std::function<void()>& f, Status status, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.status(), status) << "status " << status_name(e.status()) << ", message: " << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw (expected " << status_name(status) << ")";
}

#define EXPECT_INVALID(stmt, ...) \
  expect_error([&] { stmt; }, Status::invalid_argument, {__VA_ARGS__})

// A valid problem (all tensors contiguous and finite); tests break one thing at a time.
struct Problem {
  int64_t B, Sq, Sk, H, Hkv, D;
  DType dt;
  HostTensor q, k, v, o, lse, dout, dq, dk, dv;
  AttentionOptions opts;

  explicit Problem(int64_t B_ = 2, int64_t Sq_ = 5, int64_t Sk_ = 7, int64_t H_ = 4, int64_t Hkv_ = 2, int64_t D_ = 16,
                   DType dt_ = DType::f32)
      : B(B_), Sq(Sq_), Sk(Sk_), H(H_), Hkv(Hkv_), D(D_), dt(dt_) {
    std::mt19937 rng(1234);
    q = HostTensor(dt, {B, Sq, H, D});
    k = HostTensor(dt, {B, Sk, Hkv, D});
    v = HostTensor(dt, {B, Sk, Hkv, D});
    o = HostTensor(dt, {B, Sq, H, D});
    lse = HostTensor(DType::f32, {B, H, Sq});
    dout = HostTensor(dt, {B, Sq, H, D});
    dq = HostTensor(dt, {B, Sq, H, D});
    dk = HostTensor(dt, {B, Sk, Hkv, D});
    dv = HostTensor(dt, {B, Sk, Hkv, D});
    for (HostTensor* t : {&q, &k, &v, &o, &dout}) t->fill_random(rng);
  }
  void forward() { attention_forward(q.view, k.view, v.view, o.view, lse.view, opts); }
  void backward() {
    attention_backward(dout.view, q.view, k.view, v.view, o.view, lse.view, dq.view, dk.view, dv.view, opts);
  }
  // A problem that must pass: o/lse come from a real forward so the backward has finite inputs.
  void forward_backward() {
    forward();
    backward();
  }
};

// ---------------------------------------------------------------------------------------------------
// Sanity: the baseline problem is valid, for every implementation, so every failure below is caused
// by the one thing each test breaks.
TEST(Errors, BaselineIsValid) {
  for (AttentionImpl impl : {AttentionImpl::automatic, AttentionImpl::reference, AttentionImpl::standard,
                             AttentionImpl::flash}) {
    Problem p;
    p.opts.impl = impl;
    EXPECT_NO_THROW(p.forward_backward()) << impl_name(impl);
  }
}

TEST(Errors, NullDataPointers) {
  for (const char* name : {"q", "k", "v", "o", "lse"}) {
    SCOPED_TRACE(name);
    Problem p;
    HostTensor* t = std::string(name) == "q"   ? &p.q
                    : std::string(name) == "k" ? &p.k
                    : std::string(name) == "v" ? &p.v
                    : std::string(name) == "o" ? &p.o
                                               : &p.lse;
    t->view.data = nullptr;
    EXPECT_INVALID(p.forward(), std::string(name) + ": data pointer is null");
    EXPECT_INVALID(p.backward(), std::string(name) + ": data pointer is null");
  }
  for (const char* name : {"dout", "dq", "dk", "dv"}) {
    SCOPED_TRACE(name);
    Problem p;
    p.forward();
    HostTensor* t = std::string(name) == "dout" ? &p.dout
                    : std::string(name) == "dq" ? &p.dq
                    : std::string(name) == "dk" ? &p.dk
                                                : &p.dv;
    t->view.data = nullptr;
    EXPECT_INVALID(p.backward(), std::string(name) + ": data pointer is null");
  }
}

TEST(Errors, WrongNdim) {
  auto drop_dim = [](HostTensor& t) { t.view.ndim -= 1; };
  {
    Problem p;
    drop_dim(p.q);
    EXPECT_INVALID(p.forward(), "q: expected 4 dimensions", "[2, 5, 4]");
  }
  {
    Problem p;
    drop_dim(p.k);
    EXPECT_INVALID(p.forward(), "k: expected 4 dimensions");
  }
  {
    Problem p;
    drop_dim(p.v);
    EXPECT_INVALID(p.forward(), "v: expected 4 dimensions", "got 3");
  }
  {
    Problem p;
    drop_dim(p.o);
    EXPECT_INVALID(p.forward(), "o: expected 4 dimensions", "got 3");
  }
  {
    Problem p;
    p.lse.view.ndim = 4;
    EXPECT_INVALID(p.forward(), "lse: expected 3 dimensions", "[batch, heads, seqlen_q]");
  }
  for (const char* name : {"dout", "dq", "dk", "dv"}) {
    SCOPED_TRACE(name);
    Problem p;
    p.forward();
    HostTensor* t = std::string(name) == "dout" ? &p.dout
                    : std::string(name) == "dq" ? &p.dq
                    : std::string(name) == "dk" ? &p.dk
                                                : &p.dv;
    drop_dim(*t);
    EXPECT_INVALID(p.backward(), std::string(name) + ": expected 4 dimensions", "got 3");
  }
}

TEST(Errors, MismatchedShapes) {
  {  // batch of k differs from q's
    Problem p;
    p.k.view.shape[0] = 1;
    EXPECT_INVALID(p.forward(), "k: expected shape [2, 7, 2, 16]", "got [1, 7, 2, 16]");
  }
  {  // batch of v
    Problem p;
    p.v.view.shape[0] = 1;
    EXPECT_INVALID(p.forward(), "v: expected shape [2, 7, 2, 16]");
  }
  {  // seqlen of v differs from k's
    Problem p;
    p.v.view.shape[1] = 6;
    EXPECT_INVALID(p.forward(), "v: expected shape [2, 7, 2, 16]", "got [2, 6, 2, 16]");
  }
  {  // head_dim of k
    Problem p;
    p.k.view.shape[3] = 8;
    EXPECT_INVALID(p.forward(), "k: expected shape [2, 7, 2, 16]", "got [2, 7, 2, 8]");
  }
  {  // head_dim of v
    Problem p;
    p.v.view.shape[3] = 24;
    EXPECT_INVALID(p.forward(), "v: expected shape");
  }
  {  // kv_heads of v differs from k's
    Problem p;
    p.v.view.shape[2] = 1;
    EXPECT_INVALID(p.forward(), "v: expected shape");
  }
  {  // o's seqlen
    Problem p;
    p.o.view.shape[1] = 4;
    EXPECT_INVALID(p.forward(), "o: expected shape [2, 5, 4, 16]");
  }
  {  // o's heads
    Problem p;
    p.o.view.shape[2] = 2;
    EXPECT_INVALID(p.forward(), "o: expected shape [2, 5, 4, 16]");
  }
  {  // lse's shape
    Problem p;
    p.lse.view.shape[2] = 4;
    EXPECT_INVALID(p.forward(), "lse: expected shape [2, 4, 5]", "got [2, 4, 4]");
    EXPECT_INVALID(p.backward(), "lse: expected shape [2, 4, 5]");
  }
  // The backward's gradient tensors.
  {
    Problem p;
    p.forward();
    p.dout.view.shape[1] = 4;
    EXPECT_INVALID(p.backward(), "dout: expected shape [2, 5, 4, 16]");
  }
  {
    Problem p;
    p.forward();
    p.dq.view.shape[0] = 1;
    EXPECT_INVALID(p.backward(), "dq: expected shape [2, 5, 4, 16]");
  }
  {
    Problem p;
    p.forward();
    p.dk.view.shape[1] = 5;
    EXPECT_INVALID(p.backward(), "dk: expected shape [2, 7, 2, 16]");
  }
  {
    Problem p;
    p.forward();
    p.dv.view.shape[2] = 4;
    EXPECT_INVALID(p.backward(), "dv: expected shape [2, 7, 2, 16]");
  }
}

TEST(Errors, MismatchedDtypes) {
  // The buffers are f32-sized, so relabeling them as 2-byte types never reads out of bounds.
  {
    Problem p;
    p.k.view.dtype = DType::bf16;
    EXPECT_INVALID(p.forward(), "k: dtype bf16 does not match q's dtype f32");
  }
  {
    Problem p;
    p.v.view.dtype = DType::f16;
    EXPECT_INVALID(p.forward(), "v: dtype f16 does not match q's dtype f32");
  }
  {
    Problem p;
    p.o.view.dtype = DType::bf16;
    EXPECT_INVALID(p.forward(), "o: dtype bf16");
  }
  {
    Problem p;
    p.forward();
    p.dout.view.dtype = DType::f16;
    EXPECT_INVALID(p.backward(), "dout: dtype f16");
  }
  {
    Problem p;
    p.forward();
    p.dq.view.dtype = DType::bf16;
    EXPECT_INVALID(p.backward(), "dq: dtype bf16");
  }
  {
    Problem p;
    p.forward();
    p.dk.view.dtype = DType::bf16;
    EXPECT_INVALID(p.backward(), "dk: dtype bf16");
  }
  {
    Problem p;
    p.forward();
    p.dv.view.dtype = DType::f16;
    EXPECT_INVALID(p.backward(), "dv: dtype f16");
  }
  {  // q of a non-float type
    Problem p;
    for (HostTensor* t : {&p.q, &p.k, &p.v, &p.o}) t->view.dtype = DType::i32;
    EXPECT_INVALID(p.forward(), "q: dtype must be f32, bf16 or f16", "i32");
  }
}

TEST(Errors, LseDtypeShapeLayout) {
  {
    Problem p;
    p.lse.view.dtype = DType::bf16;
    EXPECT_INVALID(p.forward(), "lse: dtype must be f32", "bf16");
  }
  {  // f64 lse with f64 q: lse is f32 in every dtype
    Problem p(1, 3, 3, 2, 2, 8, DType::f64);
    p.opts.impl = AttentionImpl::reference;
    HostTensor lse64(DType::f64, {1, 2, 3});
    p.lse = lse64;
    EXPECT_INVALID(p.forward(), "lse: dtype must be f32", "f64");
  }
  {  // non-contiguous: every element two floats apart (the buffer is big enough: validation throws first)
    Problem p;
    HostTensor big(DType::f32, {2, 4, 10});
    p.lse.view = big.view;
    p.lse.view.shape = {2, 4, 5, 0};
    p.lse.view.strides = {40, 10, 2, 0};
    EXPECT_INVALID(p.forward(), "lse: must be contiguous");
    EXPECT_INVALID(p.backward(), "lse: must be contiguous");
  }
  {  // transposed heads/seq
    Problem p;
    p.lse.view.strides = {20, 1, 4, 0};
    EXPECT_INVALID(p.forward(), "lse: must be contiguous");
  }
}

TEST(Errors, Strides) {
  {  // non-unit last stride of each operand
    for (const char* name : {"q", "k", "v", "o"}) {
      SCOPED_TRACE(name);
      Problem p;
      HostTensor* t = std::string(name) == "q" ? &p.q : std::string(name) == "k" ? &p.k : std::string(name) == "v" ? &p.v : &p.o;
      t->view.strides[3] = 2;
      EXPECT_INVALID(p.forward(), std::string(name) + ": the head_dim dimension must be contiguous", "got stride 2");
    }
    for (const char* name : {"dout", "dq", "dk", "dv"}) {
      SCOPED_TRACE(name);
      Problem p;
      p.forward();
      HostTensor* t = std::string(name) == "dout" ? &p.dout
                      : std::string(name) == "dq" ? &p.dq
                      : std::string(name) == "dk" ? &p.dk
                                                  : &p.dv;
      t->view.strides[3] = 3;
      EXPECT_INVALID(p.backward(), std::string(name) + ": the head_dim dimension must be contiguous");
    }
  }
  {  // negative stride (a reversed sequence view)
    Problem p;
    p.k.view.strides[1] = -p.k.view.strides[1];
    EXPECT_INVALID(p.forward(), "k: stride of dimension 1 must be positive", "-32");
  }
  {
    Problem p;
    p.q.view.strides[0] = -p.q.view.strides[0];
    EXPECT_INVALID(p.forward(), "q: stride of dimension 0 must be positive");
  }
  {
    Problem p;
    p.forward();
    p.dv.view.strides[2] = -16;
    EXPECT_INVALID(p.backward(), "dv: stride of dimension 2 must be positive");
  }
  {  // zero stride on a dimension of size > 1 (broadcast) would alias outputs
    Problem p;
    p.o.view.strides[1] = 0;
    EXPECT_INVALID(p.forward(), "o: stride of dimension 1 must be positive");
  }
  {  // a valid non-contiguous layout is accepted: q as a slice of a wider buffer
    Problem p;
    HostTensor wide(DType::f32, {2, 5, 8, 16});
    std::mt19937 rng(3);
    wide.fill_random(rng);
    p.q.view = wide.view;
    p.q.view.shape[2] = 4;  // heads 0..3 of 8
    EXPECT_NO_THROW(p.forward());
  }
}

TEST(Errors, Heads) {
  {  // 4 heads over 3 kv heads
    Problem p(1, 5, 7, 4, 3, 16);
    EXPECT_INVALID(p.forward(), "k: kv_heads (3)", "divide q's heads (4)");
    EXPECT_INVALID(p.backward(), "kv_heads (3)");
  }
  {  // kv_heads 0 (no division by zero)
    Problem p(1, 5, 7, 4, 0, 16);
    EXPECT_INVALID(p.forward(), "k: kv_heads (0) must be at least 1");
  }
  {  // more kv heads than heads
    Problem p(1, 5, 7, 2, 4, 16);
    EXPECT_INVALID(p.forward(), "kv_heads (4)");
  }
  {
    Problem p(1, 5, 7, 0, 1, 16);
    EXPECT_INVALID(p.forward(), "q: heads must be at least 1", "got 0");
  }
}

TEST(Errors, HeadDim) {
  for (int64_t d : {12, 264, 0, 4, 257}) {
    SCOPED_TRACE(d);
    Problem p(1, 3, 3, 2, 2, d);
    EXPECT_INVALID(p.forward(), "q: head_dim must be a multiple of 8 in [8, 256]", "got " + std::to_string(d));
    EXPECT_INVALID(p.backward(), "head_dim");
  }
  for (int64_t d : {8, 256}) {  // the bounds are accepted
    Problem p(1, 3, 3, 2, 2, d);
    EXPECT_NO_THROW(p.forward_backward()) << d;
  }
}

TEST(Errors, BatchAndSeqlen) {
  {
    Problem p(0, 5, 7, 4, 2, 16);
    EXPECT_INVALID(p.forward(), "q: batch must be at least 1", "got 0");
    EXPECT_INVALID(p.backward(), "batch");
  }
  {  // seqlen 0 without varlen
    Problem p(1, 0, 7, 4, 2, 16);
    EXPECT_INVALID(p.forward(), "seqlen must be at least 1", "q has 0", "cu_seqlens");
  }
  {
    Problem p(1, 5, 0, 4, 2, 16);
    EXPECT_INVALID(p.forward(), "seqlen must be at least 1", "k has 0");
    EXPECT_INVALID(p.backward(), "seqlen");
  }
}

TEST(Errors, Scale) {
  for (float s : {kNaN, kInf, -kInf, -0.5f}) {
    SCOPED_TRACE(s);
    Problem p;
    p.opts.scale = s;
    EXPECT_INVALID(p.forward(), "scale: must be a finite positive number");
    EXPECT_INVALID(p.backward(), "scale:");
  }
}

TEST(Errors, Softcap) {
  for (float s : {kNaN, -1.0f, kInf}) {
    SCOPED_TRACE(s);
    Problem p;
    p.opts.softcap = s;
    EXPECT_INVALID(p.forward(), "softcap: must be finite and >= 0");
    EXPECT_INVALID(p.backward(), "softcap:");
  }
}

TEST(Errors, Threads) {
  for (int t : {-1, 4097, max_threads() + 1}) {
    SCOPED_TRACE(t);
    Problem p;
    p.opts.threads = t;
    EXPECT_INVALID(p.forward(), "threads: expected 0 (the default) or 1..");
    EXPECT_INVALID(p.backward(), "threads:");
  }
}

TEST(Errors, Window) {
  {
    Problem p;
    p.opts.window_left = -2;
    EXPECT_INVALID(p.forward(), "window_left: must be >= 0, or -1", "got -2");
    EXPECT_INVALID(p.backward(), "window_left:");
  }
  {
    Problem p;
    p.opts.window_right = -5;
    EXPECT_INVALID(p.forward(), "window_right: must be >= 0, or -1", "got -5");
  }
  {  // -1 and 0 are valid
    Problem p;
    p.opts.window_left = 0;
    p.opts.window_right = -1;
    EXPECT_NO_THROW(p.forward_backward());
  }
}

// ---------------------------------------------------------------------------------------------------
// Variable-length batches: [1, total, heads, dim] tensors with 3 sequences of (2, 3), (0, 1), (3, 3).
struct Varlen : Problem {
  std::vector<int32_t> cq{0, 2, 2, 5}, ck{0, 3, 4, 7};
  Varlen() : Problem(1, 5, 7, 4, 2, 16) {
    opts.cu_seqlens_q = cq.data();
    opts.cu_seqlens_k = ck.data();
    opts.num_seqs = 3;
  }
};

TEST(Errors, VarlenBaselineIsValid) {
  Varlen p;
  EXPECT_NO_THROW(p.forward_backward());
}

TEST(Errors, VarlenOnlyOneCuArray) {
  {
    Varlen p;
    p.opts.cu_seqlens_k = nullptr;
    EXPECT_INVALID(p.forward(), "cu_seqlens_q and cu_seqlens_k must both be given");
    EXPECT_INVALID(p.backward(), "cu_seqlens_q and cu_seqlens_k must both be given");
  }
  {
    Varlen p;
    p.opts.cu_seqlens_q = nullptr;
    EXPECT_INVALID(p.forward(), "cu_seqlens_q and cu_seqlens_k must both be given");
  }
}

TEST(Errors, VarlenNumSeqs) {
  for (int64_t n : {0, -1}) {
    Varlen p;
    p.opts.num_seqs = n;
    EXPECT_INVALID(p.forward(), "num_seqs: must be at least 1", "got " + std::to_string(n));
  }
}

TEST(Errors, VarlenBatchMustBeOne) {
  Problem p(2, 5, 7, 4, 2, 16);
  std::vector<int32_t> cq{0, 2, 5}, ck{0, 3, 7};
  p.opts.cu_seqlens_q = cq.data();
  p.opts.cu_seqlens_k = ck.data();
  p.opts.num_seqs = 2;
  EXPECT_INVALID(p.forward(), "q: with cu_seqlens the batch dimension must be 1", "got 2");
}

TEST(Errors, VarlenFirstOffset) {
  {
    Varlen p;
    p.cq[0] = 1;
    EXPECT_INVALID(p.forward(), "cu_seqlens_q[0] must be 0", "got 1");
  }
  {
    Varlen p;
    p.ck[0] = -1;
    EXPECT_INVALID(p.forward(), "cu_seqlens_k[0] must be 0", "got -1");
    EXPECT_INVALID(p.backward(), "cu_seqlens_k[0] must be 0");
  }
}

TEST(Errors, VarlenDecreasing) {
  {
    Varlen p;
    p.cq = {0, 3, 2, 5};
    EXPECT_INVALID(p.forward(), "cu_seqlens_q must be non-decreasing", "cu_seqlens_q[2] = 2 < 3");
  }
  {
    Varlen p;
    p.ck = {0, 5, 4, 7};
    EXPECT_INVALID(p.forward(), "cu_seqlens_k must be non-decreasing", "cu_seqlens_k[2] = 4 < 5");
  }
}

TEST(Errors, VarlenLastOffset) {
  {
    Varlen p;
    p.cq[3] = 4;
    EXPECT_INVALID(p.forward(), "cu_seqlens_q[num_seqs] must equal q's token count 5", "got 4");
  }
  {
    Varlen p;
    p.ck[3] = 8;
    EXPECT_INVALID(p.forward(), "cu_seqlens_k[num_seqs] must equal k's token count 7", "got 8");
  }
  {  // an interior offset past the end is caught by monotonicity + the last entry
    Varlen p;
    p.ck = {0, 9, 9, 7};
    EXPECT_INVALID(p.forward(), "cu_seqlens_k must be non-decreasing");
  }
}

TEST(Errors, VarlenAllowsZeroTokens) {
  // Every sequence empty: seqlen 0 is fine with cu_seqlens, and the empty lse [1, heads, 0] is accepted
  // with the strides TensorView::contiguous gives it ([0, 0, 1]) and with PyTorch's ([heads, 1, 1]).
  for (int64_t heads : {1, 2}) {
    for (bool torch_strides : {false, true}) {
      SCOPED_TRACE("heads " + std::to_string(heads) + (torch_strides ? ", lse strides [heads, 1, 1]" : ""));
      Problem p(1, 0, 0, heads, heads, 16);
      std::vector<int32_t> cq{0, 0, 0}, ck{0, 0, 0};
      p.opts.cu_seqlens_q = cq.data();
      p.opts.cu_seqlens_k = ck.data();
      p.opts.num_seqs = 2;
      if (torch_strides) p.lse.view.strides = {heads, 1, 1, 0};
      for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::standard, AttentionImpl::flash}) {
        p.opts.impl = impl;
        EXPECT_NO_THROW(p.forward_backward()) << impl_name(impl);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Non-finite inputs.
TEST(Errors, NonFiniteForward) {
  struct Poison {
    const char* name;
    int64_t index;
    float value;
  };
  for (Poison c : {Poison{"q", 0, kNaN}, Poison{"q", 17, kInf}, Poison{"k", 200, -kInf}, Poison{"k", 5, kNaN},
                   Poison{"v", 447, kNaN}, Poison{"v", 31, kInf}}) {
    SCOPED_TRACE(std::string(c.name) + "[" + std::to_string(c.index) + "]");
    Problem p;
    HostTensor* t = std::string(c.name) == "q" ? &p.q : std::string(c.name) == "k" ? &p.k : &p.v;
    t->set(c.index, c.value);
    for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::standard, AttentionImpl::flash}) {
      p.opts.impl = impl;
      EXPECT_INVALID(p.forward(), std::string(c.name) + ": contains a non-finite value", "check_finite=false");
    }
  }
  for (DType dt : {DType::bf16, DType::f16}) {  // low-precision inputs are checked too
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Problem p(2, 5, 7, 4, 2, 16, dt);
    p.k.set(9, kInf);
    EXPECT_INVALID(p.forward(), "k: contains a non-finite value");
    p.k.set(9, 0.25);
    p.v.set(3, kNaN);
    EXPECT_INVALID(p.forward(), "v: contains a non-finite value");
    p.v.set(3, 0.25);
    EXPECT_NO_THROW(p.forward());
  }
  {  // the position is reported: q[1, 2, 3, 4] of a [2, 5, 4, 16] tensor
    Problem p;
    p.q.set(((1 * 5 + 2) * 4 + 3) * 16 + 4, kNaN);
    EXPECT_INVALID(p.forward(), "q: contains a non-finite value at [1, 2, 3, 4]");
  }
}

TEST(Errors, NonFiniteBackward) {
  for (const char* name : {"dout", "o", "q", "k", "v"}) {
    SCOPED_TRACE(name);
    Problem p;
    p.forward();
    HostTensor* t = std::string(name) == "dout" ? &p.dout
                    : std::string(name) == "o"  ? &p.o
                    : std::string(name) == "q"  ? &p.q
                    : std::string(name) == "k"  ? &p.k
                                                : &p.v;
    t->set(t->numel() - 1, kNaN);
    EXPECT_INVALID(p.backward(), std::string(name) + ": contains a non-finite value");
    t->set(t->numel() - 1, -kInf);
    EXPECT_INVALID(p.backward(), std::string(name) + ": contains a non-finite value");
  }
}

TEST(Errors, NonFiniteOutsideTheViewIsIgnored) {  // only the visible extent of a strided view is checked
  Problem p;
  HostTensor wide(DType::f32, {2, 5, 8, 16});
  std::mt19937 rng(3);
  wide.fill_random(rng);
  for (int64_t i = 0; i < wide.numel(); ++i)
    if ((i / 16) % 8 >= 4) wide.set(i, kNaN);  // heads 4..7: not part of the view
  p.q.view = wide.view;
  p.q.view.shape[2] = 4;
  EXPECT_NO_THROW(p.forward());
}

TEST(Errors, CheckFiniteFalseSkipsTheCheck) {
  Problem p;
  p.opts.check_finite = false;
  p.q.set(3, kNaN);
  p.k.set(4, kInf);
  p.v.set(5, kNaN);
  for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::standard, AttentionImpl::flash}) {
    p.opts.impl = impl;
    EXPECT_NO_THROW(p.forward()) << impl_name(impl);
    p.dout.set(0, kNaN);
    EXPECT_NO_THROW(p.backward()) << impl_name(impl);
  }
}

// ---------------------------------------------------------------------------------------------------
// Devices and dtypes the build or implementation cannot serve.
TEST(Errors, CudaTensorsInCpuBuild) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible; this test is for CPU-only builds";
  {
    Problem p;
    for (HostTensor* t : {&p.q, &p.k, &p.v, &p.o, &p.lse, &p.dout, &p.dq, &p.dk, &p.dv}) t->view.device = Device::cuda;
    expect_error([&] { p.forward(); }, Status::unsupported, {"CUDA"});
    expect_error([&] { p.backward(); }, Status::unsupported, {"CUDA"});
    for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::standard, AttentionImpl::flash}) {
      p.opts.impl = impl;
      expect_error([&] { p.forward(); }, Status::unsupported, {"CUDA"});
    }
  }
  {  // only q on the device: still unsupported (checked before anything else)
    Problem p;
    p.q.view.device = Device::cuda;
    expect_error([&] { p.forward(); }, Status::unsupported, {"q:"});
  }
}

TEST(Errors, DeviceMismatch) {
  {
    Problem p;
    p.k.view.device = Device::cuda;
    EXPECT_INVALID(p.forward(), "k: must be on the same device as q");
  }
  {
    Problem p;
    p.lse.view.device = Device::cuda;
    EXPECT_INVALID(p.forward(), "lse: must be on the same device as q");
  }
  {
    Problem p;
    p.v.view.device_index = 1;
    EXPECT_INVALID(p.forward(), "v: must be on the same device as q");
  }
  {
    Problem p;
    p.forward();
    p.dk.view.device = Device::cuda;
    EXPECT_INVALID(p.backward(), "dk: must be on the same device as q");
  }
}

TEST(Errors, F64IsReferenceOnly) {
  Problem p(1, 4, 6, 2, 1, 8, DType::f64);
  p.opts.impl = AttentionImpl::reference;
  EXPECT_NO_THROW(p.forward_backward());
  for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::standard, AttentionImpl::automatic}) {
    SCOPED_TRACE(std::string(impl_name(impl)));
    p.opts.impl = impl;
    EXPECT_INVALID(p.forward(), "q: dtype f64 is accepted by impl=reference only");
    EXPECT_INVALID(p.backward(), "q: dtype f64 is accepted by impl=reference only");
  }
}

// ---------------------------------------------------------------------------------------------------
// The workspace guard: standard attention refuses, up front, a problem whose N x N matrices do not fit.
long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(Errors, StandardRefusesHugeWorkspaceBeforeAllocating) {
  const int64_t B = 1, H = 16, N = 32768, D = 64;
  const double scores_bytes = 4.0 * double(N) * double(N) * double(H);  // 68.7 GB of f32 scores
  if (double(max_workspace_bytes()) >= scores_bytes)
    GTEST_SKIP() << "this machine's workspace limit (" << max_workspace_bytes() << " bytes) fits the problem";
  const size_t n = size_t(B * N * H * D);  // 134 MB per tensor
  std::vector<float> q(n), k(n), v(n), o(n), lse(size_t(B * H * N));
  const TensorView tq = TensorView::contiguous(q.data(), DType::f32, {B, N, H, D});
  const TensorView tk = TensorView::contiguous(k.data(), DType::f32, {B, N, H, D});
  const TensorView tv = TensorView::contiguous(v.data(), DType::f32, {B, N, H, D});
  const TensorView to = TensorView::contiguous(o.data(), DType::f32, {B, N, H, D});
  const TensorView tl = TensorView::contiguous(lse.data(), DType::f32, {B, H, N});
  AttentionOptions opts;
  opts.impl = AttentionImpl::standard;
  opts.check_finite = false;
  const long rss0 = peak_rss_kb();
  expect_error([&] { attention_forward(tq, tk, tv, to, tl, opts); }, Status::out_of_memory,
               {"standard attention needs", "GB", "impl=flash"});
  // The backward reuses the buffers (it must throw before reading or writing any of them).
  expect_error([&] { attention_backward(tq, tq, tk, tv, to, tl, to, tk, tv, opts); }, Status::out_of_memory,
               {"standard attention needs", "GB", "impl=flash"});
  // Nothing big was allocated (or touched) by the refused calls.
  EXPECT_LT(peak_rss_kb() - rss0, 64 * 1024) << "peak RSS grew by " << (peak_rss_kb() - rss0) << " KB";
}


// The workspace limit comes with the call's Tuning (AttentionOptions::tuning); FLASHKIT_MAX_WORKSPACE_BYTES is how
// the front ends' tuning_from_env() sets it.
TEST(Errors, MaxWorkspaceLimitsStandard) {
  Problem p(1, 96, 96, 2, 2, 16);
  p.opts.impl = AttentionImpl::standard;
  auto limit = [](int64_t bytes) {
    Tuning t;
    t.max_workspace_bytes = bytes;
    return t;
  };
  OpCost fwd_cost, bwd_cost;
  p.opts.tuning = limit(1000000000000);  // whatever the process default
  attention_forward(p.q.view, p.k.view, p.v.view, p.o.view, p.lse.view, p.opts, &fwd_cost);
  attention_backward(p.dout.view, p.q.view, p.k.view, p.v.view, p.o.view, p.lse.view, p.dq.view, p.dk.view,
                     p.dv.view, p.opts, &bwd_cost);
  ASSERT_GE(fwd_cost.workspace_bytes, 4.0 * 96 * 96 * 2) << "the N x N score matrix per head";
  const int64_t fwd_ws = int64_t(fwd_cost.workspace_bytes), bwd_ws = int64_t(bwd_cost.workspace_bytes);
  p.opts.tuning = limit(fwd_ws - 1);
  EXPECT_EQ(max_workspace_bytes(*p.opts.tuning), fwd_ws - 1);
  expect_error([&] { p.forward(); }, Status::out_of_memory, {"standard attention needs", "GB", "flash"});
  p.opts.tuning = limit(fwd_ws);  // exactly the workspace: allowed
  EXPECT_NO_THROW(p.forward());
  p.opts.tuning = limit(bwd_ws - 1);
  expect_error([&] { p.backward(); }, Status::out_of_memory, {"standard attention needs", "GB", "flash"});
  {  // the flash path's workspace is small (tiles only): a limit the standard path exceeds does not stop it
    OpCost flash_cost;
    AttentionOptions fo = p.opts;
    fo.impl = AttentionImpl::flash;
    fo.tuning = limit(1000000000000);
    attention_forward(p.q.view, p.k.view, p.v.view, p.o.view, p.lse.view, fo, &flash_cost);
    if (flash_cost.workspace_bytes < fwd_cost.workspace_bytes) {
      fo.tuning = p.opts.tuning = limit(int64_t(flash_cost.workspace_bytes));
      EXPECT_NO_THROW(attention_forward(p.q.view, p.k.view, p.v.view, p.o.view, p.lse.view, fo));
      expect_error([&] { p.forward(); }, Status::out_of_memory, {"standard"});
    }
  }
  {  // the environment, read by tuning_from_env(): a value sets the limit, an unparsable one keeps the default
    ScopedEnv env("FLASHKIT_MAX_WORKSPACE_BYTES", std::to_string(fwd_ws - 1));
    EXPECT_EQ(max_workspace_bytes(tuning_from_env()), fwd_ws - 1);
  }
  {
    testing::internal::CaptureStderr();
    ScopedEnv env("FLASHKIT_MAX_WORKSPACE_BYTES", "lots");
    EXPECT_EQ(max_workspace_bytes(tuning_from_env()), physical_memory_bytes() / 10 * 8);
    testing::internal::GetCapturedStderr();
  }
  p.opts.tuning.reset();  // the process default: 80% of physical memory unless the variable was set at start
  EXPECT_NO_THROW(p.forward());
}

// FLASHKIT_SM90_WS_BN: 128 or 176 force the d128 ws key tile; anything else keeps automatic with a warning.
TEST(Errors, Sm90WsBnFromEnv) {
  for (const auto& [value, want] : {std::pair<const char*, int>{"176", 176}, {"192", 192}, {"128", 128}, {"auto", 0}}) {
    ScopedEnv env("FLASHKIT_SM90_WS_BN", value);
    EXPECT_EQ(tuning_from_env().sm90_ws_bn, want) << value;
  }
  testing::internal::CaptureStderr();
  {
    ScopedEnv env("FLASHKIT_SM90_WS_BN", "96");
    EXPECT_EQ(tuning_from_env().sm90_ws_bn, 0);
  }
  EXPECT_NE(testing::internal::GetCapturedStderr().find("FLASHKIT_SM90_WS_BN"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------
TEST(Errors, SetNumThreads) {
  const int before = num_threads();
  expect_error([] { set_num_threads(0); }, Status::invalid_argument, {"num_threads", "got 0"});
  expect_error([] { set_num_threads(-3); }, Status::invalid_argument, {"num_threads"});
  expect_error([] { set_num_threads(5000); }, Status::invalid_argument, {"num_threads"});
  EXPECT_EQ(num_threads(), before) << "a refused value must not change the setting";
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(num_threads(), before);
}

// ScopedNumThreads overrides the count for its thread only and restores it; the global setting is untouched.
TEST(Errors, ScopedNumThreads) {
  const int before = num_threads();
  expect_error([] { ScopedNumThreads s(-1); }, Status::invalid_argument, {"threads", "got -1"});
  expect_error([] { ScopedNumThreads s(4097); }, Status::invalid_argument, {"threads"});
  {
    ScopedNumThreads outer(3);
    EXPECT_EQ(num_threads(), 3);
    {
      ScopedNumThreads keep(0);  // 0 keeps the current (overridden) count
      EXPECT_EQ(num_threads(), 3);
      ScopedNumThreads inner(1);
      EXPECT_EQ(num_threads(), 1);
    }
    EXPECT_EQ(num_threads(), 3);
    int other = -1;
    std::thread([&] { other = num_threads(); }).join();
    EXPECT_EQ(other, before) << "another thread must see the process-wide count";
  }
  EXPECT_EQ(num_threads(), before);
}

TEST(Errors, ErrorIsARuntimeError) {
  try {
    fail(Status::internal, "boom");
    FAIL() << "fail() returned";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom");
    const Error* fe = dynamic_cast<const Error*>(&e);
    ASSERT_NE(fe, nullptr);
    EXPECT_EQ(fe->status(), Status::internal);
  }
}

}  // namespace
