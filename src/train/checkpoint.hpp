// Checkpoints (resumable training state) and the final Hugging Face model directory.
//
// A checkpoint is a directory OUT/checkpoints/step_NNNNNNNN/ with
//   state.safetensors  params, adam_m, adam_v: the three f32 arenas, flat
//   trainer.json       step, seed, the model config, the parameter table, data files, checksums of the arenas
// written into a temporary directory, every file fsynced, then renamed into place; OUT/checkpoints/latest (the
// name of the newest complete checkpoint) is replaced atomically afterwards. A crash at any point leaves `latest`
// naming a complete checkpoint. Since the data order and every random draw are functions of (seed, step), the step
// counter is the whole data-loader / RNG state.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "train/arena.hpp"

namespace flashkit::train {

struct CheckpointState {
  int64_t step = 0;
  uint64_t seed = 0;
  nlohmann::json model;          // the recipe's model block
  nlohmann::json data;           // {"train": path, "train_tokens": n, ...}
  std::vector<float> params, m, v;
};

// Writes dir/checkpoints/step_N and points `latest` at it; deletes older step_* directories beyond `keep`.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, const CheckpointState& s,
                                      const ParamTable& table, int64_t keep);
// `path`: a run directory (its checkpoints/latest), a checkpoints/ directory, or one step_N directory. Verifies
// the table against `table`, the sizes and the checksums; throws invalid_argument naming the file otherwise.
CheckpointState load_checkpoint(const std::filesystem::path& path, const ParamTable& table);

// The Hugging Face directory: config.json (the model block + architectures, dtype, bos/eos ids), model.safetensors
// (dtype f32 | bf16 | f16), the tokenizer files copied from tokenizer_dir (if any), generation_config.json. Written
// into a temporary directory and renamed over `out_dir`.
void export_hf(const std::filesystem::path& out_dir, const nlohmann::json& model_block,
               const engine::ModelConfig& cfg, const ParamTable& table, const std::vector<float>& params,
               const std::string& dtype, const std::filesystem::path& tokenizer_dir);

}  // namespace flashkit::train
