// Bad input: recipes with unknown or inconsistent fields (the field is named), missing corpora and token files,
// corrupt checkpoints to resume from, a NaN loss (the step is named, the last good checkpoint stays).
#include "flashkit/tuning.hpp"
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "flashkit/error.hpp"
#include "flashkit/train.hpp"
#include "train/data.hpp"
#include "train/io.hpp"
#include "train_test_util.hpp"

namespace {

using namespace fk_train_test;
namespace fs = std::filesystem;
namespace tr = flashkit::train;
using nlohmann::json;

json base_recipe(const fs::path& dir) {
  json model = tiny_llama_json(50);
  model["max_position_embeddings"] = 32;
  return {{"model", model},
          {"data", {{"train", (dir / "train.bin").string()}}},
          {"train", {{"steps", 6}, {"batch_size", 2}, {"seq_len", 8}, {"lr", 1e-2}, {"seed", 3}}},
          {"checkpoint", {{"interval", 2}, {"keep", 5}}},
          {"output", {{"dir", (dir / "run").string()}}},
          {"threads", 1}};
}

// The error message of parsing `j`, "" when it parses.
std::string recipe_error(const json& j) {
  try {
    tr::parse_recipe(j.dump(), "r.json");
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(TrainBadInput, RecipeFieldsAreNamed) {
  const fs::path dir = "/nonexistent";
  EXPECT_EQ(recipe_error(base_recipe(dir)), "");
  struct Case {
    std::function<void(json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["train"]["lrr"] = 1; }, "field \"train.lrr\": unknown field"},
      {[](json& j) { j["optimizer"] = json::object(); }, "field \"optimizer\": unknown field"},
      {[](json& j) { j["output"]["format"] = "x"; }, "field \"output.format\": unknown field"},
      {[](json& j) { j["train"]["warmup_steps"] = 7; }, "field \"train.warmup_steps\": is 7, more than train.steps"},
      {[](json& j) { j["train"]["seq_len"] = 64; }, "field \"train.seq_len\": 64 exceeds model.max_position_embeddings"},
      {[](json& j) { j["train"]["lr"] = -1; }, "field \"train.lr\": must be in"},
      {[](json& j) { j["train"]["batch_size"] = "4"; }, "field \"train.batch_size\": must be an integer"},
      {[](json& j) { j["train"].erase("steps"); }, "field \"train.steps\": missing"},
      {[](json& j) { j["data"].erase("train"); }, "field \"data.train\": missing"},
      {[](json& j) { j["eval"] = {{"interval", 5}}; }, "field \"eval.interval\": is set but data.val is not"},
      {[](json& j) { j["output"]["dtype"] = "fp8"; }, "field \"output.dtype\": \"fp8\""},
      {[](json& j) { j["device"] = "tpu"; }, "field \"device\": \"tpu\""},
      {[](json& j) { j["model"]["model_type"] = "qwen2"; }, "training supports llama, gemma3_text and mamba"},
      {[](json& j) { j["model"]["head_dim"] = 6; }, "head_dim 6: flashkit's attention needs a multiple of 8"},
      {[](json& j) { j["model"].erase("hidden_size"); }, "missing \"hidden_size\""},
      {[](json& j) { j.erase("model"); }, "missing the \"model\" block"},
  };
  for (const auto& c : cases) {
    json j = base_recipe(dir);
    c.edit(j);
    const std::string e = recipe_error(j);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "got: " << e << "\nwant: " << c.expect;
  }
  EXPECT_NE(recipe_error(json::parse("[1]")).find("must be a JSON object"), std::string::npos);
  try {
    tr::parse_recipe("{", "r.json");
    ADD_FAILURE();
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.json: invalid JSON"), std::string::npos);
  }
}

void write_tokens(const fs::path& f, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7 + i / 5) % vocab);
  tr::write_token_file(f, ids, vocab);
}

std::string train_error(const tr::Recipe& r, const tr::TrainOptions& o = {}) {
  try {
    tr::TrainOptions q = o;
    q.quiet = true;
    tr::train(r, q);
  } catch (const flashkit::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainBadInput, DataFilesAndTheirConsistency) {
  const fs::path dir = temp_dir("bad_data");
  tr::Recipe r = tr::parse_recipe(base_recipe(dir).dump(), "r.json");
  EXPECT_NE(train_error(r).find("train.bin: cannot open the token file"), std::string::npos);
  write_tokens(dir / "train.bin", 500, 80);  // ids beyond the model's 50
  EXPECT_NE(train_error(r).find("field \"model.vocab_size\": 50 is smaller than the 80 ids"), std::string::npos);
  write_tokens(dir / "train.bin", 6, 50);
  EXPECT_NE(train_error(r).find("field \"train.seq_len\""), std::string::npos);
  // a truncated token file
  write_tokens(dir / "train.bin", 500, 50);
  fs::resize_file(dir / "train.bin", fs::file_size(dir / "train.bin") - 3);
  EXPECT_NE(train_error(r).find("truncated"), std::string::npos);
  // an id beyond the vocabulary its header states
  {
    std::vector<int32_t> ids(100, 3);
    tr::write_token_file(dir / "train.bin", ids, 50);
    std::string bytes = tr::read_file(dir / "train.bin", "t");
    bytes[32 + 2 * 40] = char(60);  // token 40 becomes 60
    tr::write_file_atomic(dir / "train.bin", bytes);
    EXPECT_NE(train_error(r).find("token 40 is 60, outside the file's vocabulary of 50"), std::string::npos)
        << train_error(r);
  }
  // more memory than the machine has
  {
    write_tokens(dir / "train.bin", 500, 50);
    tr::Recipe big = r;
    big.batch_size = int64_t(1) << 30;  // ~10 TB of activations
    big.seq_len = 32;
    EXPECT_NE(train_error(big).find("fields \"train.batch_size\" x \"train.seq_len\""), std::string::npos)
        << train_error(big);
  }
  std::ofstream(dir / "junk.bin") << "this is not a token file at all, no no no";
  r.train_data = dir / "junk.bin";
  EXPECT_NE(train_error(r).find("not a flashkit token file"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "run")) << "nothing is written before the inputs are checked";
  // prepare-data: a missing corpus is named before anything is written
  tr::PrepareOptions po;
  po.tokenizer_dir = dir;
  po.inputs = {dir / "missing.txt"};
  po.output_dir = dir / "tokens";
  try {
    tr::prepare_data(po);
    ADD_FAILURE();
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt: no such corpus file"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "tokens"));
  try {
    tr::train_bpe({dir / "missing.txt"}, {}, dir / "tok");
    ADD_FAILURE();
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt: no such corpus file"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(TrainBadInput, CorruptCheckpointsAreRejected) {
  const fs::path dir = temp_dir("bad_ckpt");
  write_tokens(dir / "train.bin", 500, 50);
  json j = base_recipe(dir);
  tr::Recipe r = tr::parse_recipe(j.dump(), "r.json");
  tr::TrainOptions o;
  o.quiet = true;
  o.stop_at = 4;
  const auto res = tr::train(r, o);
  const fs::path ck = res.checkpoint_dir;
  const std::string good = tr::read_file(ck / "state.safetensors", "state");
  o.stop_at = 0;
  o.resume = dir / "run";
  // one flipped bit in the parameters
  std::string bad = good;
  bad[bad.size() - 100] ^= 1;
  tr::write_file_atomic(ck / "state.safetensors", bad);
  EXPECT_NE(train_error(r, o).find("checksum of \"adam_v\" does not match"), std::string::npos) << train_error(r, o);
  // truncated
  tr::write_file_atomic(ck / "state.safetensors", good.substr(0, good.size() / 2));
  EXPECT_NE(train_error(r, o).find("state.safetensors"), std::string::npos) << train_error(r, o);
  tr::write_file_atomic(ck / "state.safetensors", good);
  // garbage metadata
  const std::string meta = tr::read_file(ck / "trainer.json", "meta");
  tr::write_file_atomic(ck / "trainer.json", meta.substr(0, 40));
  EXPECT_NE(train_error(r, o).find("corrupt checkpoint metadata"), std::string::npos) << train_error(r, o);
  tr::write_file_atomic(ck / "trainer.json", meta);
  // another model
  tr::Recipe other = r;
  json m2 = json::parse(r.model_json);
  m2["intermediate_size"] = 24;
  other.model_json = m2.dump();
  EXPECT_NE(train_error(other, o).find("parameter table differs"), std::string::npos) << train_error(other, o);
  // another seed
  tr::Recipe seeded = r;
  seeded.seed = 4;
  EXPECT_NE(train_error(seeded, o).find("field \"train.seed\""), std::string::npos);
  // not a checkpoint at all
  o.resume = dir;
  EXPECT_NE(train_error(r, o).find("not a checkpoint"), std::string::npos) << train_error(r, o);
  o.resume = dir / "nope";
  EXPECT_NE(train_error(r, o).find("no such checkpoint"), std::string::npos);
  // after all that, the intact checkpoint still resumes
  o.resume = dir / "run";
  EXPECT_EQ(train_error(r, o), "");
  fs::remove_all(dir);
}

TEST(TrainBadInput, NanLossStopsNamingTheStepAndKeepsTheLastCheckpoint) {
  const fs::path dir = temp_dir("nan");
  write_tokens(dir / "train.bin", 500, 50);
  tr::Recipe r = tr::parse_recipe(base_recipe(dir).dump(), "r.json");
  const flashkit::Tuning saved = flashkit::default_tuning();
  flashkit::Tuning t = saved;
  t.train_inject_nan_step = 5;  // the test hook (FLASHKIT_TRAIN_INJECT_NAN_STEP at a front end)
  flashkit::set_default_tuning(t);
  const std::string e = train_error(r);
  flashkit::set_default_tuning(saved);
  EXPECT_NE(e.find("training diverged at step 5: the loss is NaN"), std::string::npos) << e;
  EXPECT_NE(e.find("last good checkpoint"), std::string::npos) << e;
  EXPECT_EQ(tr::read_file(dir / "run" / "checkpoints" / "latest", "latest"), "step_00000004\n");
  EXPECT_FALSE(fs::exists(dir / "run" / "model"));
  // the kept checkpoint resumes and finishes the run
  tr::TrainOptions o;
  o.resume = dir / "run";
  EXPECT_EQ(train_error(r, o), "");
  EXPECT_TRUE(fs::exists(dir / "run" / "model" / "model.safetensors"));
  fs::remove_all(dir);
}

}  // namespace
