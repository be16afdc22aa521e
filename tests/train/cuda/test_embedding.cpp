// embedding_fwd / embedding_bwd against the f64 reference: odd sizes on the vector and scalar paths, out-of-range
// ids, duplicate ids in long runs, accumulation onto an existing gradient, and bitwise determinism.
#include "helpers.hpp"
#include "reference.hpp"

namespace fk_train_test {
namespace {

struct EmbCase {
  int64_t T, V, C;
  float scale;
};

std::vector<int32_t> random_ids(int64_t T, int64_t V, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& id : ids) id = int32_t(g() % uint64_t(V));
  return ids;
}

class Embedding : public TrainCuda {};

TEST_F(Embedding, Forward) {
  const EmbCase cases[] = {{37, 101, 200, 1.0f}, {5, 7, 13, 2.5f}, {64, 50, 1000, 27.712812f}, {1, 3, 8, 1.0f}};
  uint64_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " V=" + std::to_string(c.V) + " C=" + std::to_string(c.C));
    auto ids = random_ids(c.T, c.V, seed++);
    if (c.T > 4) ids[1] = int32_t(c.V) + 3, ids[3] = -2;  // out of range: NaN rows
    const auto table = bfr(rnd(size_t(c.V * c.C), seed++));
    I32 did(ids);
    BF16 dtab(table), out(size_t(c.T * c.C));
    tc::embedding_fwd(did.p, dtab.b(), out.b(), c.T, c.V, c.C, c.scale, stream);
    sync();
    const auto got = out.get();
    const auto want = ref::embedding_fwd(ids, table, c.V, c.C, c.scale);
    std::vector<size_t> valid;
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t k = 0; k < c.C; ++k) {
        const size_t i = size_t(t * c.C + k);
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << "row " << t << " has an out-of-range id";
        } else {
          valid.push_back(i);
        }
      }
    expect_bf16(got, want, "embedding_fwd", valid);
  }
}

TEST_F(Embedding, BackwardDeterministic) {
  const EmbCase cases[] = {{300, 11, 200, 1.0f},  // ~27 rows per id: runs longer than the 8 row lanes
                           {257, 5, 37, 2.0f},    // scalar path
                           {100, 1000, 1000, 0.5f},  // several column blocks, mostly unique ids
                           {513, 40, 300, 1.0f},  // scalar path, 10 column blocks
                           {1, 1, 8, 3.0f}};
  uint64_t seed = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " V=" + std::to_string(c.V) + " C=" + std::to_string(c.C));
    auto ids = random_ids(c.T, c.V, seed++);
    for (int64_t t = 0; t < c.T; t += 3) ids[size_t(t)] = 0;  // one very frequent id
    if (c.T > 10) ids[2] = -1, ids[7] = int32_t(c.V);         // skipped
    const auto dout = bfr(rnd(size_t(c.T * c.C), seed++));
    const auto d0 = rnd(size_t(c.V * c.C), seed++);  // accumulated onto
    I32 did(ids);
    BF16 ddout(dout);
    F32 dtab(d0), dtab2(d0);
    const size_t ws_bytes = tc::embedding_bwd_workspace_bytes(c.T, c.V);
    Dev<uint8_t> ws(ws_bytes);
    ASSERT_EQ(cudaMemset(ws.p, 0xff, ws_bytes), cudaSuccess);  // poisoned
    tc::embedding_bwd(did.p, ddout.b(), dtab.p, c.T, c.V, c.C, c.scale, ws.p, ws_bytes, stream);
    tc::embedding_bwd(did.p, ddout.b(), dtab2.p, c.T, c.V, c.C, c.scale, ws.p, ws_bytes, stream);
    sync();
    const auto got = dtab.get();
    // f32 sums of up to ~100 rows: an element that nearly cancels keeps the rounding of its partial sums.
    expect_close(got, ref::embedding_bwd(ids, dout, c.V, c.C, c.scale, d0), 1e-5, 2e-5, "embedding_bwd");
    EXPECT_TRUE(bitwise_equal(got, dtab2.get())) << "embedding_bwd is not deterministic";
  }
}

TEST_F(Embedding, BackwardRejectsSmallWorkspace) {
  const size_t need = tc::embedding_bwd_workspace_bytes(100, 50);
  Dev<uint8_t> ws(need);
  I32 ids(std::vector<int32_t>(100, 1));
  BF16 dout(std::vector<float>(100 * 8, 1.0f));
  F32 dtab(std::vector<float>(50 * 8, 0.0f));
  try {
    tc::embedding_bwd(ids.p, dout.b(), dtab.p, 100, 50, 8, 1.0f, ws.p, need - 1, stream);
    FAIL() << "no error for a too small workspace";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("workspace_bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fk_train_test
