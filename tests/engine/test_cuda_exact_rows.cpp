// The CUDA kernels behind decode-exact verification steps (docs/speculative.md), skipped without a GPU:
//   * the GEMV (gemv_bf16) with T = 1 .. 17 rows: every row of a T-row launch is bitwise the one-row launch of that
//     row (the property the verification rows rely on), and close to an f64 reference; with the norm / residual
//     prologue and the gated epilogue; odd sizes, NaN-poisoned outputs;
//   * decode_attention_rows: row r of one call is bitwise a one-row decode_attention at position pos0 + r over the
//     cache the earlier rows appended (plain and ring caches, q/k norms and RoPE fused, f32 and bf16 caches), and
//     the cache rows it appends are those of the one-row launches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashkit/dtype.hpp"
#include "flashkit/runtime.hpp"

#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/kernels.hpp"

namespace {

namespace kc = flashkit::engine::cuda;

std::vector<float> rnd(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A device buffer of n elements of `es` bytes, freed with the object.
struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t b) : bytes(b) { EXPECT_EQ(cudaMalloc(&p, b), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  template <class T>
  void put(const std::vector<T>& v) {
    ASSERT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <class T>
  std::vector<T> get(size_t n) const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void poison() { ASSERT_EQ(cudaMemset(p, 0xff, bytes), cudaSuccess); }  // NaN in f32 and bf16
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

bool have_cuda() { return flashkit::cuda_device_count() > 0; }

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

// ---------------------------------------------------------------- GEMV: rows independent of the row count
struct GemvCase {
  int T;
  int64_t N, K;
  bool norm, residual, gated;
};

TEST(CudaExactRows, GemvRowsAreOneRowLaunches) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const GemvCase cases[] = {{2, 37, 64, false, false, false}, {8, 515, 136, true, true, false},
                            {9, 129, 96, true, false, true},  {13, 300, 520, false, true, false},
                            {16, 1000, 64, true, true, true}, {17, 77, 200, true, false, false},
                            {5, 4099, 1024, false, false, false}};
  uint64_t seed = 100;
  for (const GemvCase& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K));
    const int64_t T = c.T, K = c.K, N = c.N, Nw = c.gated ? 2 * N : N;
    auto W = rnd(size_t(Nw * K), seed++, -0.5f, 0.5f);
    std::vector<uint16_t> Wb(W.size());
    for (size_t i = 0; i < W.size(); ++i) Wb[i] = flashkit::f32_to_bf16(W[i]), W[i] = flashkit::bf16_to_f32(Wb[i]);
    auto x = rnd(size_t(T * K), seed++, -2.0f, 2.0f), d = rnd(size_t(T * K), seed++);
    auto nw = rnd(size_t(K), seed++, 0.5f, 1.5f), res = rnd(size_t(T * N), seed++);
    Dev dW(Wb.size() * 2), dx(x.size() * 4), dd(d.size() * 4), dnw(nw.size() * 4), dres(res.size() * 4);
    dW.put(Wb), dx.put(x), dd.put(d), dnw.put(nw), dres.put(res);
    Dev y(size_t(T * N) * 4), y1(size_t(T * N) * 4), h(size_t(T * K) * 4), h1(size_t(T * K) * 4);
    Dev cnt(4);
    ASSERT_EQ(cudaMemset(cnt.p, 0, 4), cudaSuccess);
    auto launch = [&](int64_t t0, int rows, Dev& yo, Dev& ho) {
      kc::GemvIn in;
      in.x = dx.as<float>() + t0 * K, in.ldx = K;
      in.d = dd.as<float>() + t0 * K, in.ldd = K;  // h = x + d, written to ho
      in.h_out = ho.as<float>() + t0 * K, in.ldh = K;
      if (c.norm) in.norm_w = dnw.as<float>(), in.eps = 1e-5f;
      kc::GemvOut out;
      out.y = yo.as<float>() + t0 * N, out.ldy = N;
      if (c.gated) out.act = kc::Act::silu;
      if (c.residual) out.residual = dres.as<float>() + t0 * N, out.ldr = N;
      kc::gemv_bf16(in, dW.as<uint16_t>(), N, K, rows, out, cnt.as<unsigned>(), nullptr);
    };
    y.poison(), y1.poison(), h.poison(), h1.poison();
    launch(0, c.T, y, h);
    for (int t = 0; t < c.T; ++t) launch(t, 1, y1, h1);
    const auto ym = y.get<float>(size_t(T * N)), ys = y1.get<float>(size_t(T * N));
    const auto hm = h.get<float>(size_t(T * K)), hs = h1.get<float>(size_t(T * K));
    for (int t = 0; t < c.T; ++t) {
      EXPECT_TRUE(same_bits(ym.data() + t * N, ys.data() + t * N, size_t(N))) << "row " << t;
      EXPECT_TRUE(same_bits(hm.data() + t * K, hs.data() + t * K, size_t(K))) << "h row " << t;
    }
    // f64 reference of the whole chain.
    double err = 0, norm = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> a(static_cast<size_t>(K));
      double ss = 0;
      for (int64_t k = 0; k < K; ++k) {
        a[size_t(k)] = double(x[size_t(t * K + k)]) + d[size_t(t * K + k)];
        ss += a[size_t(k)] * a[size_t(k)];
      }
      if (c.norm)
        for (int64_t k = 0; k < K; ++k) a[size_t(k)] *= nw[size_t(k)] / std::sqrt(ss / double(K) + 1e-5);
      for (int64_t n = 0; n < N; ++n) {
        auto dot = [&](int64_t row) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += a[size_t(k)] * W[size_t(row * K + k)];
          return s;
        };
        double v = dot(n);
        if (c.gated) v = v / (1 + std::exp(-v)) * dot(N + n);
        if (c.residual) v += res[size_t(t * N + n)];
        err += std::pow(v - ym[size_t(t * N + n)], 2), norm += v * v;
      }
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5);
  }
}

// ---------------------------------------------------------------- decode attention, one launch per row
struct AttnCase {
  int heads, kv_heads, head_dim, rows;
  int64_t capacity, window, pos0;
  bool ring, cache_bf16, qk_norm;
};

TEST(CudaExactRows, DecodeAttentionRowsAreDecodeSteps) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const AttnCase cases[] = {{8, 2, 64, 9, 512, 0, 300, false, true, false},
                            {4, 4, 16, 17, 21, 5, 40, true, false, true},
                            {2, 1, 128, 5, 4096, 0, 3000, false, false, false},
                            {6, 2, 32, 3, 64, 0, 0, false, true, true}};
  uint64_t seed = 300;
  for (const AttnCase& c : cases) {
    SCOPED_TRACE("rows=" + std::to_string(c.rows) + " D=" + std::to_string(c.head_dim) +
                 " pos0=" + std::to_string(c.pos0) + (c.ring ? " ring" : ""));
    const int64_t D = c.head_dim, qd = c.heads * D, kvd = c.kv_heads * D, R = c.rows;
    const int64_t ld = qd + 2 * kvd;  // q | k | v rows, as the engine's qkv buffer
    const size_t ces = c.cache_bf16 ? 2 : 4;
    auto qkv = rnd(size_t(R * ld), seed++, -2.0f, 2.0f);
    auto kc0 = rnd(size_t(c.capacity * kvd), seed++), vc0 = rnd(size_t(c.capacity * kvd), seed++);
    auto qn = rnd(size_t(D), seed++, 0.5f, 1.5f), kn = rnd(size_t(D), seed++, 0.5f, 1.5f);
    std::vector<float> invf(size_t(D / 2));
    for (int64_t i = 0; i < D / 2; ++i) invf[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(D)));
    auto cache_init = [&](const std::vector<float>& v, Dev& dst) {
      if (!c.cache_bf16) return dst.put(v);
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = flashkit::f32_to_bf16(v[i]);
      dst.put(b);
    };
    Dev dqkv(qkv.size() * 4), dqn(qn.size() * 4), dkn(kn.size() * 4), dinv(invf.size() * 4);
    dqkv.put(qkv), dqn.put(qn), dkn.put(kn), dinv.put(invf);
    Dev kA(size_t(c.capacity * kvd) * ces), vA(size_t(c.capacity * kvd) * ces);
    Dev kB(size_t(c.capacity * kvd) * ces), vB(size_t(c.capacity * kvd) * ces);
    cache_init(kc0, kA), cache_init(vc0, vA), cache_init(kc0, kB), cache_init(vc0, vB);
    const int64_t max_keys = c.window > 0 ? std::min(c.window, c.capacity) : c.capacity;
    const int splits = kc::decode_attention_splits(c.heads, max_keys);
    Dev part(size_t(kc::decode_attention_part_floats(c.heads, int(D), splits)) * 4), counters(4096 * 4);
    ASSERT_EQ(cudaMemset(counters.p, 0, counters.bytes), cudaSuccess);
    Dev pos(size_t(R + 1) * 4);
    std::vector<int32_t> ps(size_t(R + 1));
    for (int64_t r = 0; r <= R; ++r) ps[size_t(r)] = int32_t(c.pos0 + r);
    pos.put(ps);
    Dev outA(size_t(R * qd) * 4), outB(size_t(R * qd) * 4);
    outA.poison(), outB.poison();
    kc::DecodeAttnArgs a;
    a.q = dqkv.as<float>(), a.k = dqkv.as<float>() + qd, a.v = dqkv.as<float>() + qd + kvd;
    if (c.qk_norm) a.q_norm_w = dqn.as<float>(), a.k_norm_w = dkn.as<float>(), a.eps = 1e-6f;
    a.inv_freq = dinv.as<float>();
    a.cache_bf16 = c.cache_bf16, a.capacity = c.capacity, a.ring = c.ring, a.window = c.window;
    a.scale = 1.0f / std::sqrt(float(D));
    a.heads = c.heads, a.kv_heads = c.kv_heads, a.head_dim = int(D), a.splits = splits;
    a.part = part.as<float>(), a.counters = counters.as<unsigned>();
    // A: one call over the rows. B: one-row launches at positions pos0 + r (their own position buffers), each a
    // decode step of its own: a row-0 launch reads the cache before waiting for the previous kernel (PDL), which is
    // right in the engine because a step's upload orders it after the previous step; B must order them the same
    // way, or launch r reads the key launch r - 1 is still appending (rows 1.. then differ whenever the visible keys
    // all lie in the first loop iteration, as in the short ring window below).
    kc::DecodeAttnArgs aa = a;
    aa.k_cache = kA.p, aa.v_cache = vA.p, aa.pos0 = pos.as<int32_t>(), aa.out = outA.p;
    kc::decode_attention_rows(aa, R, ld, ld, ld, qd, nullptr);
    for (int64_t r = 0; r < R; ++r) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the step boundary (the engine's step upload)
      kc::DecodeAttnArgs ab = a;
      ab.q = dqkv.as<float>() + r * ld, ab.k = dqkv.as<float>() + r * ld + qd, ab.v = dqkv.as<float>() + r * ld + qd + kvd;
      ab.k_cache = kB.p, ab.v_cache = vB.p, ab.pos0 = pos.as<int32_t>() + r, ab.out = outB.as<float>() + r * qd;
      kc::decode_attention(ab, nullptr);
    }
    const auto oa = outA.get<float>(size_t(R * qd)), ob = outB.get<float>(size_t(R * qd));
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_TRUE(same_bits(oa.data() + r * qd, ob.data() + r * qd, size_t(qd))) << "row " << r;
      for (int64_t i = 0; i < qd; ++i) ASSERT_TRUE(std::isfinite(oa[size_t(r * qd + i)])) << "row " << r;
    }
    const size_t cb = size_t(c.capacity * kvd) * ces;
    const auto ka = kA.get<uint8_t>(cb), kb = kB.get<uint8_t>(cb), va = vA.get<uint8_t>(cb), vb = vB.get<uint8_t>(cb);
    EXPECT_EQ(ka, kb);
    EXPECT_EQ(va, vb);
  }
}

TEST(CudaExactRows, BadArgumentsAreNamed) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  kc::DecodeAttnArgs a;
  a.heads = 2, a.kv_heads = 1, a.head_dim = 16, a.row = 1;
  try {
    kc::decode_attention_rows(a, 2, 48, 48, 48, 32, nullptr);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("decode_attention_rows"), std::string::npos) << e.what();
  }
}

}  // namespace
#endif  // FLASHKIT_WITH_CUDA
