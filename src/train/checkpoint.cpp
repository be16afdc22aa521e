// Checkpoints and the Hugging Face export (see checkpoint.hpp).
#include "train/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "model/weights.hpp"
#include "train/io.hpp"
#include "train/safetensors_writer.hpp"

namespace flashkit::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

constexpr const char* kFormat = "flashkit-train-checkpoint-v1";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

json table_json(const ParamTable& t) {
  json a = json::array();
  for (const auto& e : t.entries()) a.push_back({{"name", e.name}, {"offset", e.offset}, {"shape", e.shape}, {"decay", e.decay}});
  return a;
}

uint64_t checksum(const std::vector<float>& v) { return fnv1a64(v.data(), v.size() * 4); }

}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, const CheckpointState& s, const ParamTable& table, int64_t keep) {
  const fs::path root = run_dir / "checkpoints";
  fs::create_directories(root);
  const fs::path final_dir = root / step_name(s.step);
  const fs::path tmp = root / (step_name(s.step) + ".tmp" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const int64_t n = table.size();
  if (int64_t(s.params.size()) != n || int64_t(s.m.size()) != n || int64_t(s.v.size()) != n)
    fail(Status::internal, "checkpoint: arena sizes do not match the table");
  write_safetensors(tmp / "state.safetensors",
                    {{"params", "F32", {n}, s.params.data(), size_t(n) * 4},
                     {"adam_m", "F32", {n}, s.m.data(), size_t(n) * 4},
                     {"adam_v", "F32", {n}, s.v.data(), size_t(n) * 4}},
                    {{"format", kFormat}});
  json meta = {{"format", kFormat},
               {"step", s.step},
               {"seed", s.seed},
               {"model", s.model},
               {"data", s.data},
               {"table", table_json(table)},
               {"arena_size", n},
               {"checksums", {{"params", hex64(checksum(s.params))}, {"adam_m", hex64(checksum(s.m))},
                              {"adam_v", hex64(checksum(s.v))}}}};
  write_file_atomic(tmp / "trainer.json", meta.dump(2) + "\n");
  fsync_dir(tmp);
  // A checkpoint of this step may exist (a resumed run re-saving): replace it as a whole.
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    const fs::path old = root / (step_name(s.step) + ".old" + std::to_string(::getpid()));
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsync_dir(root);
  write_file_atomic(root / "latest", step_name(s.step) + "\n");
  // Keep the newest `keep` complete checkpoints (never the one `latest` names).
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string nm = e.path().filename().string();
    if (e.is_directory() && nm.rfind("step_", 0) == 0 && nm.find('.') == std::string::npos) steps.push_back(e.path());
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; keep > 0 && i + size_t(keep) < steps.size(); ++i)
    if (steps[i] != final_dir) fs::remove_all(steps[i], ec);
  return final_dir;
}

CheckpointState load_checkpoint(const fs::path& path, const ParamTable& table) {
  std::error_code ec;
  fs::path dir = path;
  if (!fs::exists(path, ec)) bad("--resume " + path.string() + ": no such checkpoint or run directory");
  if (fs::exists(path / "checkpoints" / "latest", ec)) dir = path / "checkpoints";
  if (fs::exists(dir / "latest", ec)) {
    std::string name = read_file(dir / "latest", "checkpoint pointer");
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (name.empty() || name.find('/') != std::string::npos)
      bad((dir / "latest").string() + ": does not name a checkpoint directory");
    dir /= name;
  }
  if (!fs::exists(dir / "trainer.json", ec))
    bad("--resume " + path.string() + ": not a checkpoint (no trainer.json, and no checkpoints/latest)");
  const fs::path meta_path = dir / "trainer.json";
  json meta;
  try {
    meta = json::parse(read_file(meta_path, "checkpoint metadata"));
  } catch (const json::exception& e) {
    bad(meta_path.string() + ": corrupt checkpoint metadata: " + e.what());
  }
  CheckpointState s;
  try {
    if (meta.value("format", "") != kFormat) bad(meta_path.string() + ": not a " + std::string(kFormat) + " file");
    s.step = meta.at("step").get<int64_t>();
    s.seed = meta.at("seed").get<uint64_t>();
    s.model = meta.at("model");
    s.data = meta.value("data", json::object());
    if (meta.at("table") != table_json(table))
      bad(meta_path.string() + ": the checkpoint's parameter table differs from this recipe's model (different "
                               "architecture or sizes)");
    if (meta.at("arena_size").get<int64_t>() != table.size()) bad(meta_path.string() + ": arena size mismatch");
  } catch (const json::exception& e) {
    bad(meta_path.string() + ": corrupt checkpoint metadata: " + e.what());
  }
  const fs::path st = dir / "state.safetensors";
  auto store = model::open_safetensors(st);
  const int64_t n = table.size();
  for (const char* name : {"params", "adam_m", "adam_v"}) {
    const model::WeightView* w = store->find(name);
    if (!w || w->type != model::WeightType::f32 || w->shape != std::vector<int64_t>{n})
      bad(st.string() + ": tensor \"" + name + "\" is missing or not f32 [" + std::to_string(n) + "]");
    std::vector<float>& dst = name[0] == 'p' ? s.params : (name[5] == 'm' ? s.m : s.v);
    dst.resize(size_t(n));
    std::memcpy(dst.data(), w->data, size_t(n) * 4);
    const std::string want = meta["checksums"].value(name, "");
    if (hex64(checksum(dst)) != want)
      bad(st.string() + ": checksum of \"" + name + "\" does not match trainer.json (corrupt checkpoint)");
  }
  return s;
}

void export_hf(const fs::path& out_dir, const json& model_block, const engine::ModelConfig& cfg,
               const ParamTable& table, const std::vector<float>& params, const std::string& dtype,
               const fs::path& tokenizer_dir) {
  if (dtype != "f32" && dtype != "bf16" && dtype != "f16")
    bad("export dtype \"" + dtype + "\": expected f32, bf16 or f16");
  const fs::path parent = out_dir.parent_path().empty() ? fs::path(".") : out_dir.parent_path();
  fs::create_directories(parent);
  const fs::path tmp = parent / (out_dir.filename().string() + ".tmp" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);

  json config = model_block;
  const bool gemma = cfg.arch == engine::Arch::gemma3;
  config["architectures"] = {cfg.arch == engine::Arch::mamba ? "MambaForCausalLM"
                             : gemma                          ? "Gemma3ForCausalLM"
                                                              : "LlamaForCausalLM"};
  config["torch_dtype"] = dtype == "f32" ? "float32" : dtype == "bf16" ? "bfloat16" : "float16";
  config["tie_word_embeddings"] = cfg.tie_embeddings;
  json gen = {{"_from_model_config", true}};
  if (!tokenizer_dir.empty()) {
    const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir);
    if (tok.bos_id() && !config.contains("bos_token_id")) config["bos_token_id"] = *tok.bos_id();
    const auto eos = tok.eos_ids();
    if (!eos.empty() && !config.contains("eos_token_id")) config["eos_token_id"] = eos.front();
    if (tok.bos_id()) gen["bos_token_id"] = *tok.bos_id();
    std::vector<int32_t> stops = eos;
    if (auto im_end = tok.token_id("<|im_end|>"))  // the chat template's end of turn
      if (std::find(stops.begin(), stops.end(), *im_end) == stops.end()) stops.push_back(*im_end);
    if (!stops.empty()) gen["eos_token_id"] = stops;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (fs::exists(tokenizer_dir / f, ec)) write_file_atomic(tmp / f, read_file(tokenizer_dir / f, f));
  }
  write_file_atomic(tmp / "config.json", config.dump(2) + "\n");
  write_file_atomic(tmp / "generation_config.json", gen.dump(2) + "\n");

  const std::string st_dtype = dtype == "f32" ? "F32" : dtype == "bf16" ? "BF16" : "F16";
  const size_t es = dtype == "f32" ? 4 : 2;
  std::vector<std::vector<uint16_t>> narrow;
  std::vector<SafetensorsEntry> entries;
  std::vector<const ParamEntry*> sorted;
  for (const auto& e : table.entries()) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  narrow.reserve(sorted.size());
  for (const ParamEntry* e : sorted) {
    const float* src = params.data() + e->offset;
    const size_t n = size_t(e->numel());
    if (es == 4) {
      entries.push_back({e->name, st_dtype, e->shape, src, n * 4});
    } else {
      narrow.emplace_back(n);
      auto& h = narrow.back();
      for (size_t i = 0; i < n; ++i) h[i] = dtype == "bf16" ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      entries.push_back({e->name, st_dtype, e->shape, h.data(), n * 2});
    }
  }
  write_safetensors(tmp / "model.safetensors", entries, {{"format", "pt"}});
  fsync_dir(tmp);
  if (fs::exists(out_dir, ec)) {
    const fs::path old = parent / (out_dir.filename().string() + ".old" + std::to_string(::getpid()));
    fs::remove_all(old, ec);
    fs::rename(out_dir, old);
    fs::rename(tmp, out_dir);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, out_dir);
  }
  fsync_dir(parent);
}

void write_step_dump(const fs::path& dir, const StepDump& d, const json& model_block, const engine::ModelConfig& cfg,
                     const ParamTable& table, const std::vector<float>& params, const std::vector<float>& grads,
                     const fs::path& tokenizer_dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) bad("--dump-step1 " + dir.string() + ": cannot create the directory: " + ec.message());
  export_hf(dir / "model", model_block, cfg, table, params, "f32", tokenizer_dir);
  std::vector<SafetensorsEntry> entries;
  json norms = json::object();
  for (const auto& e : table.entries()) {
    const float* g = grads.data() + e.offset;
    double sq = 0;
    for (int64_t i = 0; i < e.numel(); ++i) sq += double(g[i]) * double(g[i]);
    norms[e.name] = std::sqrt(sq);
    entries.push_back({e.name, "F32", e.shape, g, size_t(e.numel()) * 4});
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  write_safetensors(dir / "grads.safetensors", entries, {{"format", "pt"}});
  json ids = json::array(), targets = json::array();
  for (int64_t r = 0; r < d.rows; ++r) {
    ids.push_back(std::vector<int32_t>(d.ids + r * d.seq_len, d.ids + (r + 1) * d.seq_len));
    targets.push_back(std::vector<int32_t>(d.targets + r * d.seq_len, d.targets + (r + 1) * d.seq_len));
  }
  const json meta = {{"format", "flashkit-train-step-dump-v1"},
                     {"step", d.step},
                     {"device", d.device},
                     {"backend", d.backend},
                     {"loss", d.loss},
                     {"loss_is", "mean cross-entropy over the targets that are not -1 (natural log)"},
                     {"grad_norm", d.grad_norm},
                     {"grads_are", "d loss / d parameter at the weights in model/, before clipping and the update"},
                     {"grad_norms", norms},
                     {"ids", ids},
                     {"targets", targets}};
  write_file_atomic(dir / "step.json", meta.dump() + "\n");
}

}  // namespace flashkit::train
