// Recipe JSON -> Recipe, strictly: every unknown field and every inconsistent value is an error naming the field.
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "flashkit/error.hpp"
#include "flashkit/train.hpp"
#include "train/model.hpp"

namespace flashkit::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class Reader {
 public:
  Reader(const json& j, std::string where, std::string prefix) : j_(j), where_(std::move(where)), prefix_(std::move(prefix)) {
    if (!j_.is_object()) bad(prefix_.empty() ? "the recipe must be a JSON object" : "must be an object");
  }
  [[noreturn]] void bad(const std::string& what, const std::string& key = "") const {
    const std::string field = prefix_ + (prefix_.empty() || key.empty() ? "" : ".") + key;
    fail(Status::invalid_argument, where_ + ": " + (field.empty() ? "" : "field \"" + field + "\": ") + what);
  }
  bool has(const char* k) const { return j_.contains(k) && !j_[k].is_null(); }
  const json& raw(const char* k) const {
    seen_.insert(k);
    return j_[k];
  }
  template <class I>
  void integer(const char* k, I& out, int64_t lo, int64_t hi) const {
    seen_.insert(k);
    if (!has(k)) return;
    const json& v = j_[k];
    if (!v.is_number_integer()) bad("must be an integer", k);
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) bad("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(x), k);
    out = I(x);
  }
  void number(const char* k, double& out, double lo, double hi, bool lo_open = false) const {
    seen_.insert(k);
    if (!has(k)) return;
    const json& v = j_[k];
    if (!v.is_number()) bad("must be a number", k);
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
      std::ostringstream ss;
      ss << "must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "], got " << x;
      bad(ss.str(), k);
    }
    out = x;
  }
  void string(const char* k, std::string& out) const {
    seen_.insert(k);
    if (!has(k)) return;
    if (!j_[k].is_string()) bad("must be a string", k);
    out = j_[k].get<std::string>();
  }
  void path(const char* k, fs::path& out) const {
    std::string s;
    string(k, s);
    if (!s.empty()) out = s;
  }
  Reader section(const char* k) const {
    seen_.insert(k);
    static const json empty = json::object();
    if (!has(k)) return Reader(empty, where_, prefix_.empty() ? k : prefix_ + "." + k);
    if (!j_[k].is_object()) bad("must be an object", k);
    return Reader(j_[k], where_, prefix_.empty() ? k : prefix_ + "." + k);
  }
  // Every key must have been read.
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) bad("unknown field (see docs/training.md for the recipe's fields)", it.key());
  }

 private:
  const json& j_;
  std::string where_, prefix_;
  mutable std::set<std::string> seen_;
};

}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(Status::invalid_argument, where + ": invalid JSON: " + e.what());
  }
  Recipe r;
  r.source = where;
  r.text = text;
  const Reader top(j, where, "");
  if (!top.has("model")) top.bad("missing the \"model\" block (a Hugging Face config.json: llama, gemma3_text or mamba)");
  const json& model = top.raw("model");
  if (!model.is_object()) top.bad("must be an object", "model");
  engine::ModelConfig cfg;
  try {
    cfg = engine::parse_config(model, where + ": model");
  } catch (const json::exception& e) {
    top.bad(e.what(), "model");
  }
  check_trainable(cfg, where + ": model");
  r.model_json = model.dump();

  const Reader data = top.section("data");
  data.path("train", r.train_data);
  data.path("val", r.val_data);
  data.path("tokenizer", r.tokenizer);
  data.finish();
  if (r.train_data.empty()) data.bad("missing (a token file made by `flashkit prepare-data`)", "train");

  const Reader tr = top.section("train");
  tr.integer("steps", r.steps, 1, int64_t(1) << 40);
  tr.integer("batch_size", r.batch_size, 1, 1 << 20);
  tr.integer("seq_len", r.seq_len, 2, 1 << 20);
  tr.integer("grad_accum", r.grad_accum, 1, 1 << 20);
  tr.number("lr", r.lr, 0, 10, true);
  tr.number("min_lr_ratio", r.min_lr_ratio, 0, 1);
  tr.integer("warmup_steps", r.warmup_steps, 0, int64_t(1) << 40);
  tr.number("weight_decay", r.weight_decay, 0, 10);
  tr.number("beta1", r.beta1, 0, 1);
  tr.number("beta2", r.beta2, 0, 1);
  tr.number("adam_eps", r.adam_eps, 0, 1, true);
  tr.number("grad_clip", r.grad_clip, 0, 1e9);
  tr.integer("seed", r.seed, 0, int64_t(1) << 62);
  tr.finish();
  if (r.steps == 0) tr.bad("missing (the number of optimizer steps)", "steps");
  if (r.batch_size == 0) tr.bad("missing (sequences per micro-batch)", "batch_size");
  if (r.seq_len == 0) tr.bad("missing (tokens per sequence)", "seq_len");
  if (r.beta1 >= 1 || r.beta2 >= 1) tr.bad("must be < 1", r.beta1 >= 1 ? "beta1" : "beta2");
  if (r.warmup_steps > r.steps)
    tr.bad("is " + std::to_string(r.warmup_steps) + ", more than train.steps (" + std::to_string(r.steps) + ")",
           "warmup_steps");
  if (r.seq_len > cfg.max_position)
    tr.bad(std::to_string(r.seq_len) + " exceeds model.max_position_embeddings (" + std::to_string(cfg.max_position) +
               ")",
           "seq_len");

  const Reader ev = top.section("eval");
  ev.integer("interval", r.eval_interval, 0, int64_t(1) << 40);
  ev.integer("batches", r.eval_batches, 1, 1 << 20);
  ev.finish();
  if (r.eval_interval > 0 && r.val_data.empty()) ev.bad("is set but data.val is not", "interval");

  const Reader ck = top.section("checkpoint");
  ck.integer("interval", r.checkpoint_interval, 0, int64_t(1) << 40);
  ck.integer("keep", r.keep_checkpoints, 1, 1 << 20);
  ck.finish();

  const Reader lg = top.section("log");
  lg.integer("interval", r.log_interval, 1, int64_t(1) << 40);
  lg.number("peak_tflops", r.peak_tflops, 0, 1e6);
  lg.finish();

  const Reader out = top.section("output");
  out.path("dir", r.output_dir);
  out.path("model_dir", r.model_dir);
  out.string("dtype", r.export_dtype);
  out.finish();
  if (r.output_dir.empty()) out.bad("missing (the run directory: checkpoints, log.jsonl, model)", "dir");
  if (r.export_dtype != "f32" && r.export_dtype != "bf16" && r.export_dtype != "f16")
    out.bad("\"" + r.export_dtype + "\": expected f32, bf16 or f16", "dtype");

  top.string("device", r.device);
  if (r.device != "cpu" && r.device != "cuda" && r.device.rfind("cuda:", 0) != 0)
    top.bad("\"" + r.device + "\": expected cpu, cuda or cuda:N", "device");
  top.integer("threads", r.threads, 0, 4096);
  top.finish();
  return r;
}

Recipe load_recipe(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) fail(Status::invalid_argument, file.string() + ": cannot read the recipe");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_recipe(ss.str(), file.string());
}

}  // namespace flashkit::train
