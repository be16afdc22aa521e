// Tensor parallelism through the NCCL path on one GPU (engine/tp_remote.cpp): a leader model over a one-rank NCCL
// communicator (its command broadcasts staged through a device buffer) gives bitwise the plain CUDA model's logits
// and greedy tokens. CUDA builds with NCCL and a GPU; skipped otherwise (two ranks need two GPUs: tools/gpu/tp_nccl.sh).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "dist/comm.hpp"
#include "engine/tp.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/runtime.hpp"

namespace {

namespace fs = std::filesystem;
const fs::path kRoot = FLASHKIT_SOURCE_DIR;

TEST(TpNcclCuda, WorldSizeOneOverNcclIsBitwiseThePlainModel) {
  if (!flashkit::dist::nccl_built() || flashkit::cuda_device_count() < 1) GTEST_SKIP() << "needs NCCL and a GPU";
  flashkit::LoadOptions lo;
  lo.device = "cuda:0";
  lo.max_context = 256;
  std::shared_ptr<flashkit::dist::Communicator> comm =
      flashkit::dist::make_nccl(0, 1, 0, flashkit::dist::nccl_unique_id());
  auto leader = flashkit::engine::make_tp_leader(
      flashkit::engine::load_rank_model(kRoot / "models" / "target", lo, *comm), comm);
  auto plain = flashkit::Model::load(kRoot / "models" / "target", lo);
  const std::vector<int32_t> prompt = {1, 5, 9, 200, 33, 4, 4000, 17, 8191};
  auto a = plain->new_session(), b = leader->new_session();
  a->prefill(prompt);
  b->prefill(prompt);
  ASSERT_EQ(a->logits().size(), b->logits().size());
  EXPECT_EQ(std::memcmp(a->logits().data(), b->logits().data(), a->logits().size() * 4), 0);
  a->reset();
  b->reset();
  flashkit::GenerateOptions g;
  g.max_new_tokens = 24;
  g.temperature = 0;
  g.stop_at_eos = false;
  EXPECT_EQ(flashkit::generate(*b, prompt, g).tokens, flashkit::generate(*a, prompt, g).tokens);
}

}  // namespace
