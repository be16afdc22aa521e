// The training loop: data -> micro-batches -> gradients (accumulated) -> clip -> AdamW, with the warmup + cosine
// schedule, progress lines and a JSON-lines log, validation, checkpoints, the NaN/inf guard and the final export.
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
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
#include "dist/comm.hpp"
#include "train/checkpoint.hpp"
#include "train/data_parallel.hpp"
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

// One rank's training loop (all of it when comm has one rank): the recipe's batch_size is the global batch, of
// which this rank runs rows [rank * B / ranks, (rank + 1) * B / ranks) of every micro-batch. Rank 0 alone writes
// the log, checkpoints and the exported model.
TrainResult train_rank(const Recipe& r, const TrainOptions& o, dist::Communicator& comm, int threads) {
  const int ranks = comm.size(), rank = comm.rank();
  const bool writer = rank == 0;
  const bool quiet = o.quiet || !writer;
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
    const double need = TrainModel::memory_bytes(cfg, r.batch_size / ranks, r.seq_len) * ranks;
    const double have = double(physical_memory_bytes());
    if (need > 0.9 * have)
      bad(r.source + ": fields \"train.batch_size\" x \"train.seq_len\" (" + std::to_string(r.batch_size) + " x " +
          std::to_string(r.seq_len) + "): training needs about " + std::to_string(int64_t(need / (1 << 30))) +
          " GiB, the machine has " + std::to_string(int64_t(have / (1 << 30))) +
          " GiB (use a smaller batch_size and more grad_accum)");
  }
  std::unique_ptr<Backend> be;
  if (r.device == "cpu") {
    be = make_cpu_backend(DType::f32, threads);
  } else {
    int index = 0;
    if (r.device.size() > 5) index = std::atoi(r.device.c_str() + 5);
    be = make_cuda_backend(index + (comm.kind() == std::string("nccl") ? rank : 0));
  }
  const int64_t Bl = r.batch_size / ranks;  // this rank's rows of every micro-batch
  TrainModel model(cfg, *be, Bl, r.seq_len);
  const ParamTable& table = model.table();
  const DType P = be->param_dtype();
  DataParallel dp(comm, *be, table, o.grad_bucket_elems);
  const Range shard = dp.shard();  // the arena range whose AdamW moments this rank keeps (ZeRO-1)
  Mat adam_m = be->alloc(P, 1, dp.shard_len()), adam_v = be->alloc(P, 1, dp.shard_len());
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
    if (shard.size() > 0) {
      be->upload(adam_m, s.m.data() + shard.begin, size_t(shard.size()) * 4);
      be->upload(adam_v, s.v.data() + shard.begin, size_t(shard.size()) * 4);
    }
    be->params_updated(model.params());
    start = s.step;
    if (start > r.steps)
      bad("--resume " + o.resume.string() + ": the checkpoint is at step " + std::to_string(start) +
          ", beyond train.steps = " + std::to_string(r.steps));
  } else {
    model.init_weights(r.seed);
  }

  std::ofstream log;
  if (writer) {
    fs::create_directories(r.output_dir);
    if (!r.text.empty()) write_file_atomic(r.output_dir / "recipe.json", r.text);
    log.open(r.output_dir / "log.jsonl", start > 0 ? std::ios::app : std::ios::trunc);
    if (!log) bad((r.output_dir / "log.jsonl").string() + ": cannot write the training log");
  }

  const int64_t B = r.batch_size, T = r.seq_len, A = r.grad_accum, N = B * T;
  const int64_t row0 = int64_t(rank) * Bl * T;  // this rank's first token of a micro-batch
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
      const LossSum ls = model.step(ids.data() + row0, tg.data() + row0, Bl, T, false, 1.f);
      sum += ls.sum;
      count += ls.count;
    }
    double totals[2] = {sum, double(count)};
    dp.all_reduce_host(totals, 2);
    return totals[0] / std::max(1.0, totals[1]);
  };
  auto host = [&](const Mat& m) {
    std::vector<float> v(size_t(m.numel()));
    be->download(v.data(), m, v.size() * 4);
    return v;
  };
  TrainResult result;
  result.parameters = table.parameter_count();
  // The whole moment arenas (gathered from every rank's shard; every rank takes part, rank 0 writes).
  auto host_moment = [&](const Mat& shard_m) {
    if (ranks == 1) return host(shard_m);
    Mat whole = be->alloc(P, 1, table.size());
    dp.gather_shards(shard_m, whole);
    std::vector<float> v = host(whole);
    be->free(whole);
    return v;
  };
  bool checkpointed = false;  // on every rank (result.checkpoint_dir is rank 0's)
  auto checkpoint = [&](int64_t step) {
    checkpointed = true;
    std::vector<float> m = host_moment(adam_m), v = host_moment(adam_v);
    if (!writer) return;
    CheckpointState s;
    s.step = step;
    s.seed = r.seed;
    s.model = model_json;
    s.data = {{"train", r.train_data.string()}, {"train_tokens", train_f.size()}};
    s.params = host(params);
    s.m = std::move(m);
    s.v = std::move(v);
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
    for (int64_t a = 0; a < A; ++a) {
      // The last micro-batch's backward hands each layer's final gradients to the all-reduce as it goes.
      const bool overlap = ranks > 1 && o.overlap_grad_comm && a == A - 1;
      if (overlap) {
        dp.begin_overlap(grads);
        model.set_layer_grads_hook([&dp](int64_t layer) { dp.layer_done(layer); });
      }
      sum += model.step(ids.data() + a * N + row0, tg.data() + a * N + row0, Bl, T, true, gscale).sum;
      if (overlap) {
        model.set_layer_grads_hook({});
        dp.finish_overlap();
      }
    }
    if (!o.overlap_grad_comm) dp.all_reduce_grads(grads);  // every rank now holds the global batch's gradient
    dp.all_reduce_host(&sum, 1);
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
    if (!std::isfinite(loss) || !std::isfinite(gnorm)) {  // every rank sees the same loss and norm
      if (writer) log.flush();
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
    // This rank's shard only (all of it with one rank): the decayed matrices, then embeddings and norms.
    const int64_t d0 = shard.begin, d1 = std::min(shard.end, decay_end);
    if (d1 > d0)
      be->adamw_step(params.view(d0, 1, d1 - d0), grads.view(d0, 1, d1 - d0), adam_m.view(d0 - shard.begin, 1, d1 - d0),
                     adam_v.view(d0 - shard.begin, 1, d1 - d0), h);
    h.weight_decay = 0;  // embeddings and norms
    const int64_t n0 = std::max(shard.begin, nodecay_begin), n1 = shard.end;
    if (n1 > n0)
      be->adamw_step(params.view(n0, 1, n1 - n0), grads.view(n0, 1, n1 - n0), adam_m.view(n0 - shard.begin, 1, n1 - n0),
                     adam_v.view(n0 - shard.begin, 1, n1 - n0), h);
    dp.all_gather_params(params);
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
      if (writer) {  // the other ranks only take part in the evaluation
        json rec = {{"step", done},      {"loss", loss},          {"lr", lr}, {"grad_norm", gnorm},
                    {"tokens_per_s", rep.tokens_per_s}, {"elapsed_s", rep.elapsed_s}};
        if (r.peak_tflops > 0) rec["mfu"] = rep.mfu;
        if (eval) rec["val_loss"] = rep.val_loss;
        log << rec.dump() << "\n";
        log.flush();
        if (!quiet) {
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
      }
      t_last = Clock::now();
      steps_since = 0;
    }
    if (r.checkpoint_interval > 0 && done % r.checkpoint_interval == 0 && done != end) checkpoint(done);
  }
  if (start < end || !checkpointed) checkpoint(end);
  result.steps = end;
  result.final_loss = last_loss;
  if (end < r.steps) return result;  // interrupted on purpose: the checkpoint is the result
  result.model_dir = r.model_dir.empty() ? r.output_dir / "model" : r.model_dir;
  std::vector<float> final_params = host(params);
  if (!writer) return result;
  export_hf(result.model_dir, model_json, cfg, table, final_params, r.export_dtype, r.tokenizer);
  return result;
}

// data_parallel thread ranks on the CPU, each with its share of the threads; the first error (not a peer's
// "aborted") is rethrown after every rank stopped.
TrainResult train_thread_ranks(const Recipe& r, const TrainOptions& o) {
  const int dp = o.data_parallel;
  auto comms = dist::make_thread_ranks(dp);
  const int total = r.threads > 0 ? r.threads : num_threads();
  const int each = std::max(1, total / dp);
  std::vector<TrainResult> results(static_cast<size_t>(dp));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(dp));
  std::vector<int> order(static_cast<size_t>(dp), -1);  // the order in which ranks failed
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < dp; ++k)
    threads.emplace_back([&, k] {
      try {
        results[size_t(k)] = train_rank(r, o, *comms[size_t(k)], each);
      } catch (...) {
        errors[size_t(k)] = std::current_exception();
        order[size_t(k)] = failures++;
        comms[size_t(k)]->abort("training failed");
      }
    });
  for (auto& t : threads) t.join();
  int first = -1;
  for (int k = 0; k < dp; ++k)
    if (errors[size_t(k)] && (first < 0 || order[size_t(k)] < order[size_t(first)])) first = k;
  if (first >= 0) std::rethrow_exception(errors[size_t(first)]);
  return results[0];
}

TrainResult train(const Recipe& r, const TrainOptions& o) {
  const int dp = o.data_parallel;
  if (dp < 1) bad("data_parallel (--dp): must be >= 1, got " + std::to_string(dp));
  if (dp > 1 && r.batch_size % dp != 0)
    bad("data_parallel (--dp " + std::to_string(dp) + "): " + r.source + "'s field \"train.batch_size\" (" +
        std::to_string(r.batch_size) + ") does not split into " + std::to_string(dp) +
        " equal shares (the batch is the global batch; use a multiple of " + std::to_string(dp) + ")");
  if (dp > 1 && !o.dump_first_step.empty()) bad("--dump-step1 needs --dp 1 (it writes one process's first step)");
  if (dp == 1) {
    auto comm = dist::make_single_rank();
    return train_rank(r, o, *comm, r.threads);
  }
  if (r.device == "cpu" || o.dp_threads) return train_thread_ranks(r, o);
  // CUDA: this process is rank o.dp_rank of dp processes (the CLI launched them), one GPU each, over NCCL.
  if (!dist::nccl_built())
    fail(Status::unsupported, "data_parallel (--dp " + std::to_string(dp) +
                                  ") on " + r.device + " needs NCCL: this flashkit was built without it (FLASHKIT_NCCL)");
  if (o.dp_rank < 0 || o.dp_rank >= dp)
    bad("dp_rank: must be in [0, " + std::to_string(dp) + "), got " + std::to_string(o.dp_rank));
  if (o.dp_rendezvous.empty()) bad("dp_rendezvous: a file path is needed for the NCCL id exchange");
  int base = 0;
  if (r.device.size() > 5) base = std::atoi(r.device.c_str() + 5);
  const dist::NcclId id = dist::exchange_nccl_id(o.dp_rendezvous.string(), o.dp_rank);
  auto comm = dist::make_nccl(o.dp_rank, dp, base + o.dp_rank, id);
  try {
    return train_rank(r, o, *comm, r.threads);
  } catch (...) {
    comm->abort("training failed");
    throw;
  }
}

}  // namespace flashkit::train
