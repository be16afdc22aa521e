// cross_entropy_chunk_fwd_bwd against the f64 reference: loss per row and dlogits in place, with and without
// Gemma's final softcap, ignored (-1) and invalid targets, vocabulary padding, the optional bf16 copy, vector and
// scalar paths, and a 50k vocabulary.
#include "helpers.hpp"
#include "reference.hpp"

namespace fk_train_test {
namespace {

struct CeCase {
  int64_t R, V, ld;
  float softcap;
  bool bf16_copy;
};

class CrossEntropy : public TrainCuda {};

TEST_F(CrossEntropy, LossAndGradient) {
  const CeCase cases[] = {
      {37, 1000, 1000, 0.0f, true},    // vector path
      {13, 1001, 1001, 0.0f, false},   // scalar path
      {9, 997, 1000, 30.0f, true},     // padding columns, softcap
      {11, 1003, 1005, 15.0f, false},  // scalar, padding, softcap
      {3, 50304, 50304, 0.0f, true},   // GPT-2 vocabulary (padded)
      {2, 1, 4, 0.0f, true},           // a single class
  };
  uint64_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE("R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) + " ld=" + std::to_string(c.ld) +
                 " softcap=" + std::to_string(c.softcap));
    // Logits wide enough for the softcap to bend them (|z| up to 40 against a cap of 15 or 30).
    const float span = c.softcap > 0 ? 40.0f : 8.0f;
    auto z = rnd(size_t(c.R * c.ld), seed++, -span, span);
    std::mt19937_64 g(seed++);
    std::vector<int32_t> tgt(size_t(c.R));
    for (auto& t : tgt) t = int32_t(g() % uint64_t(c.V));
    if (c.R > 3) tgt[1] = -1, tgt[2] = int32_t(c.V - 1), tgt[3] = 0;
    if (c.R > 5) tgt[5] = int32_t(c.V) + 5;  // invalid: NaN loss, no gradient
    int64_t valid = 0;
    for (auto t : tgt) valid += (t >= 0 && t < c.V);
    const float scale = 1.0f / float(std::max<int64_t>(valid, 1));
    F32 dz(z), loss(size_t(c.R));
    BF16 dbf(size_t(c.R * c.ld));
    I32 dt(tgt);
    tc::cross_entropy_chunk_fwd_bwd(dz.p, c.ld, dt.p, loss.p, c.bf16_copy ? dbf.b() : nullptr, c.R, c.V, scale,
                                    c.softcap, stream);
    sync();
    std::vector<double> rl, rd;
    ref::cross_entropy(z, c.ld, tgt, c.R, c.V, scale, c.softcap, rl, rd);
    const auto gl = loss.get();
    std::vector<size_t> ok_rows;
    for (int64_t r = 0; r < c.R; ++r) {
      if (std::isnan(rl[size_t(r)])) {
        EXPECT_TRUE(std::isnan(gl[size_t(r)])) << "row " << r << ": invalid target";
      } else {
        ok_rows.push_back(size_t(r));
      }
    }
    expect_close(gl, rl, 2e-6, 1e-6, "loss", ok_rows);
    // Gradients are scale * O(1/V) for most classes: compare against the scale, not the rms.
    const auto gd = dz.get();
    expect_close_abs(gd, rd, 3e-5, 1e-6 * double(scale), "dlogits");
    for (size_t i = 0; i < gd.size(); ++i)
      if (rd[i] == 0.0 && gd[i] != 0.0) {
        ADD_FAILURE() << "dlogits element " << i << " should be exactly 0 (ignored row or padding), got " << gd[i];
        break;
      }
    if (c.bf16_copy) {
      const auto gb = dbf.get();
      std::vector<double> want(gd.size());
      for (size_t i = 0; i < gd.size(); ++i) want[i] = bfr(gd[i]);  // the copy is the rounded f32 gradient
      expect_close_abs(gb, want, 0.0, 0.0, "dlogits bf16 copy");
    }
  }
}

}  // namespace
}  // namespace fk_train_test
