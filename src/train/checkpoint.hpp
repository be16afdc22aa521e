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

// The verification dump of one training step (`flashkit train --dump-step1 DIR`; tools/gpu/train_hf_check.py
// compares it with PyTorch autograd): DIR/model (the weights the step started from, as an f32 Hugging Face
// directory), DIR/grads.safetensors (f32, the parameter names of the export: the gradient of the mean loss over
// the step's targets, before clipping and the update) and DIR/step.json (the batch's ids and targets, one row per
// sequence of every micro-batch, the loss, the gradient norm and every tensor's L2 norm). Not atomic as a whole.
struct StepDump {
  int64_t step = 0, rows = 0, seq_len = 0;
  const int32_t* ids = nullptr;      // rows x seq_len
  const int32_t* targets = nullptr;  // rows x seq_len, -1: ignored
  double loss = 0, grad_norm = 0;
  std::string device, backend;
};
void write_step_dump(const std::filesystem::path& dir, const StepDump& d, const nlohmann::json& model_block,
                     const engine::ModelConfig& cfg, const ParamTable& table, const std::vector<float>& params,
                     const std::vector<float>& grads, const std::filesystem::path& tokenizer_dir);

}  // namespace flashkit::train
