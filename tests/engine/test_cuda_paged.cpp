// The decode family's paged kernel (kernels/cuda/decode/paged.hpp) against an f64 reference computed here: batches of
// sequences of different lengths (1 .. 3000) with scrambled block tables, decode rows and prompt-chunk rows in one
// launch, GQA / MQA / a group of 16 heads, windows, softcap, head dims 64 / 72 / 128 / 256, f32 / bf16 / f16, split
// counts 1 .. 64. Inputs are random (never zeros) and rounded to their storage type first, so the reference sees what
// the kernel reads; outputs and the step's pool slots are NaN-poisoned first. The store of the step's k/v rows is
// checked slot by slot (every other pool row unchanged). Skips when no CUDA device is visible (CI has none).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/decode/paged.hpp"
#include "kernels/cuda/decode/plan.hpp"
#endif

namespace {

#ifdef FLASHKIT_WITH_CUDA
namespace fc = flashkit::cuda;
using fc::PagedElem;

struct Case {
  const char* name;
  int heads, kv_heads, head_dim, block_size;
  int64_t window;
  float softcap;
  PagedElem pool, act;                 // pool element type; q / out / step k,v type
  std::vector<int> lengths;            // each sequence's length after the step
  std::vector<int> chunk;              // rows this sequence has in the step (1: decode; > 1: a prompt chunk)
  bool neg_inf_keys = false;           // cached keys at positions 0, 7, 14, ...: -inf in element 0 (q's is > 0)
};

int esize(PagedElem t) { return t == PagedElem::f32 ? 4 : 2; }
float round_to(PagedElem t, float x) {
  if (t == PagedElem::bf16) return flashkit::bf16_to_f32(flashkit::f32_to_bf16(x));
  if (t == PagedElem::f16) return flashkit::f16_to_f32(flashkit::f32_to_f16(x));
  return x;
}
// Host image of n values in type t.
std::vector<uint8_t> encode(PagedElem t, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * size_t(esize(t)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == PagedElem::f32) {
      std::memcpy(b.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == PagedElem::bf16 ? flashkit::f32_to_bf16(v[i]) : flashkit::f32_to_f16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}
std::vector<float> decode(PagedElem t, const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / size_t(esize(t)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == PagedElem::f32) {
      std::memcpy(&v[i], b.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      v[i] = t == PagedElem::bf16 ? flashkit::bf16_to_f32(h) : flashkit::f16_to_f32(h);
    }
  }
  return v;
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};
void put(Dev& d, const void* h, size_t bytes) { ASSERT_EQ(cudaMemcpy(d.p, h, bytes, cudaMemcpyHostToDevice), cudaSuccess); }
std::vector<uint8_t> get(const Dev& d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), d.p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

bool have_cuda() { return flashkit::cuda_device_count() > 0; }

void run_case(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  auto rnd = [&] {
    float x = U(rng);
    return x == 0.0f ? 0.5f : x;
  };
  const int nseq = int(c.lengths.size());
  for (int s = 0; s < nseq; ++s)  // a chunk longer than its sequence would put rows at negative positions
    ASSERT_TRUE(c.chunk[size_t(s)] >= 1 && c.chunk[size_t(s)] <= c.lengths[size_t(s)]) << c.name << " sequence " << s;
  const int64_t D = c.head_dim, kvd = int64_t(c.kv_heads) * D, qd = int64_t(c.heads) * D, bs = c.block_size;
  int64_t max_len = 0, total_blocks = 0;
  for (int L : c.lengths) max_len = std::max<int64_t>(max_len, L), total_blocks += (L + bs - 1) / bs;
  const int64_t max_blocks = (max_len + bs - 1) / bs;
  const int64_t num_blocks = total_blocks + 3;  // a few never used
  // Block tables: a random permutation of the pool's blocks dealt out to the sequences.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(nseq * max_blocks), -1);
  size_t next = 0;
  for (int s = 0; s < nseq; ++s)
    for (int64_t b = 0; b < (c.lengths[size_t(s)] + bs - 1) / bs; ++b) tables[size_t(s * max_blocks + b)] = perm[next++];
  // Rows of the step: each sequence's last chunk[s] positions, sequences in order.
  std::vector<int32_t> positions, row_seq;
  for (int s = 0; s < nseq; ++s)
    for (int i = c.chunk[size_t(s)]; i >= 1; --i) positions.push_back(c.lengths[size_t(s)] - i), row_seq.push_back(s);
  const int64_t T = int64_t(positions.size());
  auto slot = [&](int s, int64_t j) { return int64_t(tables[size_t(s * max_blocks + j / bs)]) * bs + j % bs; };

  // Pool: random everywhere (already-cached positions and unused rows), NaN at the step's slots (the store fills them).
  const int64_t pool_rows = num_blocks * bs;
  std::vector<float> kpool(size_t(pool_rows * kvd)), vpool(kpool.size());
  for (auto& x : kpool) x = round_to(c.pool, rnd());
  for (auto& x : vpool) x = round_to(c.pool, rnd());
  std::vector<float> kstep(size_t(T * kvd)), vstep(kstep.size()), q(size_t(T * qd));
  for (auto& x : kstep) x = round_to(c.act, rnd());
  for (auto& x : vstep) x = round_to(c.act, rnd());
  for (auto& x : q) x = round_to(c.act, rnd());
  if (c.neg_inf_keys) {  // scores of -inf (attention.hpp, contract B: they weigh 0), also a lane group's first key
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < c.heads; ++h) q[size_t(t * qd + h * D)] = std::fabs(q[size_t(t * qd + h * D)]);
    for (int s = 0; s < nseq; ++s)
      for (int64_t j = 0; j < c.lengths[size_t(s)]; j += 7)
        for (int kh = 0; kh < c.kv_heads; ++kh) kpool[size_t(slot(s, j) * kvd + kh * D)] = -INFINITY;
  }
  std::vector<float> kexp = kpool, vexp = vpool;  // the pool after the store
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = slot(row_seq[size_t(t)], positions[size_t(t)]);
    for (int64_t i = 0; i < kvd; ++i) {
      kpool[size_t(r * kvd + i)] = vpool[size_t(r * kvd + i)] = std::numeric_limits<float>::quiet_NaN();
      kexp[size_t(r * kvd + i)] = round_to(c.pool, kstep[size_t(t * kvd + i)]);
      vexp[size_t(r * kvd + i)] = round_to(c.pool, vstep[size_t(t * kvd + i)]);
    }
  }
  // f64 reference over the expected pool.
  const double scale = 1.0 / std::sqrt(double(D));
  const int G = c.heads / c.kv_heads;
  std::vector<double> ref(size_t(T * qd));
  for (int64_t t = 0; t < T; ++t) {
    const int s = row_seq[size_t(t)];
    const int64_t p = positions[size_t(t)], lo = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
    for (int h = 0; h < c.heads; ++h) {
      const int kh = h / G;
      std::vector<double> sc(size_t(p - lo + 1));
      double mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        const int64_t r = slot(s, j);
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += double(q[size_t(t * qd + h * D + i)]) * kexp[size_t(r * kvd + kh * D + i)];
        d *= scale;
        if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
        sc[size_t(j - lo)] = d;
        mx = std::max(mx, d);
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (int64_t j = lo; j <= p; ++j) o += sc[size_t(j - lo)] * vexp[size_t(slot(s, j) * kvd + kh * D + i)];
        ref[size_t(t * qd + h * D + i)] = o / sum;
      }
    }
  }

  const std::vector<uint8_t> kp = encode(c.pool, kpool), vp = encode(c.pool, vpool);
  const std::vector<uint8_t> kb = encode(c.act, kstep), vb = encode(c.act, vstep), qb = encode(c.act, q);
  Dev dk(kp.size()), dv(vp.size()), dks(kb.size()), dvs(vb.size()), dq(qb.size());
  Dev dout(size_t(T * qd) * size_t(esize(c.act))), dtab(tables.size() * 4), dpos(size_t(T) * 4), dseq(size_t(T) * 4);
  Dev dpart(size_t(fc::paged_decode_part_floats(T, c.heads, D, fc::kPagedMaxSplits)) * 4);
  put(dtab, tables.data(), tables.size() * 4);
  put(dpos, positions.data(), size_t(T) * 4);
  put(dseq, row_seq.data(), size_t(T) * 4);
  put(dks, kb.data(), kb.size());
  put(dvs, vb.data(), vb.size());
  put(dq, qb.data(), qb.size());
  for (int splits : {1, 13, fc::kPagedMaxSplits}) {
    put(dk, kp.data(), kp.size());
    put(dv, vp.data(), vp.size());
    const std::vector<uint8_t> poison = encode(c.act, std::vector<float>(size_t(T * qd), std::numeric_limits<float>::quiet_NaN()));
    put(dout, poison.data(), poison.size());

    fc::PagedStoreArgs st;
    st.k = dks.p, st.ldk = kvd, st.v = dvs.p, st.ldv = kvd, st.src_type = c.act;
    st.k_pool = dk.p, st.v_pool = dv.p, st.pool_type = c.pool, st.block_size = c.block_size;
    st.block_tables = dtab.as<int32_t>(), st.max_blocks = max_blocks;
    st.positions = dpos.as<int32_t>(), st.row_seq = dseq.as<int32_t>(), st.rows = int32_t(T), st.kvd = kvd;
    fc::paged_kv_store(st, nullptr);
    fc::PagedDecodeArgs a;
    a.q = dq.p, a.ldq = qd, a.q_type = c.act, a.out = dout.p, a.ldo = qd, a.out_type = c.act;
    a.k_pool = dk.p, a.v_pool = dv.p, a.pool_type = c.pool, a.block_size = c.block_size;
    a.block_tables = st.block_tables, a.max_blocks = max_blocks, a.positions = st.positions, a.row_seq = st.row_seq;
    a.rows = int32_t(T), a.heads = c.heads, a.kv_heads = c.kv_heads, a.head_dim = c.head_dim;
    a.window = c.window, a.scale = float(scale), a.softcap = c.softcap;
    a.splits = splits, a.part = dpart.as<float>();
    fc::paged_decode_attention(a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.name;

    const std::vector<float> out = decode(c.act, get(dout, size_t(T * qd) * size_t(esize(c.act))));
    double d = 0, r = 0;
    bool finite = true;
    for (size_t i = 0; i < ref.size(); ++i) {
      finite = finite && std::isfinite(out[i]);
      d += (out[i] - ref[i]) * (out[i] - ref[i]);
      r += ref[i] * ref[i];
    }
    const double err = finite ? std::sqrt(d / r) : INFINITY;
    const double tol = c.act == PagedElem::f32 ? 2e-5 : 6e-3;  // 16-bit outputs: their rounding
    std::printf("paged %-28s rows %3lld splits %2d: rel err %.2e\n", c.name, (long long)T, splits, err);
    EXPECT_LT(err, tol) << c.name << " splits " << splits;
    if (splits == 1) {  // the store: every step slot holds its row, every other row is untouched
      const std::vector<float> kgot = decode(c.pool, get(dk, kp.size())), vgot = decode(c.pool, get(dv, vp.size()));
      int64_t bad = 0;
      for (size_t i = 0; i < kgot.size(); ++i) bad += kgot[i] != kexp[i] || vgot[i] != vexp[i];
      EXPECT_EQ(bad, 0) << c.name << ": pool elements that differ from the expected store";
    }
  }
}

std::vector<Case> cases() {
  using E = PagedElem;
  // Decode rows of sequences of many lengths (1, a block edge, 3000), one prompt chunk of 37 rows.
  const std::vector<int> lens = {1, 17, 300, 3000, 64, 65, 33};
  const std::vector<int> chunk = {1, 1, 1, 1, 1, 37, 1};
  return {
      {"gqa32/8.d128.bs16.bf16", 32, 8, 128, 16, 0, 0.0f, E::bf16, E::bf16, lens, chunk},
      {"gqa32/8.d64.bs32.f16.win.cap", 32, 8, 64, 32, 100, 50.0f, E::f16, E::f16, lens, chunk},
      {"mqa8/1.d256.bs16.bf16.cap", 8, 1, 256, 16, 0, 30.0f, E::bf16, E::bf16, {3000, 5, 129}, {1, 5, 1}},
      {"gqa6/2.d64.bs32.f32.win", 6, 2, 64, 32, 33, 0.0f, E::f32, E::f32, lens, chunk},
      {"g16.16/1.d128.bs16.bf16-f32q", 16, 1, 128, 16, 0, 0.0f, E::bf16, E::f32, {2000, 1, 40}, {1, 1, 40}},
      {"gqa12/4.d72.bs16.f32", 12, 4, 72, 16, 0, 0.0f, E::f32, E::f32, {250, 3, 1}, {1, 3, 1}},
      {"mha4/4.d128.bs32.bf16.win", 4, 4, 128, 32, 64, 0.0f, E::bf16, E::bf16, {1000, 90, 2}, {1, 20, 2}},
  };
}
#endif

TEST(CudaPagedKernel, MatchesTheF64Reference) {
#ifdef FLASHKIT_WITH_CUDA
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 1;
  for (const Case& c : cases()) run_case(c, seed++);
#else
  GTEST_SKIP() << "CPU-only build";
#endif
}

// A -inf score weighs 0 wherever it falls (the first key of a lane group or split used to make the row NaN:
// e^(-inf - -inf) with the running max still at its initial -inf).
TEST(CudaPagedKernel, AMinusInfScoreWeighsZero) {
#ifdef FLASHKIT_WITH_CUDA
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 101;
  for (Case c : cases()) {
    if (c.window > 0) continue;  // the window's first key need not be one of the -inf ones; the others cover it
    c.neg_inf_keys = true;
    run_case(c, seed++);
  }
#else
  GTEST_SKIP() << "CPU-only build";
#endif
}

// A prompt chunk's keys gathered for the flash kernel (paged_gather_kv): positions [first, first + n) of one
// sequence through a scrambled block table, each element the pool's rounded to bf16; the rows past n untouched.
TEST(CudaPagedKernel, GatherFollowsTheBlockTable) {
#ifdef FLASHKIT_WITH_CUDA
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  struct G {
    PagedElem pool;
    int block_size;
    int64_t kvd, first, n;
  };
  uint64_t seed = 7;
  for (const G& g : {G{PagedElem::bf16, 16, 1024, 0, 700}, G{PagedElem::f32, 16, 72, 33, 150},
                     G{PagedElem::f16, 32, 256, 95, 1}, G{PagedElem::bf16, 5, 8, 3, 61}}) {
    std::mt19937_64 rng(seed++);
    std::uniform_real_distribution<float> U(-2.0f, 2.0f);
    const int64_t bs = g.block_size, blocks = (g.first + g.n + bs - 1) / bs, num_blocks = blocks + 4;
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> table(perm.begin(), perm.begin() + blocks);
    std::vector<float> kp(size_t(num_blocks * bs * g.kvd)), vp(kp.size());
    for (auto& x : kp) x = U(rng);
    for (auto& x : vp) x = U(rng);
    const auto kb = encode(g.pool, kp), vb = encode(g.pool, vp);
    Dev dk(kb.size()), dv(vb.size()), dt(table.size() * 4);
    put(dk, kb.data(), kb.size());
    put(dv, vb.data(), vb.size());
    put(dt, table.data(), table.size() * 4);
    const size_t out_elems = size_t((g.n + 1) * g.kvd);  // one row past the end must stay poisoned
    Dev ko(out_elems * 2), vo(out_elems * 2);
    ASSERT_EQ(cudaMemset(ko.p, 0xff, out_elems * 2), cudaSuccess);  // 0xffff: a bf16 NaN
    ASSERT_EQ(cudaMemset(vo.p, 0xff, out_elems * 2), cudaSuccess);
    fc::PagedGatherArgs a;
    a.k_pool = dk.p, a.v_pool = dv.p, a.pool_type = g.pool, a.block_size = g.block_size, a.table = dt.as<int32_t>();
    a.first = g.first, a.n = g.n, a.kvd = g.kvd, a.k_out = ko.as<uint16_t>(), a.v_out = vo.as<uint16_t>();
    fc::paged_gather_kv(a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto kg = decode(PagedElem::bf16, get(ko, out_elems * 2)), vg = decode(PagedElem::bf16, get(vo, out_elems * 2));
    int64_t bad = 0;
    for (int64_t r = 0; r < g.n; ++r) {
      const int64_t j = g.first + r, row = int64_t(table[size_t(j / bs)]) * bs + j % bs;
      for (int64_t c = 0; c < g.kvd; ++c) {
        const float ek = round_to(PagedElem::bf16, round_to(g.pool, kp[size_t(row * g.kvd + c)]));
        const float ev = round_to(PagedElem::bf16, round_to(g.pool, vp[size_t(row * g.kvd + c)]));
        bad += kg[size_t(r * g.kvd + c)] != ek || vg[size_t(r * g.kvd + c)] != ev;
      }
    }
    EXPECT_EQ(bad, 0) << "pool " << int(g.pool) << " kvd " << g.kvd << " first " << g.first << " n " << g.n;
    for (int64_t c = 0; c < g.kvd; ++c)
      EXPECT_TRUE(std::isnan(kg[size_t(g.n * g.kvd + c)]) && std::isnan(vg[size_t(g.n * g.kvd + c)])) << "row n written";
  }
  fc::PagedGatherArgs a;
  int dummy = 0;
  a.k_pool = &dummy, a.v_pool = &dummy, a.table = &dummy, a.block_size = 16, a.n = 4, a.kvd = 60;
  a.k_out = reinterpret_cast<uint16_t*>(&dummy), a.v_out = a.k_out;
  try {
    fc::paged_gather_kv(a, nullptr);
    ADD_FAILURE() << "kvd 60 accepted";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("kvd"), std::string::npos) << e.what();
  }
#else
  GTEST_SKIP() << "CPU-only build";
#endif
}

TEST(CudaPagedKernel, RejectsBadArguments) {
#ifdef FLASHKIT_WITH_CUDA
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  fc::PagedDecodeArgs a;
  a.heads = 6, a.kv_heads = 4, a.head_dim = 64, a.block_size = 16, a.rows = 1;
  int dummy = 0;
  a.q = &dummy, a.out = &dummy, a.k_pool = &dummy, a.v_pool = &dummy;
  a.block_tables = &dummy, a.positions = &dummy, a.row_seq = &dummy;
  auto msg = [&] {
    try {
      fc::paged_decode_attention(a, nullptr);
    } catch (const flashkit::Error& e) {
      EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg().find("kv_heads"), std::string::npos);
  a.kv_heads = 2, a.head_dim = 60;
  EXPECT_NE(msg().find("head_dim"), std::string::npos);
  a.head_dim = 64, a.splits = 2;
  EXPECT_NE(msg().find("part"), std::string::npos);
  a.splits = 65;
  EXPECT_NE(msg().find("splits"), std::string::npos);
#else
  GTEST_SKIP() << "CPU-only build";
#endif
}

}  // namespace
