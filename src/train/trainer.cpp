// The training loop: data -> micro-batches -> gradients (accumulated) -> clip -> AdamW, with the warmup + cosine
// schedule, progress lines and a JSON-lines log, validation, checkpoints, the NaN/inf guard and the final export.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/train.hpp"
#include "flashkit/tuning.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/io.hpp"
#include "train/model.hpp"

namespace flashkit::train {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

double lr_at(const Recipe& r, int64_t s) {  // s: 0-based step index
  if (s < r.warmup_steps) return r.lr * double(s + 1) / double(r.warmup_steps);
  const double span = double(std::max<int64_t>(1, r.steps - r.warmup_steps - 1));
  const double progress = std::min(1.0, double(s - r.warmup_steps) / span);
  const double lo = r.lr * r.min_lr_ratio;
  return lo + 0.5 * (r.lr - lo) * (1.0 + std::cos(M_PI * progress));
}

std::string human_time(double s) {
  char buf[64];
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

}  // namespace

TrainResult train(const Recipe& r, const TrainOptions& o) {
  const json model_json = json::parse(r.model_json);
  const engine::ModelConfig cfg = engine::parse_config(model_json, r.source + ": model");
  check_trainable(cfg, r.source + ": model");
  // Inputs and their consistency with the model before anything is allocated or written.
  TokenFile train_f(r.train_data);
  std::unique_ptr<TokenFile> val_f;
  if (!r.val_data.empty()) val_f = std::make_unique<TokenFile>(r.val_data);
  for (const TokenFile* f : {static_cast<const TokenFile*>(&train_f), static_cast<const TokenFile*>(val_f.get())}) {
    if (!f) continue;
    if (f->vocab_size() > cfg.vocab_size)
      bad(r.source + ": field \"model.vocab_size\": " + std::to_string(cfg.vocab_size) + " is smaller than the " +
          std::to_string(f->vocab_size()) + " ids of " + f->path().string());
  }
  if (train_f.size() <= r.seq_len)
    bad(r.source + ": field \"train.seq_len\": " + train_f.path().string() + " holds " + std::to_string(train_f.size()) +
        " tokens, fewer than seq_len + 1 = " + std::to_string(r.seq_len + 1));
  if (val_f && val_f->size() <= r.seq_len)
    bad(r.source + ": field \"data.val\": " + val_f->path().string() + " holds " + std::to_string(val_f->size()) +
        " tokens, fewer than seq_len + 1 = " + std::to_string(r.seq_len + 1));
  std::error_code ec;
  // A fresh run never overwrites an earlier one's log, checkpoints or model.
  if (o.resume.empty() && fs::exists(r.output_dir / "checkpoints" / "latest", ec))
    bad(r.source + ": field \"output.dir\": " + r.output_dir.string() +
        " already holds a run (checkpoints/latest); continue it with --resume " + r.output_dir.string() +
        " or choose another output directory");
  if (!r.tokenizer.empty() && !fs::exists(r.tokenizer / "tokenizer.json", ec))
    bad(r.source + ": field \"data.tokenizer\": " + r.tokenizer.string() + " has no tokenizer.json");

  if (r.device == "cpu") {  // refuse what cannot fit before allocating (the moments add 2 x parameters)
    const double need = TrainModel::memory_bytes(cfg, r.batch_size, r.seq_len);
    const double have = double(physical_memory_bytes());
    if (need > 0.9 * have)
      bad(r.source + ": fields \"train.batch_size\" x \"train.seq_len\" (" + std::to_string(r.batch_size) + " x " +
          std::to_string(r.seq_len) + "): training needs about " + std::to_string(int64_t(need / (1 << 30))) +
          " GiB, the machine has " + std::to_string(int64_t(have / (1 << 30))) +
          " GiB (use a smaller batch_size and more grad_accum)");
  }
  std::unique_ptr<Backend> be;
  if (r.device == "cpu") {
    be = make_cpu_backend(DType::f32, r.threads);
  } else {
    int index = 0;
    if (r.device.size() > 5) index = std::atoi(r.device.c_str() + 5);
    be = make_cuda_backend(index);
  }
  TrainModel model(cfg, *be, r.batch_size, r.seq_len);
  const ParamTable& table = model.table();
  const DType P = be->param_dtype();
  Mat adam_m = be->alloc(P, 1, table.size()), adam_v = be->alloc(P, 1, table.size());
  struct Free {
    Backend& be;
    Mat& a;
    Mat& b;
    ~Free() { be.free(a), be.free(b); }
  } free_moments{*be, adam_m, adam_v};

  if (!o.dump_first_step.empty() && !o.resume.empty())
    bad("--dump-step1 writes the first step of a fresh run; it cannot be combined with --resume");
  int64_t start = 0;
  if (!o.resume.empty()) {
    CheckpointState s = load_checkpoint(o.resume, table);
    if (s.model != model_json)
      bad("--resume " + o.resume.string() + ": the checkpoint was trained with a different \"model\" block than " +
          r.source);
    if (s.seed != r.seed)
      bad("--resume " + o.resume.string() + ": field \"train.seed\": the checkpoint used seed " + std::to_string(s.seed) +
          ", the recipe says " + std::to_string(r.seed) + " (the data order follows the seed)");
    be->upload(model.params(), s.params.data(), s.params.size() * 4);
    be->upload(adam_m, s.m.data(), s.m.size() * 4);
    be->upload(adam_v, s.v.data(), s.v.size() * 4);
    be->params_updated(model.params());
    start = s.step;
    if (start > r.steps)
      bad("--resume " + o.resume.string() + ": the checkpoint is at step " + std::to_string(start) +
          ", beyond train.steps = " + std::to_string(r.steps));
  } else {
    model.init_weights(r.seed);
  }

  fs::create_directories(r.output_dir);
  if (!r.text.empty()) write_file_atomic(r.output_dir / "recipe.json", r.text);
  std::ofstream log(r.output_dir / "log.jsonl", start > 0 ? std::ios::app : std::ios::trunc);
  if (!log) bad((r.output_dir / "log.jsonl").string() + ": cannot write the training log");

  const int64_t B = r.batch_size, T = r.seq_len, A = r.grad_accum, N = B * T;
  const int64_t decay_end = table.decay_end();
  const int64_t nodecay_begin = (decay_end + 15) / 16 * 16;
  const Mat params = model.params(), grads = model.grads();
  const double flops_tok = model.flops_per_token(T);
  std::vector<int32_t> ids(size_t(N * A)), tg(size_t(N * A));
  const int64_t nan_step = default_tuning().train_inject_nan_step;  // tests poison the loss of that step

  auto evaluate = [&]() {
    double sum = 0;
    int64_t count = 0;
    for (int64_t k = 0; k < r.eval_batches; ++k) {
      eval_batch(*val_f, k, B, T, ids.data(), tg.data());
      const LossSum ls = model.step(ids.data(), tg.data(), B, T, false, 1.f);
      sum += ls.sum;
      count += ls.count;
    }
    return sum / double(std::max<int64_t>(1, count));
  };
  auto host = [&](const Mat& m) {
    std::vector<float> v(size_t(m.numel()));
    be->download(v.data(), m, v.size() * 4);
    return v;
  };
  TrainResult result;
  result.parameters = table.parameter_count();
  auto checkpoint = [&](int64_t step) {
    CheckpointState s;
    s.step = step;
    s.seed = r.seed;
    s.model = model_json;
    s.data = {{"train", r.train_data.string()}, {"train_tokens", train_f.size()}};
    s.params = host(params);
    s.m = host(adam_m);
    s.v = host(adam_v);
    result.checkpoint_dir = save_checkpoint(r.output_dir, s, table, r.keep_checkpoints);
  };

  const auto t_start = Clock::now();
  auto t_last = t_start;
  int64_t steps_since = 0;
  double last_loss = 0;
  const int64_t end = o.stop_at > 0 ? std::min(o.stop_at, r.steps) : r.steps;
  for (int64_t s = start; s < end; ++s) {
    be->zero(grads);
    for (int64_t a = 0; a < A; ++a) sample_batch(train_f, r.seed, s, a, B, T, ids.data() + a * N, tg.data() + a * N);
    int64_t count = 0;
    for (int64_t i = 0; i < N * A; ++i) count += tg[size_t(i)] >= 0;
    const float gscale = 1.f / float(std::max<int64_t>(1, count));
    double sum = 0;
    for (int64_t a = 0; a < A; ++a) sum += model.step(ids.data() + a * N, tg.data() + a * N, B, T, true, gscale).sum;
    double loss = sum / double(std::max<int64_t>(1, count));
    if (s + 1 == nan_step) loss = std::nan("");
    const double gnorm = std::sqrt(be->global_norm_sq(grads));
    if (!o.dump_first_step.empty() && s == start) {  // before the NaN guard: a diverging first step is worth seeing
      StepDump d;
      d.step = s + 1;
      d.rows = B * A;
      d.seq_len = T;
      d.ids = ids.data();
      d.targets = tg.data();
      d.loss = loss;
      d.grad_norm = gnorm;
      d.device = r.device;
      d.backend = be->name();
      write_step_dump(o.dump_first_step, d, model_json, cfg, table, host(params), host(grads), r.tokenizer);
    }
    if (!std::isfinite(loss) || !std::isfinite(gnorm)) {
      log.flush();
      fail(Status::internal, std::string("training diverged at step ") + std::to_string(s + 1) + ": " +
                                 (!std::isfinite(loss) ? "the loss" : "the gradient norm") + " is " +
                                 (std::isnan(!std::isfinite(loss) ? loss : gnorm) ? "NaN" : "infinite") +
                                 "; the weights were not updated" +
                                 (result.checkpoint_dir.empty() && start == 0
                                      ? std::string(" (no checkpoint was written yet)")
                                      : "; the last good checkpoint stays in " + (r.output_dir / "checkpoints").string()) +
                                 " (lower train.lr, raise train.warmup_steps or set train.grad_clip)");
    }
    last_loss = loss;
    const double lr = lr_at(r, s);
    AdamW h;
    h.lr = float(lr);
    h.beta1 = float(r.beta1);
    h.beta2 = float(r.beta2);
    h.eps = float(r.adam_eps);
    h.grad_scale = r.grad_clip > 0 && gnorm > r.grad_clip ? float(r.grad_clip / gnorm) : 1.f;
    h.step = s + 1;
    h.weight_decay = float(r.weight_decay);
    be->adamw_step(params.view(0, 1, decay_end), grads.view(0, 1, decay_end), adam_m.view(0, 1, decay_end),
                   adam_v.view(0, 1, decay_end), h);
    h.weight_decay = 0;  // embeddings and norms
    const int64_t n2 = table.size() - nodecay_begin;
    be->adamw_step(params.view(nodecay_begin, 1, n2), grads.view(nodecay_begin, 1, n2),
                   adam_m.view(nodecay_begin, 1, n2), adam_v.view(nodecay_begin, 1, n2), h);
    be->params_updated(params);
    ++steps_since;

    const int64_t done = s + 1;
    const bool report = done % r.log_interval == 0 || done == end;
    const bool eval = val_f && ((r.eval_interval > 0 && done % r.eval_interval == 0) || done == r.steps);
    if (report || eval) {
      const auto now = Clock::now();
      StepReport rep;
      rep.step = done;
      rep.total_steps = r.steps;
      rep.loss = loss;
      rep.lr = lr;
      rep.grad_norm = gnorm;
      const double dt = std::chrono::duration<double>(now - t_last).count();
      rep.tokens_per_s = dt > 0 ? double(steps_since * N * A) / dt : 0;
      rep.mfu = r.peak_tflops > 0 ? flops_tok * rep.tokens_per_s / (r.peak_tflops * 1e12) : 0;
      rep.elapsed_s = std::chrono::duration<double>(now - t_start).count();
      rep.eta_s = rep.elapsed_s / double(done - start) * double(r.steps - done);
      if (eval) rep.val_loss = result.final_val_loss = evaluate();
      json rec = {{"step", done},      {"loss", loss},          {"lr", lr}, {"grad_norm", gnorm},
                  {"tokens_per_s", rep.tokens_per_s}, {"elapsed_s", rep.elapsed_s}};
      if (r.peak_tflops > 0) rec["mfu"] = rep.mfu;
      if (eval) rec["val_loss"] = rep.val_loss;
      log << rec.dump() << "\n";
      log.flush();
      if (!o.quiet) {
        char mfu[32] = "-", line[512];
        if (r.peak_tflops > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * rep.mfu);
        std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.3e | gnorm %.3f | %.0f tok/s | MFU %s | ETA %s",
                      static_cast<long long>(done), static_cast<long long>(r.steps), loss, lr, gnorm,
                      rep.tokens_per_s, mfu, human_time(rep.eta_s).c_str());
        std::cerr << line;
        if (eval) std::fprintf(stderr, " | val %.4f", rep.val_loss);
        std::cerr << std::endl;
      }
      if (o.on_report) o.on_report(rep);
      t_last = Clock::now();
      steps_since = 0;
    }
    if (r.checkpoint_interval > 0 && done % r.checkpoint_interval == 0 && done != end) checkpoint(done);
  }
  if (start < end || result.checkpoint_dir.empty()) checkpoint(end);
  result.steps = end;
  result.final_loss = last_loss;
  if (end < r.steps) return result;  // interrupted on purpose: the checkpoint is the result
  result.model_dir = r.model_dir.empty() ? r.output_dir / "model" : r.model_dir;
  export_hf(result.model_dir, model_json, cfg, table, host(params), r.export_dtype, r.tokenizer);
  return result;
}

}  // namespace flashkit::train
