// End to end on the CPU: the loss goes down on a repetitive corpus, a trained model exported as a Hugging Face
// directory gives the trainer's logits in the engine, a resumed run is bit-identical to an uninterrupted one, and
// gradient accumulation equals one large batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/train.hpp"
#include "model/weights.hpp"
#include "train/data.hpp"
#include "train/io.hpp"
#include "train/model.hpp"
#include "train_test_util.hpp"

namespace {

using namespace fk_train_test;
namespace fs = std::filesystem;
namespace tr = flashkit::train;
using nlohmann::json;

// A repetitive corpus: a few fixed "sentences" of random ids, drawn in random order.
void write_corpus(const fs::path& file, int64_t vocab, int64_t n, uint64_t seed) {
  tr::Rng r(seed, 1);
  std::vector<std::vector<int32_t>> sentences(6);
  for (auto& s : sentences) {
    s.resize(size_t(5 + r.below(6)));
    for (auto& x : s) x = int32_t(r.below(uint64_t(vocab)));
  }
  std::vector<int32_t> ids;
  while (int64_t(ids.size()) < n) {
    const auto& s = sentences[size_t(r.below(sentences.size()))];
    ids.insert(ids.end(), s.begin(), s.end());
  }
  ids.resize(size_t(n));
  tr::write_token_file(file, ids, vocab);
}

json small_llama(int64_t vocab) {
  return {{"model_type", "llama"},      {"vocab_size", vocab},           {"hidden_size", 32},
          {"intermediate_size", 64},    {"num_hidden_layers", 2},        {"num_attention_heads", 4},
          {"num_key_value_heads", 2},   {"head_dim", 8},                 {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},      {"max_position_embeddings", 128}, {"tie_word_embeddings", true}};
}

json recipe_json(const json& model, const fs::path& dir, int64_t steps) {
  return {{"model", model},
          {"data", {{"train", (dir / "train.bin").string()}, {"val", (dir / "val.bin").string()}}},
          {"train",
           {{"steps", steps}, {"batch_size", 4}, {"seq_len", 32}, {"lr", 3e-3}, {"warmup_steps", 10},
            {"weight_decay", 0.01}, {"seed", 7}}},
          {"eval", {{"interval", 0}, {"batches", 2}}},
          {"log", {{"interval", 1000}}},
          {"output", {{"dir", (dir / "run").string()}}},
          {"threads", 2}};
}

tr::Recipe recipe(const json& j, const fs::path& dir) {
  const fs::path f = dir / "recipe.json";
  std::ofstream(f) << j.dump(2);
  return tr::load_recipe(f);
}

TEST(Training, LossHalvesIn200StepsOnARepetitiveCorpus) {
  const fs::path dir = temp_dir("loss");
  write_corpus(dir / "train.bin", 64, 20000, 1);
  write_corpus(dir / "val.bin", 64, 2000, 1);  // same sentences, other draws
  double first = -1, last = -1, val = -1;
  tr::TrainOptions o;
  o.quiet = true;
  tr::Recipe r = recipe(recipe_json(small_llama(64), dir, 200), dir);
  r.log_interval = 1;
  o.on_report = [&](const tr::StepReport& rep) {
    if (first < 0) first = rep.loss;
    last = rep.loss;
    if (rep.val_loss >= 0) val = rep.val_loss;
  };
  const tr::TrainResult res = tr::train(r, o);
  std::printf("[ train ] 200 steps: loss %.3f -> %.3f, validation %.3f\n", first, last, val);
  EXPECT_NEAR(first, std::log(64.0), 0.1);
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  EXPECT_GE(val, 0.0);
  EXPECT_LT(val, 0.5 * first);
  EXPECT_TRUE(fs::exists(res.model_dir / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "run" / "log.jsonl"));
  std::ifstream log(dir / "run" / "log.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) {
    const json rec = json::parse(line);
    EXPECT_TRUE(rec.contains("loss") && rec.contains("lr") && rec.contains("grad_norm") && rec.contains("tokens_per_s"));
    ++lines;
  }
  EXPECT_EQ(lines, 200);
  fs::remove_all(dir);
}

// Trainer forward vs the engine on the exported directory (f32, rel 1e-4), for both architectures.
void export_matches_engine(const json& model_json) {
  const fs::path dir = temp_dir("export");
  const auto cfg = cfg_of(model_json);
  const int64_t V = cfg.vocab_size;
  write_corpus(dir / "train.bin", V, 5000, 2);
  json rj = recipe_json(model_json, dir, 20);
  rj["data"].erase("val");
  rj["train"]["lr"] = 1e-2;
  tr::TrainOptions o;
  o.quiet = true;
  const tr::TrainResult res = tr::train(recipe(rj, dir), o);

  // the trainer's forward on the trained weights (loaded back from the checkpoint)
  auto be = tr::make_cpu_backend(DType::f32, 2);
  const int64_t T = 29;
  tr::TrainModel m(cfg, *be, 1, T);
  const auto st = flashkit::model::open_safetensors(res.checkpoint_dir / "state.safetensors");
  be->upload(m.params(), st->get("params").data, size_t(m.table().size()) * 4);
  tr::Rng r(5, 5);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& x : ids) x = int32_t(r.below(uint64_t(V)));
  std::vector<float> mine(size_t(T * V));
  m.logits(ids.data(), 1, T, mine.data());

  auto model = flashkit::Model::load(res.model_dir);
  auto s = model->new_session();
  s->prefill(ids, true);
  const std::vector<float>& eng = s->all_logits();
  ASSERT_EQ(eng.size(), mine.size());
  std::vector<double> a(mine.begin(), mine.end()), b(eng.begin(), eng.end());
  EXPECT_LT(rel_err(a, b), 1e-4);
  std::printf("[ train ] %s: engine vs trainer logits, relative error %.2e\n", cfg.model_type.c_str(), rel_err(a, b));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> ra(a.begin() + t * V, a.begin() + (t + 1) * V), rb(b.begin() + t * V, b.begin() + (t + 1) * V);
    EXPECT_LT(rel_err(ra, rb), 1e-4) << "row " << t;
  }
  fs::remove_all(dir);
}

TEST(Training, ExportedLlamaGivesTheTrainersLogitsInTheEngine) {
  json j = small_llama(53);
  j["tie_word_embeddings"] = false;
  j["attn_logit_softcapping"] = 20.0;
  export_matches_engine(j);
}
TEST(Training, ExportedGemmaGivesTheTrainersLogitsInTheEngine) {
  json j = tiny_gemma_json(47);
  j["sliding_window"] = 8;
  j["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention"};
  export_matches_engine(j);
}

// flashkit perplexity's computation through the engine equals the trainer's loss on the same windows.
TEST(Training, PerplexityThroughTheEngineMatchesTheTrainersLoss) {
  const fs::path dir = temp_dir("ppl");
  json mj = small_llama(61);
  write_corpus(dir / "train.bin", 61, 5000, 4);
  json rj = recipe_json(mj, dir, 10);
  rj["data"].erase("val");
  tr::TrainOptions o;
  o.quiet = true;
  const tr::TrainResult res = tr::train(recipe(rj, dir), o);
  auto model = flashkit::Model::load(res.model_dir);
  tr::Rng r(8, 8);
  std::vector<int32_t> text(40);
  for (auto& x : text) x = int32_t(r.below(60));
  const int32_t bos = 60;
  // one window holding everything: every text token scored once, with BOS first
  const auto whole = tr::perplexity(*model, text, 41, 39, bos);
  EXPECT_EQ(whole.tokens, 40);
  auto be = tr::make_cpu_backend(DType::f32, 2);
  tr::TrainModel m(cfg_of(mj), *be, 1, 40);
  const auto st = flashkit::model::open_safetensors(res.checkpoint_dir / "state.safetensors");
  be->upload(m.params(), st->get("params").data, size_t(m.table().size()) * 4);
  std::vector<int32_t> ids = {bos};
  ids.insert(ids.end(), text.begin(), text.end() - 1);
  const auto ls = m.step(ids.data(), text.data(), 1, 40, false, 1.f);
  EXPECT_NEAR(whole.mean_nll, ls.sum / 40, 1e-4);
  for (float x : whole.nll) EXPECT_GT(x, 0.f);
  // strided windows: still every token once; without BOS the first token is not scored
  for (int64_t stride : {1, 5, 11}) {
    EXPECT_EQ(tr::perplexity(*model, text, 12, stride, bos).tokens, 40);
    EXPECT_EQ(tr::perplexity(*model, text, 12, stride, -1).tokens, 39);
  }
  // progress: called before every window with the tokens scored so far, rising, below the total it names
  for (int32_t b : {bos, int32_t(-1)}) {
    std::vector<std::pair<int64_t, int64_t>> calls;
    const auto r = tr::perplexity(*model, text, 12, 5, b, [&](int64_t s, int64_t t) { calls.emplace_back(s, t); });
    ASSERT_GE(calls.size(), 2u);
    EXPECT_EQ(calls.front().first, 0);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].second, r.tokens);
      EXPECT_LT(calls[i].first, r.tokens);
      if (i) EXPECT_GT(calls[i].first, calls[i - 1].first);
    }
  }
  // more context never hurts much on a model this small; the strided and single-window results agree roughly
  EXPECT_NEAR(tr::perplexity(*model, text, 12, 11, bos).mean_nll, whole.mean_nll, 0.5);
  EXPECT_THROW(tr::perplexity(*model, text, 12, 12, -1), flashkit::Error);
  fs::remove_all(dir);
}

std::string file_bytes(const fs::path& p) { return tr::read_file(p, "test file"); }

// 2N steps in one run == N steps, stop, resume for N more: params and both Adam moments bit for bit.
TEST(Training, ResumeIsBitIdentical) {
  const fs::path dir = temp_dir("resume");
  write_corpus(dir / "train.bin", 64, 20000, 3);
  json j = recipe_json(small_llama(64), dir, 24);
  j["data"].erase("val");
  j["train"]["grad_accum"] = 2;
  j["train"]["grad_clip"] = 0.5;  // clipping active: its norm is part of what must match
  tr::TrainOptions o;
  o.quiet = true;
  j["output"]["dir"] = (dir / "full").string();
  const auto full = tr::train(recipe(j, dir), o);
  j["output"]["dir"] = (dir / "parts").string();
  o.stop_at = 12;
  const auto first = tr::train(recipe(j, dir), o);
  EXPECT_EQ(first.steps, 12);
  EXPECT_FALSE(fs::exists(dir / "parts" / "model"));
  o.stop_at = 0;
  o.resume = dir / "parts";
  const auto second = tr::train(recipe(j, dir), o);
  EXPECT_EQ(second.steps, 24);
  const std::string a = file_bytes(full.checkpoint_dir / "state.safetensors"),
                    b = file_bytes(second.checkpoint_dir / "state.safetensors");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "the resumed run's state differs from the uninterrupted run's";
  EXPECT_TRUE(file_bytes(full.model_dir / "model.safetensors") == file_bytes(second.model_dir / "model.safetensors"));
  fs::remove_all(dir);
}

// Accumulating 2 micro-batches of 2 sequences gives the gradient of one batch of 4 (f64).
TEST(Training, GradientAccumulationEqualsOneBigBatch) {
  const auto cfg = cfg_of(tiny_llama_json());
  auto be = tr::make_cpu_backend(DType::f64, 2);
  const int64_t T = 5;
  tr::TrainModel big(cfg, *be, 4, T), small(cfg, *be, 2, T);
  big.init_weights(1);
  small.init_weights(1);
  tr::Rng r(9, 9);
  std::vector<int32_t> ids(20), tg(20);
  for (size_t i = 0; i < 20; ++i) ids[i] = int32_t(r.below(37)), tg[i] = int32_t(r.below(37));
  be->zero(big.grads());
  be->zero(small.grads());
  big.step(ids.data(), tg.data(), 4, T, true, 1.f / 20);
  small.step(ids.data(), tg.data(), 2, T, true, 1.f / 20);
  small.step(ids.data() + 10, tg.data() + 10, 2, T, true, 1.f / 20);
  EXPECT_LT(rel_err(get(*be, small.grads()), get(*be, big.grads())), 1e-13);
}

}  // namespace
