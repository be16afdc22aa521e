// serve::Engine over a tensor-parallel model (engine/tp.hpp): continuous batching with chunked prompts over the ranks'
// paged KV pools gives every request the greedy tokens flashkit::generate gives it on one rank alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "engine/paged.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/serve.hpp"

namespace {

namespace fs = std::filesystem;
const fs::path kRoot = FLASHKIT_SOURCE_DIR;

TEST(TpServe, BatchedRequestsMatchOneRankAlone) {
  flashkit::LoadOptions lo;
  lo.max_context = 128;
  auto one = flashkit::Model::load(kRoot / "models" / "target", lo);
  lo.tp = 2;
  auto two = flashkit::Model::load(kRoot / "models" / "target", lo);
  // Each rank pools its own KV heads: the bytes per token of the whole model.
  EXPECT_EQ(flashkit::engine::paged_kv_bytes_per_token(*two), flashkit::engine::paged_kv_bytes_per_token(*one));
  EXPECT_NE(flashkit::engine::model_identity(*two), flashkit::engine::model_identity(*one));

  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {1, 9, 40, 70, 3})
    prompts.push_back([&] {
      std::vector<int32_t> p;
      for (int i = 0; i < len; ++i) p.push_back(int32_t(rng() % 8192));
      return p;
    }());
  flashkit::serve::EngineOptions eo;
  eo.background = false;
  eo.max_step_tokens = 32;  // prompts longer than a step: chunked
  eo.kv_memory = flashkit::engine::paged_kv_bytes_per_token(*two) * 16 * 40;
  auto e = flashkit::serve::Engine::create(two, eo);
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    flashkit::serve::Request r;
    r.prompt = prompts[i];
    r.max_tokens = 6 + int64_t(i);
    r.sampling.temperature = 0;
    r.stop_at_eos = false;
    r.on_token = [&out, i](int32_t t) {
      out[i].push_back(t);
      return true;
    };
    e->submit(std::move(r));
  }
  while (e->step()) {
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto s = one->new_session();
    flashkit::GenerateOptions g;
    g.max_new_tokens = 6 + int64_t(i);
    g.temperature = 0;
    g.stop_at_eos = false;
    EXPECT_EQ(out[i], flashkit::generate(*s, prompts[i], g).tokens) << "request " << i;
  }
}

}  // namespace
