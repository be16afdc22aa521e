// The CUDA kernels (flash, decode, standard) against the CPU f64 reference, forward and backward: fresh random
// inputs per case, poisoned (NaN) outputs so unwritten elements fail, every CUDA call checked.
// Every test skips when no CUDA device is visible (CI has none).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <cstring>
#include <sstream>
#include <ostream>
#include <string>
#include <optional>
#include <vector>

#include "attention_fixture.hpp"
#include "cuda_device.hpp"
#include "nonfinite_rule.hpp"

using namespace flashkit;
using fk_test::HostTensor;
using fk_test::rel_error;

namespace {

using fk_test::has_gpu;

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    ASSERT_EQ(e_, cudaSuccess) << #x << ": " << cudaGetErrorString(e_);                \
  } while (0)

// A device copy of a [B, S, H, D] tensor, optionally with padded head stride (pad elements per head row).
struct DevTensor {
  void* p = nullptr;
  TensorView view;
  int64_t rows = 0, D = 0, pitch = 0, es = 2;
  DevTensor() = default;
  DevTensor(const DevTensor&) = delete;
  ~DevTensor() {
    if (p) cudaFree(p);
  }
  void alloc(DType dt, std::initializer_list<int64_t> shape, int64_t pad = 0) {
    std::vector<int64_t> s(shape);
    es = dtype_size(dt);
    D = s.back();
    pitch = D + pad;
    rows = 1;
    for (size_t i = 0; i + 1 < s.size(); ++i) rows *= s[i];
    const size_t bytes = size_t(std::max<int64_t>(rows * pitch, 1) * es) + 16;
    ASSERT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    view = TensorView::contiguous(p, dt, shape, Device::cuda);
    if (pad) {  // [B, S, H, D] with stride_h = D + pad
      view.strides[view.ndim - 1] = 1;
      int64_t st = pitch;
      for (int d = view.ndim - 2; d >= 0; --d) {
        view.strides[d] = st;
        st *= view.shape[d];
      }
    }
  }
  void upload(const HostTensor& h) {
    CK(cudaMemcpy2D(p, pitch * es, h.bytes.data(), D * es, D * es, rows, cudaMemcpyHostToDevice));
  }
  void download(HostTensor* h) {
    CK(cudaMemcpy2D(h->bytes.data(), D * es, p, pitch * es, D * es, rows, cudaMemcpyDeviceToHost));
  }
  void poison() { CK(cudaMemset(p, 0xff, size_t(rows * pitch * es))); }  // 0xffff is NaN in bf16, f16 and f32
};

HostTensor to_f64(const HostTensor& t) {
  std::vector<int64_t> s(t.view.shape.begin(), t.view.shape.begin() + t.view.ndim);
  HostTensor r;
  if (s.size() == 4) r = HostTensor(DType::f64, {s[0], s[1], s[2], s[3]});
  else r = HostTensor(DType::f64, {s[0], s[1], s[2]});
  for (int64_t i = 0; i < t.numel(); ++i) r.set(i, t.get(i));
  return r;
}

struct Case {
  int64_t B, Sq, Sk, H, Hkv, D;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  float softcap = 0;
  DType dtype = DType::bf16;
  std::vector<std::pair<int, int>> varlen;
  int64_t pad = 0;  // head-stride padding of q/k/v/o/grads (odd values force the repack path)
  AttentionImpl impl = AttentionImpl::flash;
  bool backward = true;
  std::string name() const {
    std::ostringstream o;
    o << impl_name(impl) << "_B" << B << "_Sq" << Sq << "_Sk" << Sk << "_H" << H << "x" << Hkv << "_D" << D
      << (causal ? "_causal" : "") << (wl >= 0 || wr >= 0 ? "_win" + std::to_string(wl) + "," + std::to_string(wr) : "")
      << (softcap > 0 ? "_cap" : "") << "_" << dtype_name(dtype) << (varlen.empty() ? "" : "_varlen")
      << (pad ? "_pad" + std::to_string(pad) : "");
    return o.str();
  }
};

// gtest prints a parameter with this instead of a hex dump of its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

void run_case(const Case& c, uint32_t seed, const std::optional<Tuning>& tuning = std::nullopt) {
  SCOPED_TRACE(c.name());
  std::mt19937 rng(seed);
  int64_t B = c.B, Sq = c.Sq, Sk = c.Sk;
  std::vector<int32_t> cu_q, cu_k;
  AttentionOptions opts;
  if (!c.varlen.empty()) {
    fk_test::varlen_offsets(c.varlen, &cu_q, &cu_k);
    B = 1;
    Sq = cu_q.back();
    Sk = cu_k.back();
    opts.num_seqs = int64_t(c.varlen.size());
  }
  opts.causal = c.causal;
  opts.window_left = c.wl;
  opts.window_right = c.wr;
  opts.softcap = c.softcap;
  opts.check_finite = false;
  opts.tuning = tuning;  // the kernel path (unset: the process default)

  HostTensor q(c.dtype, {B, Sq, c.H, c.D}), k(c.dtype, {B, Sk, c.Hkv, c.D}), v(c.dtype, {B, Sk, c.Hkv, c.D}),
      dout(c.dtype, {B, Sq, c.H, c.D});
  q.fill_random(rng, -1.5, 1.5);
  k.fill_random(rng, -1.5, 1.5);
  v.fill_random(rng);
  dout.fill_random(rng);

  // f64 reference on the CPU, on exactly the values the GPU sees.
  HostTensor q64 = to_f64(q), k64 = to_f64(k), v64 = to_f64(v), do64 = to_f64(dout);
  HostTensor o64(DType::f64, {B, Sq, c.H, c.D}), lse64(DType::f32, {B, c.H, Sq});
  HostTensor dq64(DType::f64, {B, Sq, c.H, c.D}), dk64(DType::f64, {B, Sk, c.Hkv, c.D}), dv64(DType::f64, {B, Sk, c.Hkv, c.D});
  AttentionOptions ro = opts;
  ro.impl = AttentionImpl::reference;
  if (!c.varlen.empty()) {
    ro.cu_seqlens_q = cu_q.data();
    ro.cu_seqlens_k = cu_k.data();
  }
  attention_forward(q64.view, k64.view, v64.view, o64.view, lse64.view, ro);
  if (c.backward) attention_backward(do64.view, q64.view, k64.view, v64.view, o64.view, lse64.view, dq64.view, dk64.view, dv64.view, ro);

  DevTensor dq_, dk_, dv_, dq, dk, dv, dd, dO, dl;
  dq_.alloc(c.dtype, {B, Sq, c.H, c.D}, c.pad);
  dk_.alloc(c.dtype, {B, Sk, c.Hkv, c.D}, c.pad);
  dv_.alloc(c.dtype, {B, Sk, c.Hkv, c.D}, c.pad);
  dO.alloc(c.dtype, {B, Sq, c.H, c.D}, c.pad);
  dl.alloc(DType::f32, {B, c.H, Sq});
  dd.alloc(c.dtype, {B, Sq, c.H, c.D}, c.pad);
  dq_.upload(q);
  dk_.upload(k);
  dv_.upload(v);
  dd.upload(dout);
  dO.poison();
  dl.poison();
  int32_t* dcu = nullptr;
  if (!c.varlen.empty()) {
    CK(cudaMalloc(&dcu, (cu_q.size() + cu_k.size()) * 4));
    CK(cudaMemcpy(dcu, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcu + cu_q.size(), cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice));
    opts.cu_seqlens_q = dcu;
    opts.cu_seqlens_k = dcu + cu_q.size();
  }
  opts.impl = c.impl;
  opts.tuning = tuning;
  OpCost cost;
  attention_forward(dq_.view, dk_.view, dv_.view, dO.view, dl.view, opts, &cost);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  HostTensor o(c.dtype, {B, Sq, c.H, c.D}), lse(DType::f32, {B, c.H, Sq});
  dO.download(&o);
  dl.download(&lse);
  EXPECT_LT(rel_error(o, o64), 1e-2) << "o, kernel " << cost.kernel;
  EXPECT_LT(rel_error(lse, lse64), 1e-2) << "lse, kernel " << cost.kernel;
  EXPECT_FALSE(cost.kernel.empty());
  // Which decode path ran (check.sh collects these lines: the member, the split count and the merge).
  if (cost.kernel.find(".decode.") != std::string::npos)
    std::printf("decode path: %s %s\n", c.name().c_str(), cost.kernel.c_str());

  if (c.backward) {
    dq.alloc(c.dtype, {B, Sq, c.H, c.D}, c.pad);
    dk.alloc(c.dtype, {B, Sk, c.Hkv, c.D}, c.pad);
    dv.alloc(c.dtype, {B, Sk, c.Hkv, c.D}, c.pad);
    dq.poison();
    dk.poison();
    dv.poison();
    attention_backward(dd.view, dq_.view, dk_.view, dv_.view, dO.view, dl.view, dq.view, dk.view, dv.view, opts, &cost);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    HostTensor gq(c.dtype, {B, Sq, c.H, c.D}), gk(c.dtype, {B, Sk, c.Hkv, c.D}), gv(c.dtype, {B, Sk, c.Hkv, c.D});
    dq.download(&gq);
    dk.download(&gk);
    dv.download(&gv);
    EXPECT_LT(rel_error(gq, dq64), 2e-2) << "dq, kernel " << cost.kernel;
    EXPECT_LT(rel_error(gk, dk64), 2e-2) << "dk, kernel " << cost.kernel;
    EXPECT_LT(rel_error(gv, dv64), 2e-2) << "dv, kernel " << cost.kernel;
    // Which backward ran (tools/gpu/bwd_d256.sh and bwd_ws.sh count these lines per kernel).
    if (c.impl == AttentionImpl::flash) std::printf("bwd path: %s %s\n", c.name().c_str(), cost.kernel.c_str());
  }
  if (dcu) CK(cudaFree(dcu));
}

std::vector<Case> grid() {
  std::vector<Case> g;
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t D : {64, 128, 256})
      for (bool causal : {false, true}) g.push_back({2, 128, 128, 4, 4, D, causal, -1, -1, 0, dt});
  for (int64_t D : {8, 40, 96, 200}) g.push_back({1, 77, 90, 2, 1, D, true});
  for (bool causal : {false, true}) {
    g.push_back({2, 129, 257, 4, 2, 64, causal});
    g.push_back({1, 200, 100, 4, 4, 128, causal});  // causal: rows i < 100 see no key
    g.push_back({1, 300, 300, 8, 1, 128, causal});  // MQA
    g.push_back({1, 100, 333, 6, 2, 256, causal});
  }
  g.push_back({1, 256, 256, 4, 2, 64, false, 32, 16});
  g.push_back({1, 256, 300, 4, 4, 128, true, 64, -1});
  g.push_back({1, 200, 300, 4, 2, 128, true, -1, -1, 4.0f});  // prefill d128 with softcap (Hopper forward)
  g.push_back({2, 96, 160, 4, 2, 64, true, -1, -1, 5.0f});
  g.push_back({1, 128, 128, 2, 2, 256, false, -1, -1, 3.0f, DType::f16});
  // d256 (and padded to it): the Hopper d256 backward's masks and edges (v16): a two-sided window, softcap with GQA,
  // more query rows than keys (rows that see none), a strided operand, varlen with empty sequences, a padded
  // head dim with softcap in f16.
  g.push_back({1, 200, 260, 4, 4, 256, false, 40, 17});
  g.push_back({2, 150, 150, 8, 2, 256, true, -1, -1, 4.0f});
  g.push_back({1, 190, 65, 2, 1, 256, true});
  {
    Case c{1, 70, 90, 4, 2, 256, true};
    c.pad = 8;
    g.push_back(c);
    Case v{1, 0, 0, 4, 2, 256, true};
    v.varlen = {{100, 120}, {0, 50}, {37, 37}, {64, 0}, {130, 70}};
    g.push_back(v);
    v.causal = false;
    v.D = 136;
    v.softcap = 5.0f;
    v.dtype = DType::f16;
    g.push_back(v);
  }
  {
    Case c{1, 0, 0, 4, 2, 64, true};
    c.varlen = {{100, 120}, {0, 50}, {37, 37}, {64, 0}, {200, 180}};
    g.push_back(c);
    c.causal = false;
    c.D = 128;
    c.dtype = DType::f16;
    g.push_back(c);
    c.causal = false;  // d256 varlen, not causal (causal: above): the ws forward's sequence-boundary key tiles
    c.D = 256;
    c.dtype = DType::bf16;
    g.push_back(c);
  }
  g.push_back({1, 256, 300, 4, 2, 256, true, 64, -1});  // d256 window and GQA (the Hopper ws kernel at BN 64)
  // The warp-specialized backward's edges (v22, d64/d128): one query row, one key, odd lengths whose last query
  // tile and key tile are ragged (TMA zero fill past the tensor's end), GQA and MQA groups (several query heads per
  // CTA: the load ring's phases run on over heads), causal with nq != nk both ways (key tiles no query sees, rows
  // that see no key), a window with more steps than stages, varlen with empty sequences (the TMA rows of a packed
  // tensor run into the next sequence).
  g.push_back({1, 1, 1, 2, 1, 64});
  g.push_back({2, 1, 200, 4, 2, 128, true});
  g.push_back({1, 200, 1, 4, 4, 64, true});
  g.push_back({3, 131, 67, 6, 3, 128, false, -1, -1, 0, DType::f16});
  g.push_back({1, 197, 199, 8, 2, 64, false, -1, -1, 0, DType::f16});
  g.push_back({1, 70, 190, 8, 1, 128, true});
  g.push_back({1, 190, 70, 4, 2, 64, true});
  g.push_back({1, 183, 129, 4, 1, 128, false, 20, 45});
  {
    Case c{1, 0, 0, 6, 2, 128, true};
    c.varlen = {{0, 0}, {1, 1}, {130, 129}, {0, 7}, {65, 200}, {3, 0}};
    g.push_back(c);
    c.D = 64;
    c.causal = false;
    c.dtype = DType::f16;
    g.push_back(c);
  }
  // More work tiles than the H200's 132 SMs (160 each, forward only: the reference stays fast): the persistent ws grid
  // (by default at d128; the sm90ws_persist paths at d64) runs a second tile on some CTAs, under a causal window with
  // GQA and an odd query length at d64, non-causal with a ragged last tile at d128.
  {
    Case c{1, 1000, 600, 20, 4, 64, true, 300, -1};
    c.backward = false;
    g.push_back(c);
    Case n{2, 520, 400, 16, 16, 128};
    n.backward = false;
    g.push_back(n);
  }
  // Decode (seqlen_q <= 16): split-KV with the GQA group packed in the row tile.
  g.push_back({2, 1, 4097, 8, 2, 128});
  g.push_back({1, 4, 2000, 8, 8, 64, true});
  g.push_back({1, 16, 1024, 32, 4, 64, true});
  g.push_back({1, 3, 3000, 4, 1, 256, true, 500, -1});
  g.push_back({1, 1, 777, 4, 4, 96, false, -1, -1, 4.0f, DType::f16});
  // Decode (mma kernel) shapes: one KV head at d256 (Gemma-like; ~125 splits, merged by launch_split_combine), GQA,
  // a window with 16 packed rows, two m-tiles with a padded head dim, batch > 1.
  g.push_back({1, 1, 4000, 8, 1, 256});
  g.push_back({1, 1, 4000, 8, 1, 256, false, -1, -1, 0, DType::f16});
  g.push_back({1, 1, 1000, 8, 1, 256, false, -1, -1, 0, DType::f16});  // (d256 clusters on the decode_cluster path)
  g.push_back({1, 1, 5000, 32, 8, 128, false, -1, -1, 0, DType::f16});
  g.push_back({1, 2, 5000, 16, 2, 128, true, 1000, -1});
  g.push_back({1, 5, 2500, 8, 2, 200, true});
  g.push_back({3, 1, 3000, 32, 8, 64, false, -1, -1, 30.0f});
  {
    Case c{1, 0, 0, 8, 2, 128, true};
    c.varlen = {{1, 1500}, {1, 0}, {3, 700}, {2, 2}};
    g.push_back(c);
  }
  // Decode shapes for the cluster merge (the decode_cluster path below; the split/cluster counts are
  // those of the host model for 132 SMs, 14-16 splits when 8 clusters of 16 do not fit): 8 tiles of 32/8 heads
  // with 512 key blocks (clusters of 14-16 splits, every split with keys); 32 packed rows in two m-tiles; batch 2
  // with a window (clusters of 7-8); a varlen batch with an empty sequence (whole clusters leave early), a
  // sequence without keys and one with 3 key blocks (all or most ranks of its clusters idle), 16 rows per m-tile.
  g.push_back({1, 2, 8192, 32, 8, 128, true});
  g.push_back({1, 4, 4096, 32, 4, 128, false, -1, -1, 0, DType::f16});
  g.push_back({2, 3, 4096, 32, 8, 128, true, 3000, -1});
  {
    Case c{1, 0, 0, 16, 4, 64, true};
    c.varlen = {{4, 3000}, {0, 500}, {1, 0}, {2, 40}, {3, 1100}};
    g.push_back(c);
  }
  // Strided operands: padded head stride (aligned) and an odd one (repacked).
  {
    Case c{2, 100, 150, 4, 2, 64, true};
    c.pad = 8;
    g.push_back(c);
    c.pad = 3;
    g.push_back(c);
  }
  // The cuBLAS standard path.
  for (bool causal : {false, true}) {
    Case c{2, 129, 200, 4, 2, 64, causal};
    c.impl = AttentionImpl::standard;
    g.push_back(c);
  }
  {
    Case c{1, 0, 0, 4, 4, 128, true, 50, -1, 4.0f, DType::f16};
    c.varlen = {{60, 80}, {0, 10}, {30, 0}, {90, 90}};
    c.impl = AttentionImpl::standard;
    g.push_back(c);
  }
  // One batched GEMM per product over every (sequence, head) pair: GQA groups of 4, MQA, strided operands.
  {
    Case c{3, 37, 61, 8, 2, 64, false};
    c.impl = AttentionImpl::standard;
    g.push_back(c);
    Case m{2, 33, 70, 6, 1, 128, true, -1, -1, 0, DType::f16};
    m.impl = AttentionImpl::standard;
    g.push_back(m);
    Case p{2, 100, 150, 4, 2, 64, true};
    p.pad = 8;
    p.impl = AttentionImpl::standard;
    g.push_back(p);
    Case v{1, 0, 0, 8, 2, 64, false};
    v.varlen = {{17, 40}, {5, 0}, {0, 9}, {33, 33}};
    v.impl = AttentionImpl::standard;
    g.push_back(v);
  }
  return g;
}

class CudaAttentionGrid : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionGrid, MatchesReference) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  run_case(GetParam(), 1234u + uint32_t(std::hash<std::string>{}(GetParam().name()) & 0xffff));
}

INSTANTIATE_TEST_SUITE_P(Grid, CudaAttentionGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.name();
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Every kernel path of the dispatch in one run: the grid again under each Tuning that changes the choice (formerly
// one run of the binary per environment variable value in tools/gpu/check.sh).
struct Path {
  const char* name;
  Tuning tuning;
  bool forward_only = false;  // the path changes only the forward: the backward's reference is skipped
};
std::vector<Path> paths() {
  std::vector<Path> v;
  Tuning t;
  t.sm90 = false;
  v.push_back({"sm80", t});
  for (int cfg = 1; cfg <= 3; ++cfg) {
    t = Tuning{};
    t.sm90_fwd_config = cfg;
    v.push_back({cfg == 1 ? "sm90cfg1" : cfg == 2 ? "sm90cfg2" : "sm90cfg3", t});
  }
  t = Tuning{};
  t.sm90_fwd_config = 3;
  t.sm90_ws_pingpong = false;
  v.push_back({"sm90cfg3_nopingpong", t});
  // The persistent ws grid forced at d64/d128 (v19): one CTA per SM (fewer tiles than SMs: one tile per CTA), and
  // at most 3 CTAs (every CTA runs several tiles: the K/V ring's phases and the Q prefetch across tiles).
  t = Tuning{};
  t.sm90_fwd_config = 3;
  t.sm90_ws_persist = 1 << 20;
  t.sm90_ws_overlap = 1;  // v23's epilogue order on every case (auto takes it on short causal grids only)
  t.sm90_ws_dense = 0;    // the general kernel on the dense cases too (the sm90ws_dense paths below run v27's)
  v.push_back({"sm90ws_persist", t, true});
  t.sm90_ws_persist = 3;
  v.push_back({"sm90ws_persist3", t, true});
  // The same grids with v19's epilogue order (FLASHKIT_SM90_WS_OVERLAP=0); the two above run v23's, the epilogue
  // under the next tile's first product.
  t.sm90_ws_overlap = 0;
  t.sm90_ws_persist = 1 << 20;
  v.push_back({"sm90ws_persist_serialepi", t, true});
  t.sm90_ws_persist = 3;
  v.push_back({"sm90ws_persist3_serialepi", t, true});
  // v23's order with O written by TMA stores where a warpgroup's 64 rows are one head's queries inside the
  // sequence (FLASHKIT_SM90_WS_OVERLAP=2, v23b): the STG loops remain for packed GQA groups and last partial tiles.
  t.sm90_ws_overlap = 2;
  t.sm90_ws_persist = 1 << 20;
  v.push_back({"sm90ws_persist_tma", t, true});
  t.sm90_ws_persist = 3;
  v.push_back({"sm90ws_persist3_tma", t, true});
  // v27's DENSE variant (FLASHKIT_SM90_WS_DENSE=1) on the same grids, TMA-store and serial epilogues: the grid's
  // fixed-length cases without window, softcap or padded head dim take it; the others fall back to the general
  // kernel and must pass as well.
  t.sm90_ws_dense = 1;
  t.sm90_ws_persist = 1 << 20;
  v.push_back({"sm90ws_dense_tma", t, true});
  t.sm90_ws_persist = 3;
  v.push_back({"sm90ws_dense3_tma", t, true});
  t.sm90_ws_overlap = 0;
  t.sm90_ws_persist = 1 << 20;
  v.push_back({"sm90ws_dense_serialepi", t, true});
  t.sm90_ws_persist = 3;
  v.push_back({"sm90ws_dense3_serialepi", t, true});
  t = Tuning{};
  t.sm90_fwd_config = 3;
  t.sm90_ws_bn = 176;
  v.push_back({"sm90cfg3_bn176", t});
  t.sm90_ws_bn = 192;
  v.push_back({"sm90cfg3_bn192", t});
  t = Tuning{};
  t.sm90_bwd_config = 1;
  v.push_back({"sm90bwdcfg1", t});
  // The cp.async Hopper backwards (v6; v16 at d256) where the warp-specialized ones (v22; v24 at d256) are the
  // default, d128 and d256 (FLASHKIT_SM90_BWD_WS=0), and v22 where v6 is, d64 (FLASHKIT_SM90_BWD_WS=1; the d128 and
  // d256 cases run the default's kernels again).
  t = Tuning{};
  t.sm90_bwd_ws = 0;
  v.push_back({"sm90bwd_v6", t});
  t.sm90_bwd_ws = 1;
  v.push_back({"sm90bwd_ws", t});
  t = Tuning{};
  t.decode_combine = DecodeCombine::cluster;
  t.decode_narrow = 0;  // the wide CTA's clusters (the narrow CTA clusters by default at small K/V, and below)
  v.push_back({"decode_cluster", t});
  t = Tuning{};
  t.decode_pdl = false;
  t.decode_max_splits = 64;
  v.push_back({"decode_nopdl_splits64", t});
  t = Tuning{};
  t.decode_narrow = 1;  // the narrow decode CTA (4 warps, 2-3 an SM) wherever it applies
  v.push_back({"decode_narrow", t, true});
  t.decode_combine = DecodeCombine::cluster;  // the narrow CTA with the cluster merge (one launch a call)
  v.push_back({"decode_narrow_cluster", t, true});
  // The counter merge (v31) where the default launches the combine: the narrow CTA wherever it applies, and the wide.
  t.decode_combine = DecodeCombine::last;
  v.push_back({"decode_narrow_last", t, true});
  t.decode_narrow = 0;
  v.push_back({"decode_wide_last", t, true});
  return v;
}

void PrintTo(const Path& p, std::ostream* os) { *os << p.name; }

class CudaAttentionPaths : public ::testing::TestWithParam<std::tuple<Path, Case>> {};

TEST_P(CudaAttentionPaths, MatchesReference) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto& [path, grid_case] = GetParam();
  SCOPED_TRACE(path.name);
  Case c = grid_case;
  if (path.forward_only) c.backward = false;
  run_case(c, 1234u + uint32_t(std::hash<std::string>{}(c.name()) & 0xffff), path.tuning);
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaAttentionPaths, ::testing::Combine(::testing::ValuesIn(paths()), ::testing::ValuesIn(grid())),
                         [](const ::testing::TestParamInfo<std::tuple<Path, Case>>& i) {
                           std::string n = std::string(std::get<0>(i.param).name) + "_" + std::get<1>(i.param).name();
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Forward is deterministic (no atomics): two runs must agree bit for bit (a moving result is a race).
TEST(CudaAttention, ForwardDeterministic) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  HostTensor q(DType::bf16, {2, 300, 4, 128}), k(DType::bf16, {2, 300, 4, 128}), v(DType::bf16, {2, 300, 4, 128});
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  DevTensor dq, dk, dv, o1, o2, l;
  dq.alloc(DType::bf16, {2, 300, 4, 128});
  dk.alloc(DType::bf16, {2, 300, 4, 128});
  dv.alloc(DType::bf16, {2, 300, 4, 128});
  o1.alloc(DType::bf16, {2, 300, 4, 128});
  o2.alloc(DType::bf16, {2, 300, 4, 128});
  l.alloc(DType::f32, {2, 4, 300});
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  AttentionOptions opts;
  opts.causal = true;
  attention_forward(dq.view, dk.view, dv.view, o1.view, l.view, opts);
  attention_forward(dq.view, dk.view, dv.view, o2.view, l.view, opts);
  CK(cudaDeviceSynchronize());
  HostTensor a(DType::bf16, {2, 300, 4, 128}), b(DType::bf16, {2, 300, 4, 128});
  o1.download(&a);
  o2.download(&b);
  EXPECT_EQ(0, std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()));
}

// v27: the persistent ws forward's DENSE variant computes what the general kernel does, bit for bit (O and LSE), on
// dense calls: causal with more keys than queries and rows that see none, GQA, non-causal with ragged last tiles,
// d64 and d128, bf16 and f16, one CTA per SM and 3 CTAs (several tiles each), both epilogues. The cost record names
// the variant (a Hopper device with sm_90a code; skipped elsewhere, where neither runs).
TEST(CudaAttention, WsDenseBitIdenticalToGeneral) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t b, sq, sk, h, hkv, d;
    bool causal;
    DType dt;
  };
  const Shape shapes[] = {{2, 300, 400, 4, 2, 128, true, DType::bf16}, {1, 257, 200, 6, 3, 64, true, DType::f16},
                          {3, 131, 131, 4, 4, 128, false, DType::bf16}, {2, 200, 330, 2, 1, 64, false, DType::bf16},
                          {1, 190, 70, 4, 2, 128, true, DType::f16}};
  std::mt19937 rng(27);
  int ran_dense = 0;
  for (const Shape& sh : shapes) {
    HostTensor q(sh.dt, {sh.b, sh.sq, sh.h, sh.d}), k(sh.dt, {sh.b, sh.sk, sh.hkv, sh.d}),
        v(sh.dt, {sh.b, sh.sk, sh.hkv, sh.d});
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    DevTensor dq, dk, dv;
    dq.alloc(sh.dt, {sh.b, sh.sq, sh.h, sh.d});
    dk.alloc(sh.dt, {sh.b, sh.sk, sh.hkv, sh.d});
    dv.alloc(sh.dt, {sh.b, sh.sk, sh.hkv, sh.d});
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    for (int overlap : {2, 0})
      for (int ctas : {1 << 20, 3}) {
        HostTensor o_host[2] = {HostTensor(sh.dt, {sh.b, sh.sq, sh.h, sh.d}), HostTensor(sh.dt, {sh.b, sh.sq, sh.h, sh.d})};
        HostTensor l_host[2] = {HostTensor(DType::f32, {sh.b, sh.h, sh.sq}), HostTensor(DType::f32, {sh.b, sh.h, sh.sq})};
        std::string kernels[2];
        for (int dense = 0; dense < 2; ++dense) {
          DevTensor o, l;
          o.alloc(sh.dt, {sh.b, sh.sq, sh.h, sh.d});
          l.alloc(DType::f32, {sh.b, sh.h, sh.sq});
          o.poison();
          l.poison();
          Tuning t;
          t.sm90_fwd_config = 3;
          t.sm90_ws_persist = ctas;
          t.sm90_ws_overlap = overlap;
          t.sm90_ws_dense = dense;
          AttentionOptions opts;
          opts.causal = sh.causal;
          opts.tuning = t;
          OpCost cost;
          attention_forward(dq.view, dk.view, dv.view, o.view, l.view, opts, &cost);
          CK(cudaDeviceSynchronize());
          o.download(&o_host[dense]);
          l.download(&l_host[dense]);
          kernels[dense] = cost.kernel;
        }
        SCOPED_TRACE(kernels[0] + " vs " + kernels[1]);
        EXPECT_EQ(kernels[0].find(".dense"), std::string::npos);
        if (kernels[1].find(".persistent") == std::string::npos) continue;  // not a Hopper device with sm_90a code
        EXPECT_NE(kernels[1].find(".dense"), std::string::npos);
        ++ran_dense;
        EXPECT_EQ(0, std::memcmp(o_host[0].bytes.data(), o_host[1].bytes.data(), o_host[0].bytes.size()));
        EXPECT_EQ(0, std::memcmp(l_host[0].bytes.data(), l_host[1].bytes.data(), l_host[0].bytes.size()));
      }
  }
  std::printf("dense runs compared: %d\n", ran_dense);
}

// Decode with the split merge inside the kernel (batch 1, GQA, 5000 keys: many splits): captured into a CUDA graph
// on a side stream and replayed twice, then run eagerly on two streams at once. Every output must equal the eager
// run's bit for bit: the merge's arrival counters belong to each call, so no replay or concurrent call can make a
// tile merge early or never.
void decode_graph_replay_and_concurrent_streams(const Tuning& tuning, const char* merge) {
  std::mt19937 rng(11);
  const int64_t Sk = 5000, H = 32, Hkv = 8, D = 128;
  HostTensor q(DType::bf16, {1, 1, H, D}), k(DType::bf16, {1, Sk, Hkv, D}), v(DType::bf16, {1, Sk, Hkv, D});
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  DevTensor dq, dk, dv, o_ref, o_graph, o_a, o_b, l_ref, l_graph, l_a, l_b;
  dq.alloc(DType::bf16, {1, 1, H, D});
  dk.alloc(DType::bf16, {1, Sk, Hkv, D});
  dv.alloc(DType::bf16, {1, Sk, Hkv, D});
  for (DevTensor* o : {&o_ref, &o_graph, &o_a, &o_b}) o->alloc(DType::bf16, {1, 1, H, D});
  for (DevTensor* l : {&l_ref, &l_graph, &l_a, &l_b}) l->alloc(DType::f32, {1, H, 1});
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  AttentionOptions opts;
  opts.check_finite = false;
  opts.tuning = tuning;
  OpCost cost;
  attention_forward(dq.view, dk.view, dv.view, o_ref.view, l_ref.view, opts, &cost);
  CK(cudaDeviceSynchronize());
  EXPECT_NE(cost.kernel.find("splits"), std::string::npos) << cost.kernel;  // the split path is what this tests
  EXPECT_NE(cost.kernel.find(merge), std::string::npos) << cost.kernel;
  std::printf("decode path: %s\n", cost.kernel.c_str());  // e.g. .cluster16 with Tuning::decode_combine = cluster
  HostTensor ref(DType::bf16, {1, 1, H, D}), got(DType::bf16, {1, 1, H, D});
  o_ref.download(&ref);

  cudaStream_t s1 = nullptr, s2 = nullptr;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  set_cuda_stream(s1);
  o_graph.poison();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
  attention_forward(dq.view, dk.view, dv.view, o_graph.view, l_graph.view, opts);
  CK(cudaStreamEndCapture(s1, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    o_graph.poison();
    CK(cudaGraphLaunch(exec, s1));
    CK(cudaStreamSynchronize(s1));
    o_graph.download(&got);
    EXPECT_EQ(0, std::memcmp(ref.bytes.data(), got.bytes.data(), ref.bytes.size())) << "graph replay " << replay;
  }
  o_a.poison();
  o_b.poison();
  attention_forward(dq.view, dk.view, dv.view, o_a.view, l_a.view, opts);  // on s1
  set_cuda_stream(s2);
  attention_forward(dq.view, dk.view, dv.view, o_b.view, l_b.view, opts);
  CK(cudaGraphLaunch(exec, s2));  // a replay concurrent with both
  set_cuda_stream(nullptr);
  CK(cudaDeviceSynchronize());
  for (DevTensor* o : {&o_a, &o_b, &o_graph}) {
    o->download(&got);
    EXPECT_EQ(0, std::memcmp(ref.bytes.data(), got.bytes.data(), ref.bytes.size()));
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(s1));
  CK(cudaStreamDestroy(s2));
}

TEST(CudaAttention, DecodeGraphReplayAndConcurrentStreams) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  decode_graph_replay_and_concurrent_streams(Tuning{}, ".splits");
}

// The counter merge (FLASHKIT_DECODE_COMBINE=last, v31): its arrival counters are slices of a zeroed arena, one per
// stream for eager calls and one per captured call; a wrong slice or a counter left non-zero merges a tile early or
// never (a wrong or poisoned output).
TEST(CudaAttention, DecodeCounterMergeGraphReplayAndConcurrentStreams) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  Tuning t;
  t.decode_combine = DecodeCombine::last;
  decode_graph_replay_and_concurrent_streams(t, ".counter");
}

// A forward on q = k = v of this dtype and shape must fail with Status::unsupported and a message containing `words`.
void expect_unsupported_forward(DType dt, int64_t B, int64_t S, int64_t H, int64_t D, const std::string& words) {
  DevTensor q, o, l;
  q.alloc(dt, {B, S, H, D});
  o.alloc(dt, {B, S, H, D});
  l.alloc(DType::f32, {B, H, S});
  AttentionOptions opts;
  opts.check_finite = false;
  try {
    attention_forward(q.view, q.view, q.view, o.view, l.view, opts);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// More sequences than the kernels' grid holds: a clear error naming the limit, not a launch failure.
TEST(CudaAttention, RejectsTooManySequences) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_unsupported_forward(DType::bf16, 65536, 1, 1, 8, "65535 sequences");
}

TEST(CudaAttention, RejectsF32) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_unsupported_forward(DType::f32, 1, 16, 2, 64, "bf16");
}

// ---- Non-finite input (include/flashkit/attention.hpp, "Non-finite input"), check_finite off ----------------------
// Contract B (attention.hpp). Where the answer is exact -- a NaN query row, the backward's rule (a row that sees keys
// with an lse of NaN/+-inf: dq row NaN, dk/dv of its keys NaN) -- the GPU must equal the f64 reference in where it is
// NaN and be close elsewhere; the forward's other cases are checked row by row against the rule (run_rule_case).

// Same NaN positions and infinities as `want`; finite elements within `tol` relative.
void expect_same_nonfinite(const HostTensor& got, const HostTensor& want, double tol, const std::string& what) {
  double num = 0, den = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double x = got.get(i), y = want.get(i);
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) {
      if (!((std::isnan(x) && std::isnan(y)) || x == y) && bad++ < 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << x << ", want " << y;
      continue;
    }
    num += (x - y) * (x - y);
    den += y * y;
  }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_LE(den == 0 ? std::sqrt(num) : std::sqrt(num / den), tol) << what;
}

struct NonFiniteCase {
  int64_t Sq, Sk, H, Hkv, D;
  bool causal;
  AttentionImpl impl;
  int what;  // what to poison: 0 a q element, 1 a whole q row
};

void run_nonfinite_case(const NonFiniteCase& c, const std::optional<Tuning>& tuning = std::nullopt) {
  const int64_t B = 1;
  SCOPED_TRACE(std::string(impl_name(c.impl)) + " Sq=" + std::to_string(c.Sq) + " what=" + std::to_string(c.what) +
               (c.causal ? " causal" : ""));
  std::mt19937 rng(31);
  const DType dt = DType::bf16;
  HostTensor q(dt, {B, c.Sq, c.H, c.D}), k(dt, {B, c.Sk, c.Hkv, c.D}), v(dt, {B, c.Sk, c.Hkv, c.D}),
      dout(dt, {B, c.Sq, c.H, c.D});
  for (HostTensor* t : {&q, &k, &v, &dout}) t->fill_random(rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t s = c.Sq - 1;
  if (c.what == 0) q.set((s * c.H + 1) * c.D + 3, nan);
  else
    for (int64_t d = 0; d < c.D; ++d) q.set((0 * c.H + 0) * c.D + d, nan);
  AttentionOptions opts;
  opts.causal = c.causal;
  opts.check_finite = false;
  // The CPU reference (which implements the rule) on the same bf16 values.
  HostTensor o_ref(dt, {B, c.Sq, c.H, c.D}), lse_ref(DType::f32, {B, c.H, c.Sq});
  AttentionOptions ro = opts;
  ro.impl = AttentionImpl::reference;
  attention_forward(q.view, k.view, v.view, o_ref.view, lse_ref.view, ro);

  DevTensor dq_, dk_, dv_, dO, dl;
  dq_.alloc(dt, {B, c.Sq, c.H, c.D});
  dk_.alloc(dt, {B, c.Sk, c.Hkv, c.D});
  dv_.alloc(dt, {B, c.Sk, c.Hkv, c.D});
  dO.alloc(dt, {B, c.Sq, c.H, c.D});
  dl.alloc(DType::f32, {B, c.H, c.Sq});
  dq_.upload(q);
  dk_.upload(k);
  dv_.upload(v);
  dO.poison();
  dl.poison();
  opts.impl = c.impl;
  opts.tuning = tuning;
  OpCost cost;
  attention_forward(dq_.view, dk_.view, dv_.view, dO.view, dl.view, opts, &cost);
  CK(cudaDeviceSynchronize());
  HostTensor o(dt, {B, c.Sq, c.H, c.D}), lse(DType::f32, {B, c.H, c.Sq});
  dO.download(&o);
  dl.download(&lse);
  expect_same_nonfinite(o, o_ref, 2e-2, "o, kernel " + cost.kernel);
  expect_same_nonfinite(lse, lse_ref, 1e-2, "lse, kernel " + cost.kernel);
}

// Contract B of attention.hpp ("Non-finite input"). A NaN in q makes the row NaN, o and lse, on every kernel path
// (the finding of the hardening issue: a NaN query row came out as if masked, o = 0 and lse = -inf).
TEST(CudaAttention, NonFiniteQueryGivesNaNRow) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<Path> all = paths();
  all.insert(all.begin(), Path{"default", Tuning{}});
  for (const Path& path : all) {
    SCOPED_TRACE(path.name);
    for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::standard})
      for (int64_t sq : {int64_t(1), int64_t(4), int64_t(200)})
        for (bool causal : {false, true})
          for (int what = 0; what < 2; ++what) run_nonfinite_case({sq, 300, 4, 2, 64, causal, impl, what}, path.tuning);
  }
}

// Contract B on every forward path: each row's class (NaN row, every score -inf, finite lse with o non-finite exactly
// in the columns of a visible non-finite v) computed from the inputs alone (nonfinite_rule.hpp, with the latitude
// attention.hpp gives CUDA for a masked key's non-finite v), finite values against the f64 reference.
enum Poison : int {
  kQNaN, kQPosInf, kQNegInf, kKNaN, kKPosInf, kKNegInf, kVNaN, kVPosInf, kVNegInf,  // one element
  kScorePosInf, kEveryScoreNegInf, kOneScoreNegInf,  // finite inputs whose f32 scores overflow
};
const char* poison_name(int p) {
  static const char* n[] = {"q NaN", "q +inf", "q -inf", "k NaN", "k +inf", "k -inf", "v NaN", "v +inf", "v -inf",
                            "a score +inf (overflow)", "every score -inf (overflow)", "one score -inf (overflow)"};
  return n[p];
}

struct RuleCase {
  int64_t Sq, Sk, H, Hkv, D;
  bool causal;
  int64_t wl;  // window left (-1: none)
  int poison;
  std::string name() const {
    std::ostringstream o;
    o << "Sq" << Sq << " Sk" << Sk << " H" << H << "x" << Hkv << " d" << D << (causal ? " causal" : "")
      << (wl >= 0 ? " window" + std::to_string(wl) : "") << ", " << poison_name(poison);
    return o.str();
  }
};

// The forward paths of paths() (the backward's configuration adds nothing here), and the decode kernel with one split.
std::vector<Path> forward_paths() {
  std::vector<Path> v{{"default", Tuning{}}};
  for (const Path& p : paths())
    if (std::string(p.name).find("bwd") == std::string::npos) v.push_back(p);
  Tuning t;
  t.decode_max_splits = 1;
  v.push_back({"decode_one_split", t});
  return v;
}

void run_rule_case(const RuleCase& c) {
  SCOPED_TRACE(c.name());
  const DType dt = DType::bf16;
  std::mt19937 rng(1000u + uint32_t(c.poison) * 7u + uint32_t(c.Sq + c.D));
  HostTensor q(dt, {1, c.Sq, c.H, c.D}), k(dt, {1, c.Sk, c.Hkv, c.D}), v(dt, {1, c.Sk, c.Hkv, c.D});
  for (HostTensor* t : {&q, &k, &v}) t->fill_random(rng);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto qi = [&](int64_t s, int64_t h, int64_t d) { return (s * c.H + h) * c.D + d; };
  auto ki = [&](int64_t j, int64_t h, int64_t d) { return (j * c.Hkv + h) * c.D + d; };
  // The last row; a key the causal mask hides from the early rows; a key inside the last row's window.
  const int64_t s = c.Sq - 1, j = c.Sk - 2, e = 37, jo = c.Sk - 5;
  switch (c.poison) {
    case kQNaN: q.set(qi(s, 1, e), nan); break;
    case kQPosInf: q.set(qi(s, 1, e), inf); break;
    case kQNegInf: q.set(qi(s, 1, e), -inf); break;
    case kKNaN: k.set(ki(j, 0, e), nan); break;
    case kKPosInf: k.set(ki(j, 0, e), inf); break;
    case kKNegInf: k.set(ki(j, 0, e), -inf); break;
    case kVNaN: v.set(ki(j, 0, e), nan); break;
    case kVPosInf: v.set(ki(j, 0, e), inf); break;
    case kVNegInf: v.set(ki(j, 0, e), -inf); break;
    case kScorePosInf:
    case kOneScoreNegInf: {
      // One product overflows: q[s, 0, e0] * k[jo, 0, e0] = +-1e40, +-inf in f32 also after the scale (the kernels
      // round q.k before scaling, the reference after: 9e38 / 8 would be finite there). Element e0 is 0 in every
      // other q row of kv head 0's heads and in every other key, so the other scores stay moderate: the flash kernels
      // evaluate e^(s - m) as one FMA on log2-scaled scores, exact only while |s| is far below ~1e4 (attention.hpp).
      const int64_t e0 = 5;
      for (int64_t i = 0; i < c.Sq; ++i)
        for (int64_t h = 0; h < c.H / c.Hkv; ++h) q.set(qi(i, h, e0), 0.0);
      for (int64_t jj = 0; jj < c.Sk; ++jj) k.set(ki(jj, 0, e0), 0.0);
      q.set(qi(s, 0, e0), 1e20);
      k.set(ki(jo, 0, e0), c.poison == kScorePosInf ? 1e20 : -1e20);
      break;
    }
    case kEveryScoreNegInf:  // every score of row s, head 0 -inf in f32; the other rows of kv head 0 score exactly 0
      for (int64_t i = 0; i < c.Sq; ++i)
        for (int64_t h = 0; h < c.H / c.Hkv; ++h)
          for (int64_t d = 0; d < c.D; ++d) q.set(qi(i, h, d), i == s && h == 0 ? 3e19 : 0.0);
      for (int64_t jj = 0; jj < c.Sk; ++jj)
        for (int64_t d = 0; d < c.D; ++d) k.set(ki(jj, 0, d), -3e19 * (1 + 0.25 * double(jj % 5)));
      break;
    default: break;
  }
  AttentionOptions opts;
  opts.causal = c.causal;
  opts.window_left = c.wl;
  opts.check_finite = false;
  // The rule per row and the f64 reference (attention_row_f64) on exactly the values the GPU sees.
  const fk_test::MaskSpec mask{c.causal, c.wl, c.causal ? 0 : -1};
  const double scale = 1.0 / std::sqrt(double(c.D));
  std::vector<fk_test::RowRule> rules;
  std::vector<int64_t> classes(4, 0);
  for (int64_t h = 0; h < c.H; ++h)
    for (int64_t i = 0; i < c.Sq; ++i) {
      rules.push_back(fk_test::row_rule(q, k, v, c.H, c.Hkv, c.D, {0, 0, c.Sq, c.Sk}, h, i, mask, scale, 0.0));
      ++classes[size_t(rules.back().cls)];
    }
  if (c.poison == kScorePosInf || c.poison == kQNaN) ASSERT_GT(classes[size_t(fk_test::RowClass::nan)], 0);
  if (c.poison == kEveryScoreNegInf) ASSERT_GT(classes[size_t(fk_test::RowClass::all_neg_inf)], 0);
  HostTensor o_ref(dt, {1, c.Sq, c.H, c.D}), lse_ref(DType::f32, {1, c.H, c.Sq});
  AttentionOptions ro = opts;
  ro.impl = AttentionImpl::reference;
  attention_forward(q.view, k.view, v.view, o_ref.view, lse_ref.view, ro);

  DevTensor dq_, dk_, dv_, dO, dl;
  dq_.alloc(dt, {1, c.Sq, c.H, c.D});
  dk_.alloc(dt, {1, c.Sk, c.Hkv, c.D});
  dv_.alloc(dt, {1, c.Sk, c.Hkv, c.D});
  dO.alloc(dt, {1, c.Sq, c.H, c.D});
  dl.alloc(DType::f32, {1, c.H, c.Sq});
  dq_.upload(q);
  dk_.upload(k);
  dv_.upload(v);
  std::vector<std::pair<Path, AttentionImpl>> runs;
  for (const Path& p : forward_paths()) runs.push_back({p, AttentionImpl::flash});
  runs.push_back({Path{"default", Tuning{}}, AttentionImpl::standard});
  for (const auto& [path, impl] : runs) {
    dO.poison();
    dl.poison();
    opts.impl = impl;
    opts.tuning = path.tuning;
    OpCost cost;
    attention_forward(dq_.view, dk_.view, dv_.view, dO.view, dl.view, opts, &cost);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    HostTensor o(dt, {1, c.Sq, c.H, c.D}), lse(DType::f32, {1, c.H, c.Sq});
    dO.download(&o);
    dl.download(&lse);
    const std::string where = std::string("path ") + path.name + ", kernel " + cost.kernel;
    int64_t bad = 0;
    double num = 0, den = 0, lse_err = 0;
    std::vector<double> row(static_cast<size_t>(c.D));
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Sq; ++i) {
        for (int64_t d = 0; d < c.D; ++d) {
          const double x = o.get(qi(i, h, d)), y = o_ref.get(qi(i, h, d));
          row[size_t(d)] = x;
          if (std::isfinite(x) && std::isfinite(y)) num += (x - y) * (x - y), den += y * y;
        }
        const double l = lse.get(h * c.Sq + i), lr = lse_ref.get(h * c.Sq + i);
        if (std::isfinite(l) && std::isfinite(lr)) lse_err = std::max(lse_err, std::fabs(l - lr) / std::max(1.0, std::fabs(lr)));
        const std::string err = fk_test::check_row(rules[size_t(h * c.Sq + i)], row.data(), l, c.D, true);
        if (!err.empty() && bad++ < 4) ADD_FAILURE() << where << ": head " << h << " row " << i << ": " << err;
      }
    EXPECT_EQ(bad, 0) << where << ": rows off the rule";
    EXPECT_LE(den == 0 ? std::sqrt(num) : std::sqrt(num / den), 3e-2) << where << ": finite o vs the f64 reference";
    EXPECT_LE(lse_err, 1e-2) << where << ": finite lse vs the f64 reference";
  }
}

// The shapes: decode (1 and 3 query rows: the decode kernel, one split, splits + combine, clusters) and the tiled
// forward (64 rows: sm_80, the Hopper configurations, the ws kernel), d64 and d128, causal and not, a window.
std::vector<RuleCase> rule_cases(std::initializer_list<int> poisons) {
  std::vector<RuleCase> v;
  for (int poison : poisons) {
    for (int64_t D : {int64_t(64), int64_t(128)}) {
      for (int64_t sq : {int64_t(1), int64_t(3), int64_t(64)})
        for (bool causal : {false, true}) v.push_back({sq, 300, 4, 2, D, causal, -1, poison});
      v.push_back({64, 300, 4, 2, D, true, 40, poison});
    }
  }
  return v;
}

TEST(CudaAttention, NonFiniteForward) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const RuleCase& c : rule_cases({kQNaN, kQPosInf, kQNegInf, kKNaN, kKPosInf, kKNegInf, kVNaN, kVPosInf, kVNegInf}))
    run_rule_case(c);
}

TEST(CudaAttention, NonFiniteScoresOverflow) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const RuleCase& c : rule_cases({kScorePosInf, kEveryScoreNegInf, kOneScoreNegInf})) run_rule_case(c);
}

// A few of the cases above on every path, small enough for compute-sanitizer (tools/gpu/nonfinite.sh).
TEST(CudaAttention, NonFiniteUnderSanitizer) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int poison : {int(kVNaN), int(kScorePosInf), int(kEveryScoreNegInf)})
    for (int64_t sq : {int64_t(3), int64_t(64)}) run_rule_case({sq, 300, 4, 2, 128, true, -1, poison});
}

TEST(CudaAttention, NonFiniteLseInBackward) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t Sq = 130, Sk = 130, H = 4, Hkv = 2, D = 64;
  const DType dt = DType::bf16;
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(bad);
    std::mt19937 rng(3);
    HostTensor q(dt, {1, Sq, H, D}), k(dt, {1, Sk, Hkv, D}), v(dt, {1, Sk, Hkv, D}), dout(dt, {1, Sq, H, D});
    for (HostTensor* t : {&q, &k, &v, &dout}) t->fill_random(rng);
    AttentionOptions opts;
    opts.causal = true;
    opts.check_finite = false;
    opts.impl = AttentionImpl::reference;
    HostTensor o(dt, {1, Sq, H, D}), lse(DType::f32, {1, H, Sq});
    attention_forward(q.view, k.view, v.view, o.view, lse.view, opts);
    lse.set((3 * Sq) + 100, bad);  // head 3, row 100: sees keys 0..100
    HostTensor rq(dt, {1, Sq, H, D}), rk(dt, {1, Sk, Hkv, D}), rv(dt, {1, Sk, Hkv, D});
    attention_backward(dout.view, q.view, k.view, v.view, o.view, lse.view, rq.view, rk.view, rv.view, opts);
    DevTensor gq_, gk_, gv_, go, gl, gd, dq, dk, dv;
    gq_.alloc(dt, {1, Sq, H, D});
    gk_.alloc(dt, {1, Sk, Hkv, D});
    gv_.alloc(dt, {1, Sk, Hkv, D});
    go.alloc(dt, {1, Sq, H, D});
    gd.alloc(dt, {1, Sq, H, D});
    gl.alloc(DType::f32, {1, H, Sq});
    dq.alloc(dt, {1, Sq, H, D});
    dk.alloc(dt, {1, Sk, Hkv, D});
    dv.alloc(dt, {1, Sk, Hkv, D});
    gq_.upload(q);
    gk_.upload(k);
    gv_.upload(v);
    go.upload(o);
    gd.upload(dout);
    CK(cudaMemcpy(gl.p, lse.bytes.data(), size_t(H * Sq * 4), cudaMemcpyHostToDevice));
    for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::standard}) {
      dq.poison();
      dk.poison();
      dv.poison();
      opts.impl = impl;
      attention_backward(gd.view, gq_.view, gk_.view, gv_.view, go.view, gl.view, dq.view, dk.view, dv.view, opts);
      CK(cudaDeviceSynchronize());
      HostTensor hq(dt, {1, Sq, H, D}), hk(dt, {1, Sk, Hkv, D}), hv(dt, {1, Sk, Hkv, D});
      dq.download(&hq);
      dk.download(&hk);
      dv.download(&hv);
      const std::string w = std::string(impl_name(impl));
      expect_same_nonfinite(hq, rq, 3e-2, "dq " + w);
      expect_same_nonfinite(hk, rk, 3e-2, "dk " + w);
      expect_same_nonfinite(hv, rv, 3e-2, "dv " + w);
    }
  }
}

// Varlen with check_finite off: a non-finite q/dout row or k row of one sequence stays out of the previous sequence's
// gradients. The Hopper warp-specialized backwards (v22; v24 at d256) read the next sequence's first rows into a
// sequence's last query and key tiles (TMA boxes of a packed tensor) and zero them before their products (0 * NaN
// would be NaN in dK, dV, dQ); the other backwards (v6, v16 at d256) zero-fill on load. Sequence 0's tiles are ragged
// (70 query rows, 90 keys).
TEST(CudaAttention, VarlenNonFiniteStaysInItsSequence) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::pair<int, int>> lens = {{70, 90}, {50, 60}};
  std::vector<int32_t> cu_q, cu_k;
  fk_test::varlen_offsets(lens, &cu_q, &cu_k);
  const int64_t Sq = cu_q.back(), Sk = cu_k.back(), H = 4, Hkv = 2;
  const DType dt = DType::bf16;
  for (int64_t D : {64, 128, 256}) {
    for (bool v6 : {false, true}) {
      SCOPED_TRACE("d" + std::to_string(D) + (v6 ? " v6/v16" : " ws forced"));
      std::mt19937 rng(uint32_t(D) + (v6 ? 7u : 0u));
      HostTensor q(dt, {1, Sq, H, D}), k(dt, {1, Sk, Hkv, D}), v(dt, {1, Sk, Hkv, D}), dout(dt, {1, Sq, H, D});
      for (HostTensor* t : {&q, &k, &v, &dout}) t->fill_random(rng);
      const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
      // Sequence 1's first query row (q and dout, every head) and first key (k, every KV head).
      for (int64_t e = 0; e < H * D; ++e) {
        q.set(cu_q[1] * H * D + e, nan);
        dout.set(cu_q[1] * H * D + e, inf);
      }
      for (int64_t e = 0; e < Hkv * D; ++e) k.set(cu_k[1] * Hkv * D + e, nan);
      AttentionOptions opts;
      opts.causal = false;
      opts.check_finite = false;
      opts.num_seqs = int64_t(lens.size());
      opts.impl = AttentionImpl::reference;
      opts.cu_seqlens_q = cu_q.data();
      opts.cu_seqlens_k = cu_k.data();
      HostTensor o(dt, {1, Sq, H, D}), lse(DType::f32, {1, H, Sq});
      attention_forward(q.view, k.view, v.view, o.view, lse.view, opts);
      HostTensor rq(dt, {1, Sq, H, D}), rk(dt, {1, Sk, Hkv, D}), rv(dt, {1, Sk, Hkv, D});
      attention_backward(dout.view, q.view, k.view, v.view, o.view, lse.view, rq.view, rk.view, rv.view, opts);

      DevTensor gq_, gk_, gv_, go, gl, gd, dq, dk, dv;
      gq_.alloc(dt, {1, Sq, H, D});
      gk_.alloc(dt, {1, Sk, Hkv, D});
      gv_.alloc(dt, {1, Sk, Hkv, D});
      go.alloc(dt, {1, Sq, H, D});
      gd.alloc(dt, {1, Sq, H, D});
      gl.alloc(DType::f32, {1, H, Sq});
      dq.alloc(dt, {1, Sq, H, D});
      dk.alloc(dt, {1, Sk, Hkv, D});
      dv.alloc(dt, {1, Sk, Hkv, D});
      gq_.upload(q);
      gk_.upload(k);
      gv_.upload(v);
      go.upload(o);
      gd.upload(dout);
      CK(cudaMemcpy(gl.p, lse.bytes.data(), size_t(H * Sq * 4), cudaMemcpyHostToDevice));
      int32_t* dcu = nullptr;
      CK(cudaMalloc(&dcu, (cu_q.size() + cu_k.size()) * 4));
      CK(cudaMemcpy(dcu, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dcu + cu_q.size(), cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice));
      opts.cu_seqlens_q = dcu;
      opts.cu_seqlens_k = dcu + cu_q.size();
      opts.impl = AttentionImpl::flash;
      Tuning t;
      t.sm90_bwd_ws = v6 ? 0 : 1;
      opts.tuning = t;
      dq.poison();
      dk.poison();
      dv.poison();
      OpCost cost;
      attention_backward(gd.view, gq_.view, gk_.view, gv_.view, go.view, gl.view, dq.view, dk.view, dv.view, opts, &cost);
      CK(cudaDeviceSynchronize());
      CK(cudaFree(dcu));
      HostTensor hq(dt, {1, Sq, H, D}), hk(dt, {1, Sk, Hkv, D}), hv(dt, {1, Sk, Hkv, D});
      dq.download(&hq);
      dk.download(&hk);
      dv.download(&hv);
      // Sequence 0's rows: finite and close to the reference (whose sequence 0 never sees sequence 1).
      auto check = [&](const HostTensor& got, const HostTensor& want, int64_t elems, const char* what) {
        double num = 0, den = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < elems; ++i) {
          const double x = got.get(i), y = want.get(i);
          if (!std::isfinite(x)) {
            if (bad++ < 3) ADD_FAILURE() << what << "[" << i << "] = " << x << ", kernel " << cost.kernel;
            continue;
          }
          num += (x - y) * (x - y);
          den += y * y;
        }
        EXPECT_EQ(bad, 0) << what;
        EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 2e-2) << what << ", kernel " << cost.kernel;
      };
      check(hq, rq, cu_q[1] * H * D, "dq of sequence 0");
      check(hk, rk, cu_k[1] * Hkv * D, "dk of sequence 0");
      check(hv, rv, cu_k[1] * Hkv * D, "dv of sequence 0");
      std::printf("bwd path: varlen non-finite d%d %s\n", int(D), cost.kernel.c_str());
    }
  }
}

}  // namespace
