// The paged decode attention (engine/cpu/paged_attention) and the CPU backend's paged_attention op against a plain
// f64 reference: random inputs, NaN-poisoned outputs, blocks scattered through the pool, GQA / MQA / MHA, sliding
// windows, softcap, odd lengths and head sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/cpu/paged_attention.hpp"

namespace {

using namespace flashkit::engine;

struct Case {
  int64_t heads, kv_heads, head_dim, block_size, window;
  float softcap;
};

// Keys/values of several sequences in a shuffled pool, and the reference.
struct Pool {
  int64_t bs, kvd, num_blocks, max_blocks;
  std::vector<float> k, v;
  std::vector<int32_t> tables;
  std::vector<std::vector<float>> seq_k, seq_v;  // per sequence, in position order [len, kvd]
};

Pool make_pool(const std::vector<int64_t>& lens, int64_t bs, int64_t kvd, std::mt19937& rng) {
  Pool p;
  p.bs = bs;
  p.kvd = kvd;
  p.max_blocks = 0;
  int64_t total = 0;
  for (auto L : lens) {
    p.max_blocks = std::max(p.max_blocks, (L + bs - 1) / bs);
    total += (L + bs - 1) / bs;
  }
  p.num_blocks = total + 3;  // spare blocks that belong to nobody
  std::vector<int32_t> ids(size_t(p.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::normal_distribution<float> nd(0.f, 1.f);
  p.k.resize(size_t(p.num_blocks * bs * kvd));
  p.v.resize(p.k.size());
  for (auto& x : p.k) x = nd(rng);
  for (auto& x : p.v) x = nd(rng);
  p.tables.assign(size_t(int64_t(lens.size()) * p.max_blocks), 0);
  size_t next = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    const int64_t nb = (lens[s] + bs - 1) / bs;
    for (int64_t b = 0; b < nb; ++b) p.tables[s * size_t(p.max_blocks) + size_t(b)] = ids[next++];
    p.seq_k.emplace_back(size_t(lens[s] * kvd));
    p.seq_v.emplace_back(size_t(lens[s] * kvd));
    for (int64_t j = 0; j < lens[s]; ++j) {
      const int64_t row = int64_t(p.tables[s * size_t(p.max_blocks) + size_t(j / bs)]) * bs + j % bs;
      std::copy_n(p.k.begin() + row * kvd, kvd, p.seq_k[s].begin() + j * kvd);
      std::copy_n(p.v.begin() + row * kvd, kvd, p.seq_v[s].begin() + j * kvd);
    }
  }
  return p;
}

// f64 reference of one query row at position `pos` against keys [0, pos] of one sequence.
std::vector<double> reference_row(const float* q, const std::vector<float>& K, const std::vector<float>& V, int64_t pos,
                                  const Case& c, float scale) {
  const int64_t hd = c.head_dim, kvd = c.kv_heads * hd, G = c.heads / c.kv_heads;
  std::vector<double> out(size_t(c.heads * hd), 0.0);
  for (int64_t h = 0; h < c.heads; ++h) {
    const int64_t g = h / G;
    std::vector<double> s;
    std::vector<int64_t> js;
    for (int64_t j = 0; j <= pos; ++j) {
      if (c.window > 0 && j <= pos - c.window) continue;
      double d = 0;
      for (int64_t i = 0; i < hd; ++i) d += double(q[h * hd + i]) * double(K[size_t(j * kvd + g * hd + i)]);
      d *= scale;
      if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
      s.push_back(d);
      js.push_back(j);
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (size_t t = 0; t < s.size(); ++t)
      for (int64_t i = 0; i < hd; ++i) out[size_t(h * hd + i)] += s[t] / sum * V[size_t(js[t] * kvd + g * hd + i)];
  }
  return out;
}

double rel_err(const float* a, const std::vector<double>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (a[i] - ref[i]) * (a[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(d / r);
}

const Case kCases[] = {
    {4, 2, 16, 16, 0, 0.f},    // GQA
    {6, 1, 24, 7, 0, 0.f},     // MQA, odd block size
    {3, 3, 40, 16, 0, 0.f},    // MHA
    {8, 2, 64, 16, 9, 0.f},    // sliding window
    {4, 2, 33, 5, 0, 30.f},    // softcap, odd head_dim
    {4, 4, 8, 3, 4, 50.f},     // window + softcap, tiny blocks
};

class PagedAttention : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttention, DecodeKernelMatchesReference) {
  const Case c = GetParam();
  std::mt19937 rng(1234 + unsigned(c.head_dim));
  const std::vector<int64_t> lens = {1, 2, 17, 33, 70, 129};
  const int64_t kvd = c.kv_heads * c.head_dim, qd = c.heads * c.head_dim;
  Pool p = make_pool(lens, c.block_size, kvd, rng);
  const int64_t R = int64_t(lens.size());
  std::vector<float> q(size_t(R * qd)), out(size_t(R * qd), std::numeric_limits<float>::quiet_NaN());
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> rows, pos, seq;
  for (int64_t r = 0; r < R; ++r) {
    rows.push_back(int32_t(r));
    pos.push_back(int32_t(lens[size_t(r)] - 1));
    seq.push_back(int32_t(r));
  }
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  cpu::PagedDecodeArgs a;
  a.q = q.data();
  a.ldq = qd;
  a.out = out.data();
  a.ldo = qd;
  a.k_pool = p.k.data();
  a.v_pool = p.v.data();
  a.block_size = c.block_size;
  a.block_tables = p.tables.data();
  a.max_blocks = p.max_blocks;
  a.rows = rows.data();
  a.n_rows = R;
  a.positions = pos.data();
  a.row_seq = seq.data();
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.scale = scale;
  a.softcap = c.softcap;
  a.window = c.window;
  for (int threads : {1, 2})
  for (flashkit::CpuIsaCap cap : {flashkit::CpuIsaCap::scalar, flashkit::CpuIsaCap::avx2, flashkit::CpuIsaCap::avx512}) {
    std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
    cpu::paged_decode_attention(cpu::detect_isa(cap), threads, a);
    for (int64_t r = 0; r < R; ++r) {
      const auto ref = reference_row(q.data() + r * qd, p.seq_k[size_t(r)], p.seq_v[size_t(r)], pos[size_t(r)], c, scale);
      EXPECT_LT(rel_err(out.data() + r * qd, ref), 2e-6) << "row " << r << " len " << lens[size_t(r)] << " threads " << threads;
    }
  }
}

// The backend op: a step mixing decode rows and prompt chunks of several sequences; it first writes the step's k/v
// into the pool, then attends (chunks through the flash kernel, single rows through the paged decode kernel).
TEST_P(PagedAttention, BackendStepMatchesReference) {
  const Case c = GetParam();
  if (c.head_dim % 8) GTEST_SKIP() << "prompt chunks run the flash kernel, which (like every model) needs head_dim % 8 == 0";
  std::mt19937 rng(99 + unsigned(c.heads));
  auto be = make_cpu_backend({});
  const int64_t kvd = c.kv_heads * c.head_dim, qd = c.heads * c.head_dim;
  // Sequence lengths after the step and how many of their last rows the step computes.
  const std::vector<int64_t> lens = {5, 40, 23, 1, 64};
  const std::vector<int64_t> rows_in_step = {1, 13, 1, 1, 64};
  Pool p = make_pool(lens, c.block_size, kvd, rng);
  PagedKVLayer layer;
  layer.block_size = c.block_size;
  layer.num_blocks = p.num_blocks;
  layer.k = be->alloc(flashkit::DType::f32, p.num_blocks * c.block_size, kvd);
  layer.v = be->alloc(flashkit::DType::f32, p.num_blocks * c.block_size, kvd);
  // The pool holds every sequence's earlier positions; the step's own rows are poisoned there and must be written.
  std::vector<float> kp = p.k, vp = p.v;
  std::vector<int32_t> tokens, pos, seq;
  std::vector<float> q, kin, vin;
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t s = 0; s < lens.size(); ++s)
    for (int64_t j = lens[s] - rows_in_step[s]; j < lens[s]; ++j) {
      tokens.push_back(0);
      pos.push_back(int32_t(j));
      seq.push_back(int32_t(s));
      for (int64_t i = 0; i < qd; ++i) q.push_back(nd(rng));
      kin.insert(kin.end(), p.seq_k[s].begin() + j * kvd, p.seq_k[s].begin() + (j + 1) * kvd);
      vin.insert(vin.end(), p.seq_v[s].begin() + j * kvd, p.seq_v[s].begin() + (j + 1) * kvd);
      const int64_t row = int64_t(p.tables[s * size_t(p.max_blocks) + size_t(j / c.block_size)]) * c.block_size + j % c.block_size;
      std::fill_n(kp.begin() + row * kvd, kvd, std::numeric_limits<float>::quiet_NaN());
      std::fill_n(vp.begin() + row * kvd, kvd, std::numeric_limits<float>::quiet_NaN());
    }
  be->upload(layer.k, kp.data(), kp.size() * 4);
  be->upload(layer.v, vp.data(), vp.size() * 4);
  const int64_t T = int64_t(tokens.size());
  be->reserve_step(T);
  PagedStep st;
  st.tokens = tokens;
  st.positions = pos;
  st.row_seq = seq;
  st.block_tables = p.tables;
  st.num_seqs = int64_t(lens.size());
  st.max_blocks = p.max_blocks;
  be->set_paged_step(st);
  Tensor tq = be->alloc(flashkit::DType::f32, T, qd), tk = be->alloc(flashkit::DType::f32, T, kvd),
         tv = be->alloc(flashkit::DType::f32, T, kvd), to = be->alloc(flashkit::DType::f32, T, qd);
  be->upload(tq, q.data(), q.size() * 4);
  be->upload(tk, kin.data(), kin.size() * 4);
  be->upload(tv, vin.data(), vin.size() * 4);
  std::vector<float> nan(size_t(T * qd), std::numeric_limits<float>::quiet_NaN());
  be->upload(to, nan.data(), nan.size() * 4);
  AttentionParams ap;
  ap.heads = c.heads;
  ap.kv_heads = c.kv_heads;
  ap.head_dim = c.head_dim;
  ap.scale = 1.0f / std::sqrt(float(c.head_dim));
  ap.softcap = c.softcap;
  ap.window = c.window;
  be->paged_attention(tq, tk, tv, layer, to, T, ap);
  std::vector<float> out(size_t(T * qd));
  be->download(out.data(), to, out.size() * 4);
  for (int64_t t = 0; t < T; ++t) {
    const auto ref = reference_row(q.data() + t * qd, p.seq_k[size_t(seq[size_t(t)])], p.seq_v[size_t(seq[size_t(t)])],
                                   pos[size_t(t)], c, ap.scale);
    EXPECT_LT(rel_err(out.data() + t * qd, ref), 2e-5) << "row " << t << " seq " << seq[size_t(t)] << " pos " << pos[size_t(t)];
  }
  // The step's keys and values landed in their slots.
  std::vector<float> kback(kp.size());
  be->download(kback.data(), layer.k, kback.size() * 4);
  for (size_t i = 0; i < kback.size(); ++i)
    if (std::isnan(kp[i])) ASSERT_EQ(kback[i], p.k[i]) << "pool element " << i;
}

INSTANTIATE_TEST_SUITE_P(Grid, PagedAttention, ::testing::ValuesIn(kCases), [](const auto& info) {
  const Case& c = info.param;
  return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" + std::to_string(c.head_dim) + "bs" +
         std::to_string(c.block_size) + "w" + std::to_string(c.window) + (c.softcap > 0 ? "cap" : "");
});

}  // namespace
